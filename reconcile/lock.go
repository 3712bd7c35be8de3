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
)

// LockFileName is the cluster's lock in its state directory.
const LockFileName = "lock"

// The Lease, in the cluster's own API server, that Apply holds while it
// changes the cluster: rigger processes with different state directories
// (a laptop, a serve running elsewhere) see each other there.
const (
	ClusterLeaseNamespace = "kube-system"
	ClusterLeaseName      = "rigger-apply"
)

// Lock is the cluster's lock held by this process for one command (apply,
// serve, snapshot restore, …). Apply and Remove take it as a parameter:
// they change the cluster only under it, and take the cluster's Lease as
// the same command, waiting for it as Lock waited.
type Lock struct {
	command string
	wait    bool
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
// is an *Error (ReasonLockHeld) around a *lock.HeldError that names the
// holder; with wait, Lock waits until it is free or ctx ends. A holder
// that dies releases the lock with it.
func (s *Session) Lock(ctx context.Context, command string, wait bool) (*Lock, error) {
	if err := os.MkdirAll(s.opts.StateDir, 0o700); err != nil {
		return nil, retries(ReasonFailed, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err))
	}
	rel, err := lock.File(ctx, filepath.Join(s.opts.StateDir, LockFileName), lock.Me(command, s.opts.Now()), wait)
	var held *lock.HeldError
	switch {
	case errors.As(err, &held):
		return nil, retries(ReasonLockHeld, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err))
	case err != nil:
		return nil, retries(ReasonFailed, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err))
	}
	return &Lock{command: command, wait: wait, release: sync.OnceFunc(func() {
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
// ClusterLeaseName) through cs for lk's command, waiting for it as lk
// did; release gives it up. Losing it midway (the API server down longer
// than the lease lasts) is logged, not fatal: stopping an apply halfway
// would do more harm. A nil cs (the API server did not answer the plan: a
// new cluster, a control plane down) has no Lease to take: the apply goes
// on with the state directory's lock alone.
func (s *Session) leaseCluster(ctx context.Context, cs kubernetes.Interface, lk *Lock) (func(), error) {
	none := func() {}
	if cs == nil {
		return none, nil
	}
	timing := clusterLeaseTiming
	timing.Now = s.opts.Now
	h := lock.Me(lk.command, s.opts.Now())
	held, giveUp, err := lock.Lease(ctx, cs, ClusterLeaseNamespace, ClusterLeaseName, h, false, timing)
	var taken *lock.HeldError
	if errors.As(err, &taken) && lk.wait {
		s.opts.Log.Warn("waiting for the cluster's Lease", "cluster", s.c.ClusterName, "holder", taken.Holder.ID)
		held, giveUp, err = lock.Lease(ctx, cs, ClusterLeaseNamespace, ClusterLeaseName, h, true, timing)
	}
	switch {
	case errors.As(err, &taken):
		return nil, retries(ReasonLockHeld, fmt.Errorf("cluster %s is being changed by another rigger: %w", s.c.ClusterName, err))
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("lease cluster %s: %w", s.c.ClusterName, err)
	case err != nil:
		s.opts.Log.Warn("the cluster's Lease could not be taken; going on with the state directory's lock alone",
			"cluster", s.c.ClusterName, "err", err)
		return none, nil
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
