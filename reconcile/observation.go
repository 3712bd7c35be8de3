package reconcile

import (
	"context"
	"slices"
	"time"

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
	})
}

// observeEtcd reads the etcd cluster's membership into o when a member
// answers; without one (a new cluster, or every member down) o.Etcd stays
// nil, with o.EtcdErr saying why, and the plan makes no membership change.
func (s *Session) observeEtcd(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	if len(s.c.Services.Etcd.ExternalURLs) > 0 {
		return
	}
	cli, err := s.services().EtcdClient(ctx, set, o)
	if err != nil {
		o.EtcdErr = err
		return
	}
	defer cli.Close()
	members, err := cli.Members(ctx)
	if err != nil {
		s.opts.Log.Warn("etcd membership not read", "cluster", s.c.ClusterName, "error", err)
		o.EtcdErr = err
		return
	}
	o.Etcd = &observe.Etcd{Members: members}
}

// nodeListTimeout bounds the listing of the Nodes, its retries included:
// an API server that does not answer makes the plan go on without them.
// Right after an etcd member goes away, the API server answers a
// resource's first call with a 500 after about 10 s, until its etcd client
// gives the member up; the next call is answered. One such answer must not
// leave the plan without the Nodes, and so without the add-ons' plan (the
// network plugin was then applied again, another 30 s of such answers).
const nodeListTimeout = 15 * time.Second

// observeKubernetes lists the Nodes into o and links them to the machines
// of cluster.yml (observe.Link by address label or hostname).
func (s *Session) observeKubernetes(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	o.Kubernetes = &observe.Kubernetes{}
	cs, err := s.services().KubeClient(set, o)
	if err != nil {
		o.Kubernetes.Err = err
		return
	}
	lctx, cancel := context.WithTimeout(ctx, nodeListTimeout)
	defer cancel()
	nodes, err := kubenode.ListNodes(lctx, cs)
	if err != nil {
		o.Kubernetes.Err = err
		return
	}
	o.Kubernetes.Nodes = nodes
	o.Kubernetes.Link = kubenode.Link(kubenode.Machines(s.c), nodes)
}
