package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
)

// LockFileName is the cluster's lock in its state directory.
const LockFileName = statedir.LockFile

// The Lease, in the cluster's own API server, that Apply holds while it
// changes the cluster: rigger processes with different state directories
// (a laptop, a serve running elsewhere) see each other there.
const (
	ClusterLeaseNamespace = "kube-system"
	ClusterLeaseName      = "rigger-apply"
)

// Lock is the cluster's lock held by this process for one command (apply,
// serve, snapshot restore, …). Apply and Remove take it as a parameter:
// they change the cluster only under it; Apply takes the cluster's Lease
// as the same command.
type Lock struct {
	command string
	release func()
}

// Release gives the lock up; calling it again, or on a nil or zero Lock,
// does nothing.
func (l *Lock) Release() {
	if l != nil && l.release != nil {
		l.release()
	}
}

// Lock takes the cluster's lock, a file in the state directory, for the
// command named: two rigger processes with the same state directory never
// change the cluster at once. Without wait, a lock held by another process
// is a *stall.Error (stall.LockHeld) around a *lock.HeldError that names the
// holder; with wait, Lock waits until it is free or ctx ends. A holder
// that dies releases the lock with it.
func (s *Session) Lock(ctx context.Context, command string, wait bool) (*Lock, error) {
	if err := os.MkdirAll(s.opts.StateDir, 0o700); err != nil {
		return nil, stall.Retries(stall.Failed, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err))
	}
	rel, err := lock.File(ctx, filepath.Join(s.opts.StateDir, LockFileName), lock.Me(command, s.opts.Now()), wait)
	var held *lock.HeldError
	switch {
	case errors.As(err, &held):
		return nil, stall.Retries(stall.LockHeld, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err))
	case err != nil:
		return nil, stall.Retries(stall.Failed, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err))
	}
	return &Lock{command: command, release: sync.OnceFunc(func() {
		if err := rel(); err != nil {
			s.opts.Log.Warn("release the cluster's lock", "cluster", s.c.ClusterName, "err", err)
		}
	})}, nil
}

// clusterLeaseTiming outlasts an API server's restart: with one
// controlplane node, an apply that replaces kube-apiserver cannot renew the
// Lease until the new one answers.
var clusterLeaseTiming = lock.LeaseTiming{Duration: time.Minute, RenewDeadline: 45 * time.Second, RetryPeriod: 5 * time.Second}

// leaseCluster takes the cluster's Lease (ClusterLeaseNamespace/
// ClusterLeaseName) through cs for command, waiting for it when o.Wait;
// release gives it up. The Lease of a holder that crashed on this machine
// is taken over at once (lock.Lease).
//
// It fails closed: when the API server answers but the Lease cannot be
// taken (held by another rigger, forbidden, a server error that lasts),
// the apply is refused. Only an API server that does not answer at all (a
// new cluster, a control plane down; nil cs: no controlplane node
// reachable) lets the apply go on without the Lease, with the state
// directory's lock alone, which the log says; so does down, set when the
// plan saw why the API servers cannot answer (no node runs an etcd
// member), without asking them. Losing the Lease midway (the API server down longer
// than the lease lasts) is logged, not fatal: stopping an apply halfway
// would do more harm.
func (s *Session) leaseCluster(ctx context.Context, cs kubernetes.Interface, down error, command string, o lock.LeaseOptions) (func(), error) {
	desc := "lease " + ClusterLeaseNamespace + "/" + ClusterLeaseName
	withoutLease := func(why string, err error) (func(), error) {
		s.opts.Log.Warn(why+": going on without the cluster's Lease, with the state directory's lock alone",
			"cluster", s.c.ClusterName, "lease", ClusterLeaseNamespace+"/"+ClusterLeaseName, "reason", err)
		return func() {}, nil
	}
	if cs == nil {
		return withoutLease("no controlplane node is reachable", errors.New("no API server to ask"))
	}
	if down != nil {
		return withoutLease("the cluster's API servers cannot answer (a new cluster, or no etcd member running)", down)
	}
	o.Timing.Now = s.opts.Now
	if o.Log == nil {
		o.Log = s.opts.Log.With("cluster", s.c.ClusterName)
	}
	held, giveUp, err := lock.Lease(ctx, cs, ClusterLeaseNamespace, ClusterLeaseName, lock.Me(command, s.opts.Now()), o)
	var taken *lock.HeldError
	var noAnswer *lock.NoAnswerError
	switch {
	case errors.As(err, &taken):
		return nil, stall.Retries(stall.LockHeld, fmt.Errorf("cluster %s is being changed by another rigger: %w", s.c.ClusterName, err))
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("lease cluster %s: %w", s.c.ClusterName, err)
	case errors.As(err, &noAnswer):
		return withoutLease("the cluster's API server does not answer (a new cluster, or its control plane down)", noAnswer.Err)
	case err != nil:
		return nil, stall.Retries(stall.Failed, fmt.Errorf("cluster %s: not changed without its %s, which the API server does not give: %w; "+
			"rigger holds it while it applies so that no other rigger changes the cluster at once: "+
			"fix what the API server says (the admin certificate's rights to Leases in %s, the API server's health), then apply again",
			s.c.ClusterName, desc, err, ClusterLeaseNamespace))
	}
	stop := context.AfterFunc(held, func() {
		if errors.Is(context.Cause(held), lock.ErrLost) {
			s.opts.Log.Warn("the cluster's Lease was lost during the apply (the API server did not answer for too long)",
				"cluster", s.c.ClusterName)
		}
	})
	return func() {
		stop()
		giveUp()
	}, nil
}
