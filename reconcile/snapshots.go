package reconcile

import (
	"context"
	"fmt"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/stall"
)

// Etcd is the value the cluster's etcd snapshot operations work on
// (etcdsnap.Save, List, Delete, Restore, Scheduled, RunRestoreRequest),
// with the cluster's certificates (PKI). A restore re-applies cluster.yml
// under lk, the cluster's lock, which it needs; with lk nil, Restore
// refuses.
func (s *Session) Etcd(ctx context.Context, lk *Lock) (*etcdsnap.Cluster, error) {
	set, err := s.PKI(ctx)
	if err != nil {
		return nil, err
	}
	d, err := desired.Build(s.c)
	if err != nil {
		return nil, stall.Stalls(stall.InvalidSpec, fmt.Errorf("build desired state: %w", err))
	}
	ec := s.etcdOps(set, d)
	if lk != nil {
		ec.Reapply = func(ctx context.Context, hooks plan.Hooks) (error, error) {
			pl, err := s.Plan(ctx)
			if err != nil {
				return nil, fmt.Errorf("plan: %w", err)
			}
			res, err := s.Apply(ctx, lk, pl, ApplyOptions{Hooks: hooks, AddonsErrInResult: true})
			return res.AddonsErr, err
		}
		ec.Members = func(ctx context.Context) ([]etcdmember.Member, error) {
			o := s.observeNodes(ctx, false, 0)
			cli, err := s.services().EtcdClient(ctx, set, o)
			if err != nil {
				return nil, err
			}
			defer cli.Close()
			return cli.Members(ctx)
		}
	}
	return ec, nil
}
