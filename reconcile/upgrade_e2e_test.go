package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// Bounds of an upgrade under load (docs/operations.md, Upgrading
// Kubernetes, says why these).
const (
	// maxAPIGap is the longest time the API, through a worker's node-local
	// load balancer, may not answer: an API server stops for its upgrade
	// on one node at a time, and the load balancer tries the next one.
	maxAPIGap = 5 * time.Second
	// maxPartitionAPIGap is that bound when a node is cut off without
	// warning: if it held etcd's leadership, quorum reads wait for the
	// other members to elect a new leader, which they start only after
	// etcd's election timeout (5 s, RKE's default); the calls in that time
	// fail after the client's timeout. 1 s is left for the election and
	// a loaded machine.
	maxPartitionAPIGap = 5*time.Second + clientTimeout + time.Second
	// clientTimeout is how long each client waits for an answer: as long
	// as nginx-proxy waits to connect to an API server before it tries the
	// next one (2 s), so a call to a cut-off API server fails rather than
	// being retried.
	clientTimeout = 2 * time.Second
	// maxFailedShare is the share of HTTP requests to the Service that may
	// fail: the pods are drained one node at a time behind a
	// PodDisruptionBudget, and stop serving only once the endpoints
	// dropped them (a preStop wait).
	maxFailedShare = 0.01
)

// upgradeNodePort is the NodePort of the workload's Service.
const upgradeNodePort = 30036

// EnvRoad makes TestUpgradeSandbox go on from v1.34.4 to the newest minor
// version, one at a time (roadVersions): make test-road sets it.
const EnvRoad = "RIGGER_ROAD"

// roadVersions are the upgrades past v1.34.4 that make test-road runs:
// the sandbox's builds of each minor version up to rigger's newest
// (sandbox.KubeReleases).
var roadVersions = []string{"v1.35.4", "v1.36.3", "v1.37.2"}

