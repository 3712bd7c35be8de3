package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// Cluster is what doctor judges a cluster from: one read of it, made by
// package reconcile as every plan and status reads it (the nodes with
// their files, the PKI resolved from the state directory and them, etcd's
// members and the Nodes), and, for rigger doctor, the connections through
// which its checks read more (Reads). It is the narrow value doctor sees
// of the engine, as etcdsnap.Cluster is for the snapshots.
type Cluster struct {
	Spec    *spec.Cluster
	Desired *desired.Cluster
	// Observed is the read of the nodes, etcd's members and the Nodes.
	Observed *observe.Cluster
	// PKI is the cluster's certificates (nil: none could be resolved,
	// PKIErr says why); NewPKI says that no node or state directory has
	// any yet. Request is what cluster.yml needs of them.
	PKI     *pki.Set
	PKIErr  error
	NewPKI  bool
	Request pki.Request
	// IgnoreDockerVersion skips the judgement of the Docker version
	// (rigger's --ignore-docker-version).
	IgnoreDockerVersion bool
	Now                 time.Time
	// Reads are what the checks read beyond the observation; nil for the
	// checks of a plan (Problems), which skip what needs them.
	Reads *Reads
}

// Engine is what doctor asks of a node's Docker engine: a component
// engine's calls, its info and the registry's answer about an image.
// *client.Client is one.
type Engine interface {
	dockerop.Engine
	Info(ctx context.Context) (system.Info, error)
	DistributionInspect(ctx context.Context, ref, encodedAuth string) (registry.DistributionInspect, error)
}

var _ Engine = (*client.Client)(nil)

// Reads are the connections rigger doctor reads the nodes and the API
// server through, beyond what the observation holds.
type Reads struct {
	// Engine is a node's Docker engine; Dial dials an address as the node
	// sees it (transport.Transport's).
	Engine func(ctx context.Context, node string) (Engine, error)
	Dial   func(ctx context.Context, node, network, addr string) (net.Conn, error)
	// Kube is the API server's client; its error says why there is none.
	Kube func() (kubernetes.Interface, error)
	// Checker probes the components (nil: no certificates to probe with).
	Checker *health.Checker
	// PullAuth is the credentials of an image's private registry
	// (registryauth.Set.For), encoded for the Docker API.
	PullAuth func(ref string) (string, error)
	// NetworkPlugin selects the network plugin's DaemonSets ("" without
	// one).
	NetworkPlugin string
	Log           *slog.Logger
}

// RunOptions are the settings of Run.
type RunOptions struct {
	// Nodes limits the walk to these nodes (address, internal address or
	// hostname_override); every node of cluster.yml when empty.
	Nodes []string
	// Skip names checks not to run (Walk).
	Skip []string
	// Since is how far back the Nodes' Events are read (DefaultSince when
	// zero).
	Since time.Duration
}

// DefaultSince is how far back Run reads the Nodes' Events.
const DefaultSince = time.Hour

// Unbuilt is the finding of a cluster.yml rigger cannot run (the error of
// desired.Build): nothing else is checked.
func Unbuilt(err error) []Finding {
	return []Finding{{Check: CheckClusterYML, Level: Fail, Expected: "a cluster.yml rigger can run",
		Found: err.Error(), Fix: "rigger validate -f cluster.yml says where"}}
}

// Run walks the nodes of cluster.yml through the path a node takes to
// join the cluster: reaching it, its Docker engine and machine, the
// images, the certificates, the containers, etcd and the components'
// health, its Node in Kubernetes and the network plugin. It returns the
// findings of the cluster as a whole (Node ""), then those of each node in
// cluster.yml's order. It judges c, reads what the checks need through
// c.Reads and changes nothing but the pod-network check's probe
// DaemonSet, deleted when the walk ends (the one-shot container that
// reads a machine is removed). A node given in o.Nodes that cluster.yml
// does not have is an error (SelectNodes).
func Run(ctx context.Context, c *Cluster, o RunOptions) ([]Finding, error) {
	nodes, err := SelectNodes(c.Desired, o.Nodes)
	if err != nil {
		return nil, err
	}
	dr := newWalker(c)
	dr.since = dr.now.Add(-cmp.Or(o.Since, DefaultSince))
	dr.gather(ctx, o.Skip)
	found := slices.Concat(dr.clusterFindings(o.Skip), Walk(ctx, nodes, dr.checks(), Options{
		Skip: o.Skip, MaxParallel: c.Spec.Rigger.MaxParallel,
	}))
	dr.removeProbe(ctx)
	if dr.nodes != nil {
		dr.nodes.stop()
	}
	return found, nil
}

// CheckNames are the names of Run's checks: the cluster's, then a node's
// walk, in order.
func CheckNames() []string {
	names := []string{CheckClusterYML, CheckPKI, CheckKubernetesAPI, CheckStaleNodes}
	for _, c := range (&walker{}).checks() {
		names = append(names, c.Name)
	}
	return names
}

