package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/storedapi"
	"github.com/rigger/rigger/reconcile/sysaddons"
)

// observeNodes reads the nodes of cluster.yml and those of the last apply
// that left it (rigger keeps no other inventory of removed nodes); keep
// keeps the files' contents, for a state directory that recovers its
// certificates or key from them. sinceApply, when not zero, is how long
// ago the last apply ended (observe.Request.SinceApply).
func (s *Session) observeNodes(ctx context.Context, keep bool, sinceApply time.Duration) *observe.Cluster {
	addrs := make([]string, 0, len(s.c.Nodes)+len(s.former))
	for _, n := range slices.Concat(s.c.Nodes, s.former) {
		addrs = append(addrs, n.Address)
	}
	return observe.Observe(ctx, s.tr, observe.Request{
		Cluster: s.c.ClusterName, Nodes: addrs, MaxParallel: s.c.Rigger.MaxParallel,
		FilesImage: s.c.SystemImages.Alpine, FilesDir: desired.KubernetesDir, KeepFiles: keep, SinceApply: sinceApply, Now: s.opts.Now,
		Timeline: s.opts.Timeline,
	})
}

// observeWithPKI reads with the plan's PKI (set) into o, at once, etcd's
// members (observeEtcd) and the Nodes (observeKubernetes); afterEtcd and
// afterNodes, when set, run once each is read, alongside the other.
func (s *Session) observeWithPKI(ctx context.Context, set *pki.Set, o *observe.Cluster, afterEtcd, afterNodes func(context.Context)) {
	tl := s.opts.Timeline
	var wg sync.WaitGroup
	wg.Go(func() {
		end := tl.Begin("observe etcd's members")
		s.observeEtcd(ctx, set, o)
		if afterEtcd != nil {
			afterEtcd(ctx)
		}
		end()
	})
	wg.Go(func() {
		end := tl.Begin("observe the Kubernetes Nodes")
		s.observeKubernetes(ctx, set, o)
		end()
		if afterNodes != nil {
			afterNodes(ctx)
		}
	})
	wg.Wait()
}

// Doctor walks the nodes through the path a node takes to join the
// cluster (doctor.Run) over one read of the cluster, made as a plan makes
// it (observe, observeWithPKI: the nodes with their files, the PKI, etcd's
// members and the Nodes), with the connections its checks read more
// through. It changes nothing, on the nodes or in the state directory. A
// cluster.yml that does not build is its one finding; a node in o.Nodes
// that cluster.yml does not have is an error, before anything is read.
func (s *Session) Doctor(ctx context.Context, o doctor.RunOptions) ([]doctor.Finding, error) {
	d, err := desired.Build(s.c)
	if err != nil {
		return doctor.Unbuilt(err), nil
	}
	if _, err := doctor.SelectNodes(d, o.Nodes); err != nil {
		return nil, err
	}
	dc := &doctor.Cluster{Spec: s.c, Desired: d, Request: s.req, IgnoreDockerVersion: s.opts.IgnoreDockerVersion, Now: s.opts.Now()}
	st, since, err := s.loadState()
	var rp *pkisource.Resolved
	if err == nil {
		dc.Observed, rp, err = s.observe(ctx, decide.Input{Spec: s.c, StateDir: s.opts.StateDir, State: st, Now: dc.Now}, since, true)
	} else {
		dc.Observed = s.observeNodes(ctx, true, 0)
	}
	dc.PKIErr = err
	reads := &doctor.Reads{
		Engine: func(ctx context.Context, node string) (doctor.Engine, error) { return s.tr.Docker(ctx, node) },
		Dial:   s.tr.Dial,
		Kube:   func() (kubernetes.Interface, error) { return s.services().KubeClient(dc.PKI, dc.Observed) },
		PullAuth: func(ref string) (string, error) {
			pull, err := s.reg.For(ref)
			return pull.Auth, err
		},
		NetworkPlugin: s.networkPluginSelector(), Log: s.opts.Log,
	}
	if rp != nil {
		dc.PKI, dc.NewPKI = rp.Set, rp.Source.Kind == pkisource.New
	}
	if dc.PKI != nil && !dc.NewPKI {
		s.observeWithPKI(ctx, dc.PKI, dc.Observed, nil, nil)
		reads.Checker, _ = s.services().Checker(dc.PKI)
	}
	dc.Reads = reads
	return doctor.Run(ctx, dc, o)
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

// storedAPIsTimeout bounds the scan of etcd for objects an upgrade would
// leave unreadable (a page of keys at a time, through a node's tunnel).
const storedAPIsTimeout = time.Minute

// observeStoredAPIs records in o the objects etcd stores at API versions
// that the Kubernetes minor cluster.yml upgrades to no longer serves
// (storedapi.Scan), when cluster.yml upgrades the API servers' minor and
// rigger runs etcd that answered.
func (s *Session) observeStoredAPIs(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	if o.Etcd == nil || len(s.c.Services.Etcd.ExternalURLs) > 0 {
		return
	}
	d, err := desired.Build(s.c)
	if err != nil {
		return // compute refuses cluster.yml with this error
	}
	from, to, ok := plan.UpgradeMinors(d, o)
	if !ok {
		return
	}
	o.StoredAPIs = &storedapi.Found{From: from, To: to}
	apis := storedapi.Removed(from, to)
	if len(apis) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storedAPIsTimeout)
	defer cancel()
	cli, err := s.services().EtcdClient(ctx, set, o)
	if err != nil {
		o.StoredAPIsErr = err
		return
	}
	defer cli.Close()
	found, err := storedapi.Scan(ctx, cli.KV(), s.etcdPrefix(), from, to, apis)
	if err != nil {
		o.StoredAPIsErr = err
		return
	}
	if len(found.Resources) > 0 {
		// Which of them the running API servers can write again
		// (plan.WriteAgain), and which refuse the upgrade.
		cs, err := s.services().KubeClient(set, o)
		if err == nil {
			found.WriteAt, err = storedapi.Served(cs.Discovery(), found.Resources)
		}
		if err != nil {
			o.StoredAPIsErr = fmt.Errorf("ask the API servers which versions of %s they serve: %w", strings.Join(found.Resources, ", "), err)
			return
		}
	}
	if found.Encrypted > 0 {
		s.opts.Log.Warn("values encrypted at rest not checked for API versions the upgrade takes away",
			"cluster", s.c.ClusterName, "values", found.Encrypted, "to", fmt.Sprintf("1.%d", to))
	}
	o.StoredAPIs = found
}