// TestUpgradeSandbox takes a cluster under load one Kubernetes minor
// version at a time from RKE's default (v1.32.13, etcd 3.5.16, the
// sandbox's default) to v1.33.13 (etcd 3.5.35), then to v1.34.4 (etcd
// 3.6.16) with a node partitioned midway: three nodes with every role and
// a worker whose nginx-proxy is the node-local load balancer, a
// Deployment of three web servers behind a NodePort Service and a
// PodDisruptionBudget, and two clients that count what fails throughout:
// HTTP requests to the Service and API calls, both through the worker.
// Each upgrade's plan goes in the version skew policy's order, takes a
// snapshot first, keeps every etcd member and leaves nothing to do; the
// longest API gap, the failed requests and each node's time cordoned are
// logged and bounded.
func TestUpgradeSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	versions := []string{"v1.33.13", "v1.34.4"}
	road := os.Getenv(EnvRoad) != ""
	if road {
		versions = append(versions, roadVersions...)
	}
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 36, Nodes: 4, Images: true, KubernetesVersions: versions})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	a := rt.New(t)
	at, c, cs := upgradeCluster(ctx, t, a, s, sandbox.KubernetesVersion)
	worker := s.Nodes[3]

	t.Run("a skipped minor is refused", func(t *testing.T) {
		_, err := a.Session(t, at("v1.34.4")).Plan(ctx)
		if reason, _ := stall.Classify(err); reason != stall.InvalidSpec || !strings.Contains(err.Error(), "one minor version at a time") {
			t.Fatalf("plan 1.32 → 1.34: %v (%s)", err, reason)
		}
	})

	t.Run("an object stored at an API version 1.33 no longer serves is refused", func(t *testing.T) {
		// An IPAddress of the alpha API (MultiCIDRServiceAllocator) that a
		// 1.32 API server wrote, as JSON (the API server reads both); 1.33
		// serves the resource at v1 by default and no longer knows the
		// alpha version.
		const key = "/registry/ipaddresses/10.43.0.99"
		etcd := sandboxtest.DockerClient(t, s.Nodes[0])
		rt.Etcdctl(ctx, t, etcd, "put", key,
			`{"apiVersion":"networking.k8s.io/v1alpha1","kind":"IPAddress","metadata":{"name":"10.43.0.99"},"spec":{"parentRef":{"resource":"services","namespace":"default","name":"gone"}}}`)
		_, err := a.Session(t, at("v1.33.13")).Plan(ctx)
		var se *plan.StoredAPIError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "ipaddresses.networking.k8s.io 10.43.0.99 stored at networking.k8s.io/v1alpha1") {
			t.Errorf("plan 1.32 → 1.33 with %s stored at v1alpha1: %v, want it refused naming the object", key, err)
		}
		rt.Etcdctl(ctx, t, etcd, "del", key)
		if _, err := a.Session(t, at("v1.33.13")).Plan(ctx); err != nil {
			t.Fatalf("plan 1.32 → 1.33 once the object is gone: %v", err)
		}
	})

	t.Run("to v1.33.13", func(t *testing.T) {
		upgradeUnderLoad(ctx, t, a, s, c, at("v1.33.13"), sandbox.KubernetesVersion, "v1.33.13", cs)
	})

	t.Run("to v1.34.4, a node partitioned midway", func(t *testing.T) {
		up := at("v1.34.4")
		load := startLoad(ctx, t, a.RESTConfig(ctx, t, c), worker.Address)
		since := time.Now()
		sess := a.Session(t, up)
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkUpgradePlan(t, pl.Plan, "v1.33.13", "v1.34.4")
		// The third node goes away once the second one's API server runs
		// 1.34: its own API server's upgrade fails, nothing after it runs.
		third := s.Nodes[2]
		var (
			partition sync.Once
			heal      func()
		)
		a.Watch = func(node, msg string) {
			if node == s.Nodes[1].Address && strings.HasPrefix(msg, "kube-apiserver healthy") {
				partition.Do(func() { heal = sandboxtest.Partition(ctx, t, s, third.Name) })
			}
		}
		_, err = a.ApplyPlanned(ctx, t, sess, pl)
		a.Watch = nil
		if heal == nil {
			t.Fatalf("the partition was never made (apply: %v)", err)
		}
		if err == nil || !strings.Contains(err.Error(), third.Address) {
			t.Fatalf("apply with %s partitioned: %v, want an error naming it", third.Address, err)
		}
		if slices.ContainsFunc(a.Events(), func(l string) bool { return strings.Contains(l, "replaced kubelet") }) {
			t.Errorf("a kubelet was upgraded while an API server was not:\n%s", strings.Join(a.Events(), "\n"))
		}
		st := a.Plan(ctx, t, up).Status()
		if k := st.Kubernetes; k == nil || !k.Mixed || k.Upgrade == nil || k.Upgrade.To != "v1.34.4" {
			t.Errorf("status after the stop: %+v, want mixed versions and the upgrade to v1.34.4", st.Kubernetes)
		}
		heal()
		pl = a.Apply(ctx, t, up)
		report := load.stop(t)
		if u := pl.Plan.Upgrade; u == nil || u.To != "v1.34.4" {
			t.Errorf("the apply after the partition: upgrade %+v", u)
		}
		// While the third node was cut off, the requests the Service sent
		// to its pod failed until its Node was marked unready (Kubernetes'
		// node monitor grace period): only the API is bounded here.
		t.Logf("upgrade to v1.34.4, a node partitioned midway: %s", report)
		report.check(t, false, maxPartitionAPIGap)
		checkUpgraded(ctx, t, a, up, s.Nodes, "v1.34.4", since)
		checkStreams(ctx, t, a.RESTConfig(ctx, t, up), cs)
	})
	if !road {
		return
	}

	// make test-road: on to the newest minor version, one at a time.
	from := "v1.34.4"
	for _, version := range roadVersions {
		ok := t.Run("to "+version, func(t *testing.T) {
			p := upgradeUnderLoad(ctx, t, a, s, c, at(version), from, version, cs)
			// The IPAddress of every Service that 1.33 allocated is stored
			// at networking.k8s.io/v1beta1 (1.33's storage version), which
			// 1.37 no longer serves; later API servers store it at v1, but
			// only when it is written: rigger writes them again first.
			if strings.HasPrefix(version, "v1.37.") && !slices.ContainsFunc(p.WriteAgain, func(w plan.WriteAgain) bool { return w.Resource == ipAddresses }) {
				t.Errorf("the plan to %s wrote no IPAddress again: %+v", version, p.WriteAgain)
			}
		})
		if !ok {
			return // the next minor needs this one complete
		}
		from = version
	}
}