// Problems are the warnings and failures of Run's checks that a plan's
// observation (c, without Reads) answers, reading nothing more (the checks
// that read more are skipped): reaching each node, its Docker version, its
// containers (crash loops included), its etcd member, its Node registered,
// unique and Ready, the cluster's PKI, API server and stale Nodes. Status
// and serve's status.yml show them, with the fix, on every drift check.
func Problems(c *Cluster) []Finding {
	r := newWalker(c)
	r.rd = nil
	var nodes []string
	for _, n := range c.Desired.Nodes {
		nodes = append(nodes, n.Address)
	}
	found := slices.Concat(r.clusterFindings(nil), Walk(context.Background(), nodes, r.checks(), Options{MaxParallel: 1}))
	found = slices.DeleteFunc(found, func(f Finding) bool { return f.Level != Fail && f.Level != Warn })
	for i := range found {
		found[i].Seconds = 0 // how long a judgement took: nothing to commit in status.yml
	}
	return found
}

// SelectNodes are the addresses of the nodes of d that want names (by
// address, internal address or hostname_override); every node when want
// is empty. A name no node has is an error.
func SelectNodes(d *desired.Cluster, want []string) ([]string, error) {
	named := func(n desired.Node, w string) bool {
		return w == n.Address || w == n.InternalAddress || w == n.Hostname
	}
	for _, w := range want {
		if !slices.ContainsFunc(d.Nodes, func(n desired.Node) bool { return named(n, w) }) {
			return nil, errors.New("node " + w + " is not in cluster.yml: give a node's address, internal_address or hostname_override")
		}
	}
	var out []string
	for _, n := range d.Nodes {
		if len(want) == 0 || slices.ContainsFunc(want, func(w string) bool { return named(n, w) }) {
			out = append(out, n.Address)
		}
	}
	return out, nil
}

// newWalker is a walk of c.
func newWalker(c *Cluster) *walker {
	return &walker{c: c.Spec, ignoreDocker: c.IgnoreDockerVersion, d: c.Desired, now: c.Now, o: c.Observed,
		set: c.PKI, setErr: c.PKIErr, newPKI: c.NewPKI, req: c.Request, rd: c.Reads}
}

// walker is what one Doctor read of the cluster, and what its checks
// read of each node on the way (machine, per node, read once).
type walker struct {
	// rd reads what the plan's observation does not hold; nil for the
	// checks of a plan (Problems), which skip what needs it.
	rd           *Reads
	c            *spec.Cluster
	req          pki.Request
	ignoreDocker bool
	d            *desired.Cluster
	now          time.Time
	o            *observe.Cluster
	// set is the cluster's PKI (nil: none could be resolved; setErr says
	// why), newPKI that no node or state directory has one yet.
	set    *pki.Set
	setErr error
	newPKI bool
	// info is each reachable node's docker info, offset its clock's
	// difference from rigger's and uncertainty half the read's time.
	info   map[string]*engineRead
	median time.Duration
	// pods are the network plugin's pods by Node name; nil when they could
	// not be listed.
	pods    map[string][]corev1.Pod
	checker *health.Checker
	// events are the Nodes' Events since since (nil: not listed).
	events []corev1.Event
	// dns is the cluster DNS Service and its ready endpoints (nil: not
	// read).
	dns   *DNSService
	since time.Time

	mu       sync.Mutex
	machines map[string]*machineRead
	// fromPod is what the pod-network check read from each node's probe
	// pod (its DNS answer too).
	fromPod map[string]*Host
	// probe is the pod-network check's probe DaemonSet.
	probe podProbe
	// nodes counts the Nodes' updates while the walk runs (nil: not
	// watched).
	nodes *nodeWatch
}

// engineRead is a node's docker info and its clock.
type engineRead struct {
	info        system.Info
	err         error
	offset, unc time.Duration
}

// machineRead is what the helper container read of a node.
type machineRead struct {
	once sync.Once
	host *Host
	err  error
	skip string
}

// gather reads what the checks judge: the nodes (as a plan observes
// them, files kept for the certificates), the PKI, and at once etcd's
// members, the Nodes (then watched while the walk runs), the network
// plugin's pods and each node's docker info. It makes the pod-network
// check's probe DaemonSet, whose pods start meanwhile. What the checks of
// skip would judge is not read.
func (r *walker) gather(ctx context.Context, skip []string) {
	r.machines, r.fromPod = map[string]*machineRead{}, map[string]*Host{}
	var wg sync.WaitGroup
	if r.set != nil && !r.newPKI {
		if p := r.c.Network.Plugin; !slices.Contains(skip, CheckPodNetwork) && p != "" && p != "none" {
			r.probe.created = make(chan struct{})
			go r.createProbe(ctx)
		}
		wg.Go(func() {
			if !slices.Contains(skip, CheckNodeUpdates) {
				r.nodes = r.watchNodes(ctx)
			}
			r.pods = r.listPluginPods(ctx)
			r.events = r.listNodeEvents(ctx)
			r.dns = r.readDNSService(ctx)
		})
		r.checker = r.rd.Checker
	}
	r.info = map[string]*engineRead{}
	var mu sync.Mutex
	_ = fanout.Each(ctx, r.d.Nodes, r.c.Rigger.MaxParallel, func(ctx context.Context, _ int, n desired.Node) error {
		if on := r.o.Nodes[n.Address]; on == nil || !on.Reachable {
			return nil
		}
		er := r.readEngine(ctx, n.Address)
		mu.Lock()
		r.info[n.Address] = er
		mu.Unlock()
		return nil
	})
	var offsets []time.Duration
	for _, er := range r.info {
		if er.err == nil {
			offsets = append(offsets, er.offset)
		}
	}
	if len(offsets) > 0 {
		slices.Sort(offsets)
		r.median = offsets[len(offsets)/2]
	}
	wg.Wait()
}

