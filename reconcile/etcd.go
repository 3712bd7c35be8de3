package reconcile

import (
	"context"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/pki"
)

// etcdOps is the value the snapshot operations (package etcdsnap) work on,
// for the cluster whose certificates are set and desired state d. It can
// save, list and delete; Etcd adds what a restore needs.
func (s *Session) etcdOps(set *pki.Set, d *desired.Cluster) *etcdsnap.Cluster {
	return &etcdsnap.Cluster{
		Name: s.c.ClusterName, KubernetesVersion: s.c.KubernetesVersion,
		Desired: d, Backup: s.c.Services.Etcd.BackupConfig, External: len(s.c.Services.Etcd.ExternalURLs) > 0,
		PKI:         set,
		Engine:      s.docker,
		Dial:        s.tr.Dial,
		HelperImage: s.c.SystemImages.Alpine,
		MaxParallel: s.c.Rigger.MaxParallel,
		Log:         s.opts.Log,
		Now:         s.opts.Now,
		Taker:       "rigger serve",
		Slots: func(ctx context.Context) (etcdsnap.SlotStore, func(), error) {
			cli, err := s.services().EtcdClient(ctx, set, s.observeNodes(ctx, false, 0))
			if err != nil {
				return nil, nil, err
			}
			return cli, func() { cli.Close() }, nil
		},
	}
}