// upgradeCluster converges the cluster TestUpgradeSandbox and
// TestNewestMinorSandbox upgrade, at Kubernetes version k on sandbox s:
// three nodes with every role, of which the third joins etcd after the
// others, as a learner promoted to a voting member (etcd before 3.5.26
// would lose its promotion in the upgrade to 3.6: docs/versions.md), and a
// worker; with the workload (startWorkload) on the three. first changes
// the cluster.yml of that converge (and of the cluster at k it returns),
// not the others. It returns the cluster at a version, the cluster at k,
// and a client of it.
func upgradeCluster(ctx context.Context, t *testing.T, a *rt.Applier, s *sandbox.Sandbox, k string, first ...func(*spec.Cluster)) (at func(string) *spec.Cluster, c *spec.Cluster, cs kubernetes.Interface) {
	t.Helper()
	roles := rt.Roles(4, 3)
	roles[2] = []string{spec.RoleControlPlane, spec.RoleWorker}
	// The drains of the kubelets' upgrades evict pods with emptyDir
	// volumes too: metrics-server has one (docs/operations.md).
	emptyDirs := func(c *spec.Cluster) { c.UpgradeStrategy.DrainInput.DeleteLocalData = true }
	at = func(v string) *spec.Cluster { return rt.ClusterAt(t, s, roles, v, emptyDirs) }
	firstAt := func() *spec.Cluster { return rt.ClusterAt(t, s, roles, k, append(first, emptyDirs)...) }
	a.Apply(ctx, t, firstAt())
	roles[2] = append(roles[2], spec.RoleEtcd)
	c = firstAt()
	if pl := a.Apply(ctx, t, c); pl.Plan.Count(plan.AddMember) != 1 {
		t.Fatalf("the third etcd member: %v", rt.StepLines(pl.Plan))
	}
	cs = a.Client(ctx, t, c)
	startWorkload(ctx, t, cs, s.Nodes[:3])
	return at, c, cs
}

// upgradeUnderLoad applies up, at version to, a minor after from, to the cluster
// c that upgradeCluster made, while the clients of startLoad ask the API
// and the workload through the worker, and checks it as each step of the
// road: the version skew policy's order, the longest API gap, the failed
// requests and each node's time cordoned bounded, a drain held back by a
// PodDisruptionBudget (holdDrain), every etcd member kept, exec, attach,
// cp, port-forward and logs -f through cri-dockerd, and the pods'
// sandboxes on system_images' pause. It returns the plan applied.
func upgradeUnderLoad(ctx context.Context, t *testing.T, a *rt.Applier, s *sandbox.Sandbox, c, up *spec.Cluster, from, to string, cs kubernetes.Interface) *plan.Plan {
	t.Helper()
	held := holdDrain(ctx, t, a, cs)
	load := startLoad(ctx, t, a.RESTConfig(ctx, t, c), s.Nodes[3].Address)
	since := time.Now()
	pl := a.Apply(ctx, t, up)
	report := load.stop(t)
	held()
	checkUpgradePlan(t, pl.Plan, from, to)
	report.nodes = cordoned(a.Timed(), s.Nodes)
	t.Logf("upgrade to %s under load: %s", to, report)
	report.check(t, true, maxAPIGap)
	checkUpgraded(ctx, t, a, up, s.Nodes, to, since)
	checkStreams(ctx, t, a.RESTConfig(ctx, t, up), cs)
	checkPause(ctx, t, s.Nodes, up.SystemImages.PodInfraContainer)
	return pl.Plan
}

