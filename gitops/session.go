package gitops

import (
	"context"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/etcdsnap"
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
	Plan(ctx context.Context) (*decide.Planned, error)
	Apply(ctx context.Context, lk *reconcile.Lock, pl *decide.Planned, o reconcile.ApplyOptions) (*reconcile.Result, error)
	ScheduledSnapshot(ctx context.Context, lk *reconcile.Lock) (*etcdsnap.ScheduledResult, error)
	Close() error
}

// Opener opens a Session on a loaded cluster.yml (reconcile.Open).
type Opener func(c *spec.Cluster, opts reconcile.Options) (Session, error)

// openReconcile is the Opener of rigger serve: a real reconcile session.
func openReconcile(c *spec.Cluster, opts reconcile.Options) (Session, error) {
	s, err := reconcile.Open(c, opts)
	if err != nil {
		return nil, err
	}
	return NewEngine(s, c, opts.StateDir), nil
}

// NewEngine is the Session of s, the reconcile session of c whose state
// directory is stateDir.
func NewEngine(s *reconcile.Session, c *spec.Cluster, stateDir string) Session {
	return engine{Session: s, c: c, dir: stateDir}
}

// engine is a reconcile session with the etcd snapshot work of package
// etcdsnap over its Etcd value: the restore cluster.yml requests, and the
// schedule's ticks.
type engine struct {
	*reconcile.Session
	c   *spec.Cluster
	dir string
}

var _ Session = engine{}

// RestoreRequest is the restore cluster.yml requests, with the record of
// its id when it was carried out already; nil when it requests none.
func (e engine) RestoreRequest() (*etcdsnap.RestoreRequest, error) {
	return etcdsnap.RequestedRestore(e.dir, e.c.Restore)
}

// RestorePending carries out the restore cluster.yml requests, when its
// id was not carried out yet (etcdsnap.RunRestoreRequest), under lk; nil,
// nil when none is pending.
func (e engine) RestorePending(ctx context.Context, lk *reconcile.Lock, o etcdsnap.RestoreOptions) (*etcdsnap.RestoreResult, error) {
	req, err := etcdsnap.PendingRestore(e.dir, e.c.Restore)
	if err != nil || req == nil {
		return nil, err
	}
	ec, err := e.Etcd(ctx, lk)
	if err != nil {
		return nil, err
	}
	return etcdsnap.RunRestoreRequest(ctx, ec, e.dir, req, o)
}

// ScheduledSnapshot is one tick of the etcd snapshot schedule
// (etcdsnap.Scheduled) under lk.
func (e engine) ScheduledSnapshot(ctx context.Context, lk *reconcile.Lock) (*etcdsnap.ScheduledResult, error) {
	ec, err := e.Etcd(ctx, lk)
	if err != nil {
		return nil, err
	}
	return etcdsnap.Scheduled(ctx, ec)
}