// readEngine reads a node's docker info, and its clock from it.
func (r *walker) readEngine(ctx context.Context, node string) *engineRead {
	cli, err := r.rd.Engine(ctx, node)
	if err != nil {
		return &engineRead{err: err}
	}
	began := time.Now()
	info, err := cli.Info(ctx)
	took := time.Since(began)
	er := &engineRead{info: info, err: err, unc: took / 2}
	if t, perr := time.Parse(time.RFC3339Nano, info.SystemTime); err == nil && perr == nil {
		er.offset = t.Sub(began.Add(took / 2))
	}
	return er
}

// listPluginPods lists the network plugin's pods by Node name.
func (r *walker) listPluginPods(ctx context.Context) map[string][]corev1.Pod {
	sel := r.rd.NetworkPlugin
	if sel == "" || r.o.Kubernetes == nil || r.o.Kubernetes.Err != nil {
		return nil
	}
	cs, err := r.rd.Kube()
	if err != nil {
		return nil
	}
	// The plugin's DaemonSets carry the add-on's label; their pods are
	// those their selectors pick.
	dss, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil
	}
	out := map[string][]corev1.Pod{}
	for _, ds := range dss.Items {
		podSel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			continue
		}
		list, err := cs.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: podSel.String()})
		if err != nil {
			return nil
		}
		for _, p := range list.Items {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

// listNodeEvents lists the Events of Nodes (nil when they could not be).
func (r *walker) listNodeEvents(ctx context.Context) []corev1.Event {
	if r.o.Kubernetes == nil || r.o.Kubernetes.Err != nil {
		return nil
	}
	cs, err := r.rd.Kube()
	if err != nil {
		return nil
	}
	list, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node", Limit: maxNodeEvents})
	if err != nil {
		return nil
	}
	return list.Items
}

// readDNSService finds the Service with the cluster DNS address and
// counts its ready endpoints; nil when the cluster runs no DNS or the API
// server did not answer.
func (r *walker) readDNSService(ctx context.Context) *DNSService {
	server := r.dnsServer()
	if server == "" || r.o.Kubernetes == nil || r.o.Kubernetes.Err != nil {
		return nil
	}
	cs, err := r.rd.Kube()
	if err != nil {
		return nil
	}
	svcs, err := cs.CoreV1().Services(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	i := slices.IndexFunc(svcs.Items, func(s corev1.Service) bool {
		return slices.Contains(s.Spec.ClusterIPs, server) || s.Spec.ClusterIP == server
	})
	if i < 0 {
		return &DNSService{}
	}
	svc := svcs.Items[i]
	out := &DNSService{Name: svc.Namespace + "/" + svc.Name}
	eps, err := cs.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return nil
	}
	for _, sl := range eps.Items {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out.Ready++
			}
		}
	}
	return out
}

// maxNodeEvents bounds the Events Doctor reads.
const maxNodeEvents = 2000

// clusterFindings are the checks of the cluster as a whole.
func (r *walker) clusterFindings(skip []string) []Finding {
	var out []Finding
	add := func(check string, res Result) {
		if slices.Contains(skip, check) {
			res = Result{Level: Skip, Found: "skipped by name"}
		}
		out = append(out, Finding{Check: check, Level: res.Level, Expected: res.Expected, Found: res.Found, Fix: res.Fix})
	}
	add(CheckClusterYML, Passed("valid"))
	switch {
	case r.setErr != nil:
		add(CheckPKI, Failed("the cluster's certificates", r.setErr.Error(), "the error says what to do with the state directory"))
	case r.newPKI:
		add(CheckPKI, Warned("the cluster's certificates", "no certificates in the state directory or on a node: the cluster was never applied",
			"rigger apply -f cluster.yml makes them"))
	default:
		add(CheckPKI, Passed("the cluster's certificates"))
	}
	k := r.o.Kubernetes
	switch {
	case k == nil:
		add(CheckKubernetesAPI, Skipped("no certificates to ask with"))
	case k.Err != nil:
		add(CheckKubernetesAPI, Failed("the API server to list the Nodes", k.Err.Error(),
			"the walk of the controlplane nodes says why (their kube-apiserver, etcd)"))
	default:
		add(CheckKubernetesAPI, Passed("the API server lists the Nodes"))
	}
	if k != nil && k.Err == nil && k.Link != nil {
		add(CheckStaleNodes, Stale(k.Link, r.c.Rigger.StaleNodes))
	} else {
		add(CheckStaleNodes, Skipped("the Nodes were not listed"))
	}
	return out
}