// checkUpgradePlan checks that p upgrades from → to in the version skew
// policy's order: every API server before any other Kubernetes component,
// the controller managers and schedulers before any kubelet, every node
// with a kubelet drained first.
func checkUpgradePlan(t *testing.T, p *plan.Plan, from, to string) {
	t.Helper()
	u := p.Upgrade
	if u == nil || u.From != from || u.To != to || u.Held != "" {
		t.Fatalf("plan's upgrade %+v, want %s → %s", u, from, to)
	}
	lastAPI, firstOther, lastCP, firstKubelet := -1, len(p.Steps), -1, len(p.Steps)
	for i, s := range p.Steps {
		switch s.Component {
		case "kube-apiserver":
			lastAPI = i
		case "kube-controller-manager", "kube-scheduler":
			firstOther, lastCP = min(firstOther, i), i
		case "kubelet", "kube-proxy":
			firstOther, firstKubelet = min(firstOther, i), min(firstKubelet, i)
		}
	}
	if lastAPI < 0 || lastAPI > firstOther || lastCP > firstKubelet {
		t.Errorf("steps out of the skew policy's order:\n%s", strings.Join(rt.StepLines(p), "\n"))
	}
	if len(u.Drain) != 4 {
		t.Errorf("nodes drained first: %v, want all four", u.Drain)
	}
}

// checkUpgraded checks a cluster after its upgrade to version, which
// began at since: every Node's kubelet on it, every etcd member kept,
// healthy and voting, a snapshot taken before the upgrade on every etcd
// node, and nothing left to do.
func checkUpgraded(ctx context.Context, t *testing.T, a *rt.Applier, c *spec.Cluster, nodes []sandbox.Node, version string, since time.Time) {
	t.Helper()
	cs := a.Client(ctx, t, c)
	rt.NodesReady(ctx, t, cs, nodes)
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		if v := n.Status.NodeInfo.KubeletVersion; v != version {
			t.Errorf("Node %s: kubelet %s, want %s", n.Name, v, version)
		}
	}
	pl := a.Plan(ctx, t, c)
	st := pl.Status()
	if e := st.Etcd; e == nil || len(e.Members) != 3 {
		t.Errorf("etcd after the upgrade: %+v, want the 3 members", st.Etcd)
	} else {
		for addr, h := range e.Health {
			if h != "healthy" {
				t.Errorf("etcd on %s: %s", addr, h)
			}
		}
		for _, m := range e.Members {
			if m.IsLearner {
				t.Errorf("etcd member %s is a learner after the upgrade", m)
			}
		}
	}
	if k := st.Kubernetes; k == nil || k.Mixed || k.Running[0].Version != version {
		t.Errorf("status: Kubernetes %+v, want %s everywhere", st.Kubernetes, version)
	}
	if pl.Changes() {
		t.Errorf("not in sync after the upgrade: %v", rt.StepLines(pl.Plan))
	}
	snaps, err := etcdsnap.List(ctx, a.Etcd(ctx, t, c), false)
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot's time is its name's, to the second: one the upgrade took
	// in the second it began shows an earlier time than since.
	from := since.Truncate(time.Second)
	if !slices.ContainsFunc(snaps.Snapshots, func(s etcdsnap.Info) bool {
		return s.Sidecar != nil && s.Sidecar.Kind == etcdsnap.KindBeforeChange && !s.TakenAt.Before(from) && len(s.Nodes) == 3
	}) {
		t.Errorf("no snapshot on the 3 etcd nodes taken before the upgrade (since %s): %+v", since.Format(time.TimeOnly), snaps.Snapshots)
	}
}

