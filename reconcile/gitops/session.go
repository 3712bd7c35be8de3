package gitops

import (
	"context"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/spec"
)

// Session is what a worker does with a cluster: the methods of
// *reconcile.Session it calls, and nothing else. It exists so that the
// worker's decisions (retries, backoff, drift, suspend, conditions) are
// tested without nodes (see the fake in worker_test.go).
type Session interface {
	Lock(ctx context.Context, command string, wait bool) (*reconcile.Lock, error)
	RestoreRequest() (*etcdsnap.RestoreRequest, error)
	RestorePending(ctx context.Context, lk *reconcile.Lock, o etcdsnap.RestoreOptions) (*etcdsnap.RestoreResult, error)
	Plan(ctx context.Context) (*reconcile.Planned, error)
	Apply(ctx context.Context, lk *reconcile.Lock, pl *reconcile.Planned, o reconcile.ApplyOptions) (*execute.Result, error)
	Status(ctx context.Context) (*reconcile.Status, *reconcile.Planned, error)
	ScheduledSnapshot(ctx context.Context, lk *reconcile.Lock) (*etcdsnap.ScheduledResult, error)
	Close() error
}

var _ Session = (*reconcile.Session)(nil)

// Opener opens a Session on a loaded cluster.yml (reconcile.Open).
type Opener func(c *spec.Cluster, opts reconcile.Options) (Session, error)

// openReconcile is the Opener of rigger serve: a real reconcile session.
func openReconcile(c *spec.Cluster, opts reconcile.Options) (Session, error) {
	s, err := reconcile.Open(c, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}