// Timeouts of the checks that read something of a node themselves.
const (
	// doctorMachineTimeout bounds the helper container that reads the
	// machine (created, run, removed through the node's SSH connection).
	doctorMachineTimeout = 30 * time.Second
	// doctorProbeTimeout bounds the health probes of a node's components.
	doctorProbeTimeout = 20 * time.Second
)

// checks are the walk of one node, in order.
func (r *walker) checks() []Check {
	var out []Check
	for _, name := range ReachChecks {
		out = append(out, Check{Name: name, Run: func(_ context.Context, node string) Result {
			return r.reach(name, node)
		}})
	}
	return append(out,
		Check{Name: CheckDockerVersion, Run: func(_ context.Context, node string) Result {
			on := r.o.Nodes[node]
			if on == nil || !on.Reachable {
				return Skipped("the node did not answer")
			}
			return DockerVersion(r.c.KubernetesVersion, on.DockerVersion, r.ignoreDocker)
		}},
		Check{Name: CheckCgroupDriver, Run: r.engineCheck(func(n *desired.Node, er *engineRead) Result {
			kubelet, ok := n.Container(desired.Kubelet)
			if !ok {
				return Skipped("no kubelet")
			}
			return CgroupDriver(er.info.CgroupDriver, er.info.CgroupVersion, argValue(kubelet.Args, "--cgroup-driver"))
		})},
		Check{Name: CheckClock, Run: r.engineCheck(func(n *desired.Node, er *engineRead) Result {
			if er.info.SystemTime == "" {
				return Skipped("the engine does not tell its time")
			}
			return Clock(er.offset, er.unc, r.median)
		})},
		Check{Name: CheckKernelNetwork, Timeout: doctorMachineTimeout, Run: r.reads(r.hostCheck(KernelNetwork))},
		Check{Name: CheckSwap, Timeout: doctorMachineTimeout, Run: r.reads(r.hostCheck(Swap))},
		Check{Name: CheckResolvConf, Timeout: doctorMachineTimeout, Run: r.reads(r.hostCheck(ResolvConf))},
		Check{Name: CheckDisk, Timeout: doctorMachineTimeout, Run: r.reads(func(ctx context.Context, node string) Result {
			var eviction string
			if n, _ := r.d.Node(node); n != nil {
				if kubelet, ok := n.Container(desired.Kubelet); ok {
					eviction = argValue(kubelet.Args, "--eviction-hard")
				}
			}
			return r.hostCheck(func(h *Host) Result { return DiskSpace(h, eviction) })(ctx, node)
		})},
		Check{Name: CheckEtcdData, Timeout: doctorMachineTimeout, Run: r.reads(r.etcdData)},
		Check{Name: CheckImages, Run: r.reads(r.images)},
		Check{Name: CheckCertificates, Run: r.reads(r.certificates)},
		Check{Name: CheckContainers, Run: r.containers},
		Check{Name: CheckEtcdMember, Run: r.etcdMember},
		Check{Name: CheckEtcdDisk, Timeout: doctorProbeTimeout, Run: r.reads(r.etcdDisk)},
		Check{Name: CheckHealth, Timeout: doctorProbeTimeout, Run: r.reads(r.health)},
		Check{Name: CheckPorts, Timeout: doctorProbeTimeout, Run: r.reads(r.ports)},
		Check{Name: CheckEvents, Run: r.reads(r.nodeEvents)},
		Check{Name: CheckNodeRegistered, Run: r.registered},
		Check{Name: CheckCNI, Timeout: doctorMachineTimeout, Run: r.reads(r.cni)},
		Check{Name: CheckNodeReady, Run: func(_ context.Context, node string) Result {
			if k := r.o.Kubernetes; k == nil || k.Err != nil || k.Link == nil {
				return Skipped("the Nodes were not listed")
			}
			return Ready(r.o.Kubernetes.Link.Owned[node])
		}},
		Check{Name: CheckNodeUpdates, Timeout: 2 * nodeWatchWindow, Run: r.reads(r.nodeUpdates)},
		Check{Name: CheckOverlay, Timeout: doctorMachineTimeout, Run: r.reads(func(ctx context.Context, node string) Result {
			peers := r.overlayPeers(node)
			if len(peers) == 0 {
				return Skipped("no other node's end of a flannel overlay known")
			}
			return r.hostCheck(func(h *Host) Result { return Overlay(peers, h.Overlay, h.OverlayMTU) })(ctx, node)
		})},
		Check{Name: CheckPodNetwork, Timeout: probeStart + doctorMachineTimeout, Run: r.reads(r.podNetwork)},
		Check{Name: CheckDNS, Timeout: doctorMachineTimeout, Run: r.reads(func(ctx context.Context, node string) Result {
			server := r.dnsServer()
			if server == "" {
				return Skipped("dns: provider none")
			}
			// From the node's probe pod, as pods' lookups go, when
			// pod-network ran one; from the node's own network otherwise.
			r.mu.Lock()
			pod := r.fromPod[node]
			r.mu.Unlock()
			if pod != nil {
				res := DNS(server, r.dnsName(), pod.DNS, r.dns)
				res.Found = "from the node's probe pod: " + res.Found
				return res
			}
			return r.hostCheck(func(h *Host) Result { return DNS(server, r.dnsName(), h.DNS, r.dns) })(ctx, node)
		})},
	)
}