// startWorkload runs three web servers (one per node, preferably) behind
// the NodePort Service web, with a PodDisruptionBudget that keeps two, and
// waits for them to be ready.
func startWorkload(ctx context.Context, t *testing.T, cs kubernetes.Interface, nodes []sandbox.Node) {
	t.Helper()
	const ns = "upgrade-load"
	labels := map[string]string{"app": "web"}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grace := int64(20)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
					Containers: []corev1.Container{{
						Name: "httpd", Image: sandbox.ToolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
						// sh stays PID 1 and exits at SIGTERM, as a server
						// does: httpd as PID 1 ignores it, and each drain
						// waited out the grace period (15 s a node).
						Command: []string{"/bin/busybox", "sh", "-c", `mkdir -p /tmp/www && echo ok > /tmp/www/index.html || exit 1; trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /tmp/www & wait`},
						Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
						// Serve until the endpoints dropped the pod: the
						// kube-proxies stop sending it requests first.
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
							Exec: &corev1.ExecAction{Command: []string{"/bin/busybox", "sleep", "5"}}}},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Port: 8080, NodePort: upgradeNodePort}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt.Eventually(ctx, t, 3*time.Minute, "the web Deployment's three pods ready", func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 3, err
	})
}

// load is the two clients of an upgrade: HTTP requests to the web
// Service's NodePort and API calls to the node-local load balancer, both
// on one worker, every 100 ms, each waiting clientTimeout.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	began  time.Time

	mu                 sync.Mutex
	requests, failures int
	firstFailures      []string
	lastHTTP           time.Time
	httpGap            time.Duration
	apiCalls, apiFails int
	firstAPIFailures   []string
	lastAPI            time.Time
	apiGap             time.Duration
	apiGapEnd          time.Time
}

// loadReport is what the clients counted.
type loadReport struct {
	took               time.Duration
	requests, failures int
	firstFailures      []string
	httpGap            time.Duration
	apiCalls, apiFails int
	firstAPIFailures   []string
	apiGap             time.Duration
	// apiGapEnd is when the longest API gap ended (the clients' stop when
	// it had not).
	apiGapEnd time.Time
	nodes     map[string]time.Duration
}

func (r loadReport) String() string {
	var nodes []string
	for n, d := range r.nodes {
		nodes = append(nodes, fmt.Sprintf("%s %s", n, d.Round(100*time.Millisecond)))
	}
	slices.Sort(nodes)
	return fmt.Sprintf("took %s; HTTP: %d of %d requests failed, longest gap %s; API: %d of %d calls failed, longest gap %s; time cordoned per node: %s",
		r.took.Round(time.Second), r.failures, r.requests, r.httpGap.Round(100*time.Millisecond), r.apiFails, r.apiCalls, r.apiGap.Round(100*time.Millisecond), strings.Join(nodes, ", "))
}

// check fails the test when the report is out of bounds: the API gap
// above maxGap; the failed HTTP requests and the longest time without an
// answer from the Service (as long as the API's may be) only when service
// says so.
func (r loadReport) check(t *testing.T, service bool, maxGap time.Duration) {
	t.Helper()
	if r.requests < 100 || r.apiCalls < 100 {
		t.Errorf("the clients made %d requests and %d API calls: too few to measure", r.requests, r.apiCalls)
	}
	if r.apiGap > maxGap {
		t.Errorf("the API did not answer for %s, more than %s, until %s; the first failed calls: %s", r.apiGap, maxGap,
			r.apiGapEnd.Format("15:04:05.0"), strings.Join(r.firstAPIFailures, "; "))
	}
	if service && r.httpGap > maxAPIGap {
		t.Errorf("the Service did not answer for %s, more than %s; the first failures: %s", r.httpGap, maxAPIGap, strings.Join(r.firstFailures, "; "))
	}
	if share := float64(r.failures) / float64(max(r.requests, 1)); service && share > maxFailedShare {
		t.Errorf("%d of %d HTTP requests failed (%.2f%%, more than %.2f%%); the first: %s", r.failures, r.requests,
			100*share, 100*maxFailedShare, strings.Join(r.firstFailures, "; "))
	}
}

