package reconcile

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"slices"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
)

// observeNodes reads the nodes of cluster.yml and those of the last apply
// that left it (rigger keeps no other inventory of removed nodes); keep
// keeps the files' contents, for a state directory that recovers its
// certificates or key from them.
func (s *Session) observeNodes(ctx context.Context, keep bool) *observe.Cluster {
	addrs := make([]string, 0, len(s.c.Nodes)+len(s.former))
	for _, n := range slices.Concat(s.c.Nodes, s.former) {
		addrs = append(addrs, n.Address)
	}
	return observe.Observe(ctx, s.tr, observe.Request{
		Cluster: s.c.ClusterName, Nodes: addrs, MaxParallel: s.c.Rigger.MaxParallel,
		FilesImage: s.c.SystemImages.Alpine, FilesDir: desired.KubernetesDir, KeepFiles: keep, Now: s.opts.Now,
		Timeline: s.opts.Timeline,
	})
}

// observeEtcd reads the etcd cluster's membership into o
// (observe.EtcdMembers), unless rigger runs no etcd (external_urls).
func (s *Session) observeEtcd(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	if len(s.c.Services.Etcd.ExternalURLs) > 0 {
		return
	}
	err := observe.EtcdMembers(ctx, o, func(ctx context.Context) (observe.MemberLister, error) {
		return s.services().EtcdClient(ctx, set, o)
	})
	if err != nil {
		s.opts.Log.Warn("etcd membership not read", "cluster", s.c.ClusterName, "error", err)
	}
}

// observeKubernetes lists the Nodes into o and links them to the machines
// of cluster.yml (observe.Nodes).
func (s *Session) observeKubernetes(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	var machines []observe.Machine
	for _, m := range kubenode.Machines(s.c) {
		machines = append(machines, observe.Machine{Address: m.Address, Hostname: m.Hostname})
	}
	observe.Nodes(ctx, o, machines, func(ctx context.Context) ([]corev1.Node, error) {
		cs, err := s.services().KubeClient(set, o)
		if err != nil {
			return nil, err
		}
		return kubenode.ListNodes(ctx, cs)
	})
}