// reach is the check name of reaching node: the check its observation's
// error fails, a pass before it when the error proves the connection got
// that far. A check the error does not prove is never a pass: a timeout
// that does not say how far the connection got (the transports' errors
// say, Reach places them) proves nothing before it.
func (r *walker) reach(name, node string) Result {
	sn := nodeSpec(r.c, node)
	agent := sn.Transport == spec.TransportAgent
	switch {
	case agent && strings.HasPrefix(name, "ssh-"), agent && name == CheckAddress:
		return Skipped("transport: agent")
	case !agent && name == CheckAgentConnected:
		return Skipped("reached over SSH")
	}
	on := r.o.Nodes[node]
	failed, res := Reach(on.Err)
	switch i, f := slices.Index(ReachChecks, name), slices.Index(ReachChecks, failed); {
	case failed == name:
		return res
	case failed != "" && i > f:
		// The connection stopped at a check skipped by name: it cannot
		// get further.
		res.Found = failed + " (skipped) failed: " + res.Found
		return res
	case failed != "" && Untried(on.Err):
		return Skipped("not tried: " + failed + " failed before rigger connected")
	case failed != "" && !Proves(on.Err):
		return Skipped("not known: the connection failed without saying how far it got (" + failed + " failed)")
	}
	switch name {
	case CheckAddress:
		return Passed(sn.Address)
	case CheckSSHPort:
		return Passed("port " + cmp.Or(sn.Port, "22") + " open")
	case CheckSSHHandshake:
		return Passed("sshd answered")
	case CheckSSHHostKey:
		return Passed("host key known")
	case CheckSSHAuth:
		return Passed("as " + sn.User)
	case CheckAgentConnected:
		return Passed("tunnel up")
	case CheckDockerSocket:
		return Passed(cmp.Or(sn.DockerSocket, "/var/run/docker.sock") + " open")
	}
	return Passed("Docker " + on.DockerVersion + ", API " + on.DockerAPIVersion)
}

// engineCheck is a check of a node's docker info.
func (r *walker) engineCheck(f func(n *desired.Node, er *engineRead) Result) func(context.Context, string) Result {
	return r.reads(func(_ context.Context, node string) Result {
		er := r.info[node]
		if er == nil {
			return Skipped("the node did not answer")
		}
		if er.err != nil {
			return Failed("docker info to answer", er.err.Error(), "check dockerd on the node (journalctl -u docker)")
		}
		n, _ := r.d.Node(node)
		return f(n, er)
	})
}

// readByDoctor is why the checks of a plan (Planned.Problems) skip a
// check that reads more than a plan's observation.
const readByDoctor = "read by rigger doctor only"

// reads is a check that reads more than a plan's observation: skipped
// among the checks of a plan.
func (r *walker) reads(f func(context.Context, string) Result) func(context.Context, string) Result {
	return func(ctx context.Context, node string) Result {
		if r.rd == nil {
			return Skipped(readByDoctor)
		}
		return f(ctx, node)
	}
}

// hostCheck is a check of what the helper container read of the machine.
func (r *walker) hostCheck(f func(*Host) Result) func(context.Context, string) Result {
	return func(ctx context.Context, node string) Result {
		m := r.machine(ctx, node)
		switch {
		case m.skip != "":
			return Skipped(m.skip)
		case m.err != nil:
			return Failed("a helper container to read the machine", m.err.Error(),
				"check that the node's Docker engine runs containers (docker run --rm "+r.c.SystemImages.Alpine+" true)")
		}
		return f(m.host)
	}
}