// startLoad starts the clients against the worker at address; cfg is the
// admin's client configuration, pointed at the worker's load balancer.
func startLoad(ctx context.Context, t *testing.T, cfg *rest.Config, address string) *load {
	t.Helper()
	// A connection per request, as the kubelets' and kube-proxies' new
	// connections after a restart: the load balancer picks an API server
	// that answers for each. (A kept connection to an API server that
	// went away waits for the client's own health check.)
	cfg = rest.CopyConfig(cfg)
	cfg.TLSClientConfig.ServerName = "kubernetes" // in the API servers' certificate
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apic := &http.Client{Timeout: clientTimeout, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: tlsCfg}}
	apiURL := "https://" + net.JoinHostPort(address, "6443") + "/api/v1/namespaces/upgrade-load"
	httpc := &http.Client{Timeout: clientTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	url := fmt.Sprintf("http://%s/index.html", net.JoinHostPort(address, fmt.Sprint(upgradeNodePort)))
	ctx, cancel := context.WithCancel(ctx)
	now := time.Now()
	l := &load{cancel: cancel, began: now, lastHTTP: now, lastAPI: now}
	every := func(f func(context.Context)) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				f(ctx)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	every(func(ctx context.Context) {
		err := get(ctx, httpc, url)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.requests++
		if err != nil {
			l.failures++
			if len(l.firstFailures) < 5 {
				l.firstFailures = append(l.firstFailures, fmt.Sprintf("%s: %v", now.Sub(l.began).Round(100*time.Millisecond), err))
			}
			return
		}
		l.httpGap = max(l.httpGap, now.Sub(l.lastHTTP))
		l.lastHTTP = now
	})
	every(func(ctx context.Context) {
		err := get(ctx, apic, apiURL)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.apiCalls++
		if err != nil {
			l.apiFails++
			if len(l.firstAPIFailures) < 5 {
				l.firstAPIFailures = append(l.firstAPIFailures, fmt.Sprintf("%s: %v", now.Format("15:04:05.0"), err))
			}
			return
		}
		if gap := now.Sub(l.lastAPI); gap > l.apiGap {
			l.apiGap, l.apiGapEnd = gap, now
		}
		l.lastAPI = now
	})
	t.Cleanup(func() { cancel(); l.wg.Wait() })
	return l
}

// get GETs url with c; an answer other than 200 is an error.
func get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	return nil
}

// stop stops the clients and reports what they counted.
func (l *load) stop(t *testing.T) loadReport {
	t.Helper()
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := loadReport{took: time.Since(l.began), requests: l.requests, failures: l.failures, firstFailures: l.firstFailures,
		httpGap: max(l.httpGap, time.Since(l.lastHTTP)), apiCalls: l.apiCalls, apiFails: l.apiFails, firstAPIFailures: l.firstAPIFailures,
		apiGap: l.apiGap, apiGapEnd: l.apiGapEnd}
	if now := time.Now(); now.Sub(l.lastAPI) > r.apiGap {
		r.apiGap, r.apiGapEnd = now.Sub(l.lastAPI), now
	}
	return r
}

// cordoned is how long each node was cordoned in an apply, from its
// progress lines ("cordoned Node …" to "uncordoned Node …"), by hostname.
func cordoned(events []rt.Event, nodes []sandbox.Node) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, n := range nodes {
		var since time.Duration = -1
		for _, e := range events {
			switch {
			case strings.HasPrefix(e.Line, n.Address+": cordoned Node "):
				since = e.At
			case strings.HasPrefix(e.Line, n.Address+": uncordoned Node ") && since >= 0:
				out[n.Hostname] += e.At - since
				since = -1
			}
		}
	}
	return out
}