// observeKubernetes lists the Nodes into o and links them to the machines
// of cluster.yml (observe.Nodes; not when no node runs an etcd member, and
// the API servers cannot answer: reach.Services.NoEtcdMember), looks for rigger's own pod in the
// cluster when rigger runs in one (kubenode.FindSelf), and the network
// plugin's pods made for an earlier Node of a recent Node's name
// (kubenode.StalePluginPods) and the pods left outside a recent Node's pod
// subnets (kubenode.StrandedPods).
func (s *Session) observeKubernetes(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	var machines []observe.Machine
	for _, m := range kubenode.Machines(s.c) {
		machines = append(machines, observe.Machine{Address: m.Address, Hostname: m.Hostname})
	}
	if len(s.c.Services.Etcd.ExternalURLs) == 0 {
		if err := s.services().NoEtcdMember(o); err != nil {
			o.Kubernetes = &observe.Kubernetes{Err: err}
			return
		}
	}
	observe.Nodes(ctx, o, machines, func(ctx context.Context) ([]corev1.Node, error) {
		cs, err := s.services().KubeClient(set, o)
		if err != nil {
			return nil, err
		}
		return kubenode.ListNodes(ctx, cs)
	})
	k := o.Kubernetes
	if k.Err != nil {
		return
	}
	if ref := s.opts.Self; ref != nil {
		cs, err := s.services().KubeClient(set, o)
		if err == nil {
			ctx, cancel := context.WithTimeout(ctx, observe.NodeListTimeout)
			k.Self, err = kubenode.FindSelf(ctx, cs, *ref, k.Link)
			cancel()
		}
		if k.SelfErr = err; err != nil {
			s.opts.Log.Warn("rigger's own pod not looked for in the cluster", "cluster", s.c.ClusterName, "pod", ref.String(), "err", err)
		} else if k.Self != nil {
			s.opts.Log.Debug("rigger runs in the cluster it reconciles", "cluster", s.c.ClusterName, "pod", k.Self.Pod, "node", k.Self.Node)
		}
	}
	if s.networkPluginSelector() == "" {
		return
	}
	cs, err := s.services().KubeClient(set, o)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, observe.NodeListTimeout)
		defer cancel()
		k.StalePods, err = kubenode.StalePluginPods(ctx, cs, s.networkPluginSelector(), k.Nodes, s.opts.Now())
		if err == nil && sysaddons.FollowsNodeSubnets(s.c.Network.Plugin) {
			k.StrandedPods, err = kubenode.StrandedPods(ctx, cs, k.Nodes, s.opts.Now())
		}
	}
	if err != nil {
		s.opts.Log.Debug("the network plugin's pods not looked at", "cluster", s.c.ClusterName, "err", err)
	}
}