// machine reads the machine of node once, through a one-shot container
// of the helper image (system_images.alpine) that shares the node's
// network namespace and binds the host's /etc, Docker's root and
// /var/lib read-only (HostScript). A node without the image is
// not read: doctor pulls nothing (the images check reports it).
func (r *walker) machine(ctx context.Context, node string) *machineRead {
	r.mu.Lock()
	m := r.machines[node]
	if m == nil {
		m = &machineRead{}
		r.machines[node] = m
	}
	r.mu.Unlock()
	m.once.Do(func() {
		e, err := r.rd.Engine(ctx, node)
		if err != nil {
			m.err = err
			return
		}
		img := r.c.SystemImages.Alpine
		if _, err := e.ImageInspect(ctx, img); errdefs.IsNotFound(err) {
			m.skip = "the helper image " + img + " is not on the node yet (rigger apply pulls it)"
			return
		}
		root := "/var/lib/docker"
		if er := r.info[node]; er != nil && er.info.DockerRootDir != "" {
			root = er.info.DockerRootDir
		}
		var overlay []string
		for _, p := range r.overlayPeers(node) {
			overlay = append(overlay, p.Address)
		}
		binds := []string{"/etc:/host/etc:ro", "/etc/resolv.conf:/host/resolv.conf:ro", root + ":/host/docker:ro", "/var/lib:/host/var/lib:ro"}
		// The resolv.conf the kubelet gives pods (--resolv-conf), which
		// CoreDNS forwards to: /etc/resolv.conf (a link followed), or a
		// file under /etc, /var/lib or /run (systemd-resolved's).
		resolv := "/host/resolv.conf"
		if n, _ := r.d.Node(node); n != nil {
			if kubelet, ok := n.Container(desired.Kubelet); ok {
				switch p := path.Clean(argValue(kubelet.Args, "--resolv-conf")); {
				case strings.HasPrefix(p, "/run/"):
					binds = append(binds, "/run:/host/run:ro")
					fallthrough
				case strings.HasPrefix(p, "/etc/"), strings.HasPrefix(p, "/var/lib/"):
					resolv = "/host" + p
				}
			}
		}
		out, err := dockerop.RunOutput(ctx, e, node, img, []string{"sh", "-c", HostScript}, dockerop.RunOptions{
			NetworkMode: "host",
			Env:         []string{"OVERLAY=" + strings.Join(overlay, " "), "DNS=" + r.dnsServer(), "DNS_NAME=" + r.dnsName(), "RESOLV=" + resolv},
			Binds:       binds,
		})
		if err != nil {
			m.err = err
			return
		}
		m.host, m.err = ParseHost(out)
	})
	return m
}

// etcdData checks an etcd node's data directory against the membership
// (what a plan's membership change would meet).
func (r *walker) etcdData(ctx context.Context, node string) Result {
	n, _ := r.d.Node(node)
	switch {
	case !n.HasRole(spec.RoleEtcd) || len(r.c.Services.Etcd.ExternalURLs) > 0:
		return Skipped("not an etcd node")
	case r.c.PrefixPath != "":
		return Skipped("prefix_path: the data directory is not read")
	case r.o.Etcd == nil:
		return Skipped("etcd's membership not read")
	}
	member := etcdmember.Find(r.o.Etcd.Members, desired.EtcdPeerURL(n.InternalAddress)) != nil
	return r.hostCheck(func(h *Host) Result { return EtcdData(h.EtcdData, member) })(ctx, node)
}

// dnsServer is the cluster DNS Service's address to ask from the nodes;
// "" when the cluster runs no DNS add-on.
func (r *walker) dnsServer() string {
	if d := r.c.DNS; d != nil && d.Provider == "none" {
		return ""
	}
	return r.c.Services.Kubelet.ClusterDNSServer
}

// dnsName is the name asked of the cluster DNS: the API server's Service.
func (r *walker) dnsName() string {
	return "kubernetes.default.svc." + cmp.Or(r.c.Services.Kubelet.ClusterDomain, "cluster.local")
}

// overlayPeers are the other nodes' ends of the overlay network: with
// flannel (canal's too), the first address of each Node's pod subnet,
// which its flannel.1 device holds. None for other network plugins, or
// when the Nodes were not listed.
func (r *walker) overlayPeers(node string) []OverlayPeer {
	if p := r.c.Network.Plugin; p != "flannel" && p != "canal" {
		return nil
	}
	k := r.o.Kubernetes
	if k == nil || k.Link == nil {
		return nil
	}
	var peers []OverlayPeer
	for _, n := range r.d.Nodes {
		kn := k.Link.Owned[n.Address]
		if n.Address == node || kn == nil || kn.Spec.PodCIDR == "" {
			continue
		}
		if prefix, err := netip.ParsePrefix(kn.Spec.PodCIDR); err == nil {
			peers = append(peers, OverlayPeer{Node: kn.Name, Address: prefix.Masked().Addr().String()})
		}
	}
	return peers
}

// images checks that the images of the node's containers are there, and
// asks the registry about those that are not.
func (r *walker) images(ctx context.Context, node string) Result {
	n, _ := r.d.Node(node)
	cli, err := r.rd.Engine(ctx, node)
	if err != nil {
		return Failed("the node's Docker engine", err.Error(), "")
	}
	var missing []string
	pullErr := map[string]error{}
	refs := []string{r.c.SystemImages.Alpine}
	for _, c := range n.Containers {
		refs = append(refs, c.Image)
	}
	slices.Sort(refs)
	for _, ref := range slices.Compact(refs) {
		if _, err := cli.ImageInspect(ctx, ref); err == nil {
			continue
		} else if !errdefs.IsNotFound(err) {
			return Failed("the node's Docker engine to answer", err.Error(), "")
		}
		missing = append(missing, ref)
		auth, err := r.rd.PullAuth(ref)
		if err == nil {
			_, err = cli.DistributionInspect(ctx, ref, auth)
		}
		if err != nil {
			pullErr[ref] = err
		}
	}
	return Images(missing, pullErr)
}

// certificates checks the node's certificates against the PKI.
func (r *walker) certificates(_ context.Context, node string) Result {
	switch {
	case r.set == nil:
		return Skipped("the cluster's certificates could not be read")
	case r.newPKI:
		return Skipped("the cluster has no certificates yet")
	}
	on := r.o.Nodes[node]
	if !on.FilesRead {
		return Skipped("the node's files were not read: the helper image is not on it yet")
	}
	var pn pki.Node
	for _, rn := range r.req.Nodes {
		if rn.Address == node {
			pn = rn
		}
	}
	want, err := pki.NodeFiles(r.set, r.req, pn)
	if err != nil {
		return Failed("the node's certificates", err.Error(), "")
	}
	var cas []byte
	for _, name := range r.set.Names() {
		cas = append(cas, r.set.Trusted(name)...)
	}
	return Certificates(want, on.Contents, cas, r.now)
}

// containers checks the node's containers, inspecting each for its
// restarts and reading the last lines of those that do not run.
func (r *walker) containers(ctx context.Context, node string) Result {
	n, _ := r.d.Node(node)
	on := r.o.Nodes[node]
	if on == nil || !on.Reachable {
		return Skipped("the node did not answer")
	}
	var cli Engine
	if r.rd != nil {
		var err error
		if cli, err = r.rd.Engine(ctx, node); err != nil {
			return Failed("the node's Docker engine", err.Error(), "")
		}
	}
	got := map[string]Container{}
	for name, oc := range on.Containers {
		c := Container{Container: oc}
		if dc, ok := n.Container(name); ok && !dc.RunOnce && cli != nil {
			if in, err := cli.ContainerInspect(ctx, oc.ID); err == nil && in.ContainerJSONBase != nil {
				c.RestartCount = in.RestartCount
				if in.State != nil {
					c.StartedAt, _ = time.Parse(time.RFC3339Nano, in.State.StartedAt)
				}
			}
			if oc.State != string(container.StateRunning) {
				c.Logs = dockerop.Logs(ctx, cli, oc.ID)
			}
		}
		got[name] = c
	}
	return Containers(n.Containers, got, r.now)
}

// etcdMember checks the etcd member of an etcd node.
func (r *walker) etcdMember(_ context.Context, node string) Result {
	n, _ := r.d.Node(node)
	if _, ok := n.Container(desired.Etcd); !ok {
		return Skipped("not an etcd node")
	}
	if r.set == nil || r.newPKI {
		return Skipped("no certificates to ask etcd with")
	}
	var members []etcdmember.Member
	if r.o.Etcd != nil {
		members = r.o.Etcd.Members
	}
	return EtcdMember(members, r.o.Etcd != nil, r.o.EtcdErr, desired.EtcdPeerURL(n.InternalAddress))
}

// etcdDisk judges the disk of the node's etcd member from its metrics.
func (r *walker) etcdDisk(ctx context.Context, node string) Result {
	n, _ := r.d.Node(node)
	if _, ok := n.Container(desired.Etcd); !ok {
		return Skipped("not an etcd node")
	}
	if r.checker == nil {
		return Skipped("no certificates to ask etcd with")
	}
	metrics, err := r.checker.EtcdMetrics(ctx, health.Target{Node: node, InternalAddress: n.InternalAddress, Component: desired.Etcd})
	if err != nil {
		return Warned("etcd's metrics", err.Error(), "the etcd-member and health checks say whether etcd answers on its client port")
	}
	return EtcdDisk(metrics)
}

// health probes the node's components as an apply does once it has
// started them (package health), all at once.
func (r *walker) health(ctx context.Context, node string) Result {
	if r.checker == nil {
		return Skipped("no certificates to probe with")
	}
	n, _ := r.d.Node(node)
	var names []string
	for _, c := range n.Containers {
		if health.Probes(c.Name) {
			names = append(names, c.Name)
		}
	}
	results := make([]Result, len(names))
	_ = fanout.Each(ctx, names, 0, func(ctx context.Context, i int, name string) error {
		err := r.checker.Check(ctx, health.Target{Node: node, InternalAddress: n.InternalAddress, Component: name})
		if err != nil {
			results[i] = Failed(name+" healthy", name+": "+err.Error(),
				"docker logs "+name+" on the node says why; rigger apply restarts what does not run")
		} else {
			results[i] = Passed(name)
		}
		return nil
	})
	res := Worst(results...)
	if res.Level == Pass {
		res.Found = strings.Join(names, ", ") + " healthy"
	}
	return res
}

// portTimeout bounds one dial of a node's port from another node.
const portTimeout = 3 * time.Second

// ports dials the node's ports from the nodes that need them, as RKE's
// port requirements say: etcd's client port from the etcd and
// controlplane nodes and its peer port from the etcd nodes, the API
// server's from every node, the kubelet's from the controlplane nodes.
// Nodes that did not answer dial nothing.
func (r *walker) ports(ctx context.Context, node string) Result {
	n, _ := r.d.Node(node)
	type target struct {
		port  int
		what  string
		roles []string // of the nodes that dial it
	}
	var targets []target
	if n.HasRole(spec.RoleEtcd) {
		targets = append(targets, target{2379, "etcd client", []string{spec.RoleEtcd, spec.RoleControlPlane}},
			target{2380, "etcd peer", []string{spec.RoleEtcd}})
	}
	if n.HasRole(spec.RoleControlPlane) {
		targets = append(targets, target{6443, "kube-apiserver", nil})
	}
	if _, ok := n.Container(desired.Kubelet); ok {
		targets = append(targets, target{10250, "kubelet", []string{spec.RoleControlPlane}})
	}
	var probes []PortProbe
	for _, t := range targets {
		for _, p := range r.d.Nodes {
			if p.Address == node || (t.roles != nil && !slices.ContainsFunc(t.roles, p.HasRole)) {
				continue
			}
			if on := r.o.Nodes[p.Address]; on == nil || !on.Reachable {
				continue
			}
			probes = append(probes, PortProbe{Port: t.port, What: t.what, From: p.Address})
		}
	}
	_ = fanout.Each(ctx, probes, 0, func(ctx context.Context, i int, p PortProbe) error {
		ctx, cancel := context.WithTimeout(ctx, portTimeout)
		defer cancel()
		conn, err := r.rd.Dial(ctx, p.From, "tcp", net.JoinHostPort(n.InternalAddress, strconv.Itoa(p.Port)))
		switch {
		case err == nil:
			conn.Close()
		case ctx.Err() != nil:
			probes[i].Err = fmt.Errorf("no answer within %s", portTimeout)
		default:
			probes[i].Err = errors.Unwrap(err)
			if probes[i].Err == nil {
				probes[i].Err = err
			}
		}
		return nil
	})
	return Ports(probes)
}

// nodeEvents warns of the recent Events that explain a Node deleted,
// NotReady or under pressure.
func (r *walker) nodeEvents(_ context.Context, node string) Result {
	if r.events == nil {
		return Skipped("the Events were not listed")
	}
	n, _ := r.d.Node(node)
	names := []string{n.Hostname}
	var owned *corev1.Node
	if k := r.o.Kubernetes; k != nil && k.Link != nil {
		owned = k.Link.Owned[node]
	}
	if owned != nil && owned.Name != n.Hostname {
		names = append(names, owned.Name)
	}
	return Events(names, r.events, r.since, ReadySince(owned))
}

// registered checks the node's Node, with the kubelet's last lines when
// it has none.
func (r *walker) registered(ctx context.Context, node string) Result {
	k := r.o.Kubernetes
	if k == nil || k.Err != nil || k.Link == nil {
		return Skipped("the Nodes were not listed")
	}
	n, _ := r.d.Node(node)
	if _, ok := n.Container(desired.Kubelet); !ok {
		return Skipped("no kubelet")
	}
	logs := ""
	if k.Link.Owned[node] == nil && r.rd != nil {
		if cli, err := r.rd.Engine(ctx, node); err == nil {
			logs = dockerop.Logs(ctx, cli, desired.Kubelet)
		}
	}
	return Registered(node, n.Hostname, k.Link, logs)
}

// cni checks the network plugin's configuration and pod on the node.
func (r *walker) cni(ctx context.Context, node string) Result {
	plugin := r.c.Network.Plugin
	if plugin == "" || plugin == "none" {
		return Skipped("no network plugin")
	}
	m := r.machine(ctx, node)
	switch {
	case m.skip != "":
		return Skipped(m.skip)
	case m.err != nil:
		return Failed("a helper container to read the machine", m.err.Error(), "")
	}
	var pods []corev1.Pod
	if r.pods != nil {
		pods = []corev1.Pod{}
		if k := r.o.Kubernetes; k != nil && k.Link != nil && k.Link.Owned[node] != nil {
			pods = append(pods, r.pods[k.Link.Owned[node].Name]...)
		}
	}
	return CNI(plugin, m.host.CNI, pods)
}

// argValue is the value of flag in args ("--flag=value"), "" without it.
func argValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// nodeSpec is the node of cluster.yml at address.
func nodeSpec(c *spec.Cluster, address string) spec.Node {
	for _, n := range c.Nodes {
		if n.Address == address {
			return n
		}
	}
	return spec.Node{Address: address}
}
