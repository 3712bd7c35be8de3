package statuspage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/gitops/httpauth"
	"github.com/rigger/rigger/gitops/statuspage"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/spec"
)

// envScreenshot, when set, is where TestStatusPageInBrowser also saves its
// screenshot (docs/status-page.png for the docs).
const envScreenshot = "RIGGER_SCREENSHOT"

// chromium is the browser's path; without one the test skips, or fails
// under RIGGER_E2E=1, where the browser is part of the test bed.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RIGGER_E2E") == "1" {
		t.Fatal("no chromium on PATH: install it (hack/install-prereqs.sh: apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install -y chromium); RIGGER_E2E=1 makes this a failure")
	return ""
}

// browser starts a headless Chromium for the test; it is killed when the
// test ends, also when it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900),
		// Its singleton socket's directory goes with the test's, not into /tmp.
		chromedp.Env("TMPDIR="+t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start it now, so that a browser that does not start fails here. The
	// first run must not have a deadline of its own (it would end the
	// browser): it is cancelled when it takes too long.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("chromium did not start within 60s")
	}
	return ctx
}

// repoDir is a bare repository "origin.git" and a working clone "work".
type repoDir struct{ bare, work string }

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.test",
		"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.test", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func newRepo(t *testing.T) *repoDir {
	dir := t.TempDir()
	r := &repoDir{bare: filepath.Join(dir, "origin.git"), work: filepath.Join(dir, "work")}
	git(t, dir, "init", "-q", "--bare", "-b", "main", r.bare)
	git(t, dir, "clone", "-q", r.bare, r.work)
	git(t, r.work, "checkout", "-q", "-b", "main")
	return r
}

// push commits files and pushes them (after taking rigger's status
// commits); a file given "" is taken away. It returns the commit.
func (r *repoDir) push(t *testing.T, files map[string]string) string {
	t.Helper()
	if git(t, r.work, "ls-remote", "origin", "main") != "" {
		git(t, r.work, "pull", "-q", "--rebase", "origin", "main")
	}
	for p, content := range files {
		full := filepath.Join(r.work, p)
		if content == "" { // taken away
			git(t, r.work, "rm", "-q", p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, r.work, "add", p)
	}
	git(t, r.work, "commit", "-q", "-m", "change")
	for range 5 {
		cmd := exec.Command("git", "push", "-q", "origin", "main")
		cmd.Dir = r.work
		if cmd.Run() == nil {
			return git(t, r.work, "rev-parse", "HEAD")
		}
		git(t, r.work, "pull", "-q", "--rebase", "origin", "main")
	}
	t.Fatal("git push rejected five times")
	return ""
}

// session is a gitops.Session of a healthy one-node cluster: the node
// answers, its containers run, its Kubernetes Node is Ready, etcd has one
// healthy member; kube-proxy restarted twice, and the plan restarts it
// until an apply ran.
type session struct {
	name    string
	applied bool
}

func (s *session) Lock(context.Context, string, bool) (*reconcile.Lock, error) {
	return &reconcile.Lock{}, nil
}
func (*session) RestoreRequest() (*etcdsnap.RestoreRequest, error) { return nil, nil }
func (*session) RestorePending(context.Context, *reconcile.Lock, etcdsnap.RestoreOptions) (*etcdsnap.RestoreResult, error) {
	return nil, nil
}
func (s *session) Plan(context.Context) (*decide.Planned, error) {
	const addr = "10.0.0.1"
	names := []string{desired.Etcd, desired.KubeAPIServer, desired.Kubelet, desired.KubeProxy}
	restarts := map[string]int{desired.KubeProxy: 2}
	d := &desired.Cluster{Name: s.name, Nodes: []desired.Node{{Address: addr, InternalAddress: addr, Hostname: "node-1",
		Roles: []string{"etcd", "controlplane", "worker"}}}}
	o := &observe.Node{Address: addr, Reachable: true, Containers: map[string]observe.Container{}}
	for _, n := range names {
		d.Nodes[0].Containers = append(d.Nodes[0].Containers, desired.Container{Name: n, Image: "rancher/hyperkube:v1.32.13-rancher1"})
		o.Containers[n] = observe.Container{Name: n, Image: "rancher/hyperkube:v1.32.13-rancher1", State: "running", RestartCount: restarts[n]}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}},
		NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.32.13"}}}
	p := &plan.Plan{}
	if !s.applied {
		p.Steps = []plan.Step{{Node: addr, Component: desired.KubeProxy, Action: plan.Restart, Phase: plan.PhaseWorker,
			Reason: "restarted by Docker 2 times"}}
	}
	return &decide.Planned{Plan: p, Desired: d, Observed: &observe.Cluster{At: time.Now(), Nodes: map[string]*observe.Node{addr: o},
		Etcd:       &observe.Etcd{Members: []etcdmember.Member{{ID: 1, Name: "etcd-node-1", PeerURLs: []string{desired.EtcdPeerURL(addr)}, Healthy: true}}},
		Kubernetes: &observe.Kubernetes{Nodes: []corev1.Node{*node}, Link: &observe.Linkage{Owned: map[string]*corev1.Node{addr: node}}}}}, nil
}
func (s *session) Apply(_ context.Context, _ *reconcile.Lock, pl *decide.Planned, _ reconcile.ApplyOptions) (*reconcile.Result, error) {
	s.applied = true
	res := &reconcile.Result{}
	for _, st := range pl.Plan.Steps {
		res.Done = append(res.Done, execute.Outcome{Step: st})
	}
	return res, nil
}
func (*session) ScheduledSnapshot(context.Context, *reconcile.Lock) (*etcdsnap.ScheduledResult, error) {
	return &etcdsnap.ScheduledResult{}, nil
}
func (*session) Close() error { return nil }

const (
	prodYML = "cluster_name: prod\nnodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n"
	// brokenYML misspells a key: the cluster stalls, with the line.
	brokenYML = "cluster_name: prod\nnodes:\n  - {address: 10.0.0.1, user: u, rol: [etcd, controlplane, worker]}\n"
	// hostileDir is a cluster's directory whose name is markup: the page
	// must show it as text.
	hostileDir = `<img src=x onerror=document.title='owned'>`
)

// TestStatusPageInBrowser follows a real git repository with an
// in-process serve (fake sessions: no nodes), opens its status page in a
// headless Chromium behind a token, checks what it shows of a cluster,
// pushes a cluster.yml that fails and sees the page change without a
// reload, and checks that a phone shows it without scrolling sideways.
func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser(t)
	repo := newRepo(t)
	rev1 := repo.push(t, map[string]string{"clusters/prod/cluster.yml": prodYML})

	clone, err := gitrepo.Open(context.Background(), filepath.Join(t.TempDir(), "clone"), "file://"+repo.bare, gitrepo.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	board := gitops.NewBoard(0)
	srv, err := gitops.New(gitops.Config{Repo: clone, RepoURL: "file://" + repo.bare, Branch: "main", Path: "clusters",
		StateDir: t.TempDir(), Interval: time.Hour, DriftInterval: time.Hour,
		Author: object.Signature{Name: "rigger", Email: "rigger@example.test"}, Board: board,
		Open: func(c *spec.Cluster, _ reconcile.Options) (gitops.Session, error) {
			return &session{name: c.ClusterName}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })

	const token = "page-test-token"
	mux := http.NewServeMux()
	page := statuspage.New(board, statuspage.Options{})
	mux.Handle("/", httpauth.New(token, false).Protect(page))
	hs := httptest.NewServer(mux)
	t.Cleanup(func() { page.Close(); hs.Close() })

	prod := `section[data-path="clusters/prod/cluster.yml"]`
	// Sign in with the token once; the cookie carries the events.
	if err := do(ctx, 30*time.Second, chromedp.Navigate(hs.URL+"/?token="+token)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the page to show prod Ready True at "+rev1[:12], 30*time.Second, fmt.Sprintf(
		`(() => { const s = document.querySelector(%q); if (!s) return false;
		  const r = s.querySelector('[data-condition="Ready"]'), v = s.querySelector('[data-field="revision"]');
		  return !!r && r.dataset.status === "True" && r.textContent === "Ready True" && !!v && v.title === %q })()`, prod, rev1))

	url := must(run(ctx, 10*time.Second, chromedp.Location()))(t)
	// textContent: the plans are in closed <details>.
	text := must(run(ctx, 10*time.Second, chromedp.Evaluate[string](`document.querySelector("main").textContent`)))(t)
	if strings.Contains(url, token) {
		t.Errorf("the address still holds the token: %s", url)
	}
	for _, want := range []string{"10.0.0.1", "node-1", "4/4", "kube-proxy (2×)", "etcd-node-1", "healthy",
		"10.0.0.1: restart kube-proxy (restarted by Docker 2 times)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %q:\n%s", want, text)
		}
	}
	// The last reconcile's plan opened, as a reader would, for the picture.
	must(run(ctx, 5*time.Second, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const d = document.querySelector(%q); d.open = true; return d.open })()`, prod+` [data-field="reconciles"] details`))))(t)
	screenshot(t, ctx, "status-page.png", os.Getenv(envScreenshot))

	// A push that breaks prod and adds a cluster whose directory's name is
	// markup: the page changes by itself, and shows the name as text.
	must(run(ctx, 5*time.Second, chromedp.Evaluate[bool](`window.notReloaded = true`)))(t)
	rev2 := repo.push(t, map[string]string{"clusters/prod/cluster.yml": brokenYML,
		"clusters/" + hostileDir + "/cluster.yml": "cluster_name: hostile\nnodes: [\n"})
	srv.Trigger()
	waitJS(t, ctx, "the page to show prod Stalled at "+rev2[:12], 30*time.Second, fmt.Sprintf(
		`(() => { const s = document.querySelector(%q); if (!s) return false;
		  const r = s.querySelector('[data-condition="Ready"]'), st = s.querySelector('[data-condition="Stalled"]'),
		        v = s.querySelector('[data-field="revision"]'), m = s.querySelector('[data-message="Ready"]');
		  return r.dataset.status === "False" && !!st && st.dataset.status === "True" && v.title === %q &&
		         !!m && m.textContent.includes('unknown key "rol"') })()`, prod, rev2))
	hostile := fmt.Sprintf(`section[data-path=%q]`, "clusters/"+hostileDir+"/cluster.yml")
	waitJS(t, ctx, "the page to show the cluster named with markup", 30*time.Second, fmt.Sprintf(
		`(() => { const s = document.querySelector(%q); return !!s && s.querySelector("h2").textContent.includes(%q) &&
		  s.querySelector('[data-message="Ready"]').textContent.includes("invalid YAML") })()`, hostile, hostileDir))
	if !must(run(ctx, 5*time.Second, chromedp.Evaluate[bool](
		`window.notReloaded === true && document.title !== "owned" && document.querySelectorAll("main img").length === 0`)))(t) {
		t.Error("the page was reloaded, or made markup of a directory's name")
	}
	// The broken cluster taken away: the page drops it and keeps prod
	// (the events after the first carry only what changed).
	repo.push(t, map[string]string{"clusters/" + hostileDir + "/cluster.yml": ""})
	srv.Trigger()
	waitJS(t, ctx, "the page to drop the cluster taken away and keep prod", 30*time.Second, fmt.Sprintf(
		`!document.querySelector(%q) && !!document.querySelector(%q) && document.querySelectorAll("main section.cluster").length === 1`, hostile, prod))
	// The plan of the reader's open reconcile stays open across updates.
	if !must(run(ctx, 5*time.Second, chromedp.Evaluate[bool](fmt.Sprintf(
		`document.querySelectorAll(%q).length === 1`, prod+` [data-field="reconciles"] details[open]`))))(t) {
		t.Error("the details a reader opened were closed by an update")
	}

	// A phone: nothing wider than the screen.
	if err := do(ctx, 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if must(run(ctx, 10*time.Second, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)))(t) {
		t.Error("on a 390 px wide phone the page scrolls sideways")
	}
	screenshot(t, ctx, "status-page-phone.png", "")

	// Signed out (the cookie gone) while serve shuts its streams: the
	// page says so instead of retrying for ever.
	if _, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	page.Close()
	waitJS(t, ctx, "the page to say it is refused", 20*time.Second, `document.getElementById("live").dataset.state === "refused"`)
}

// do runs actions in the browser within timeout.
func do(ctx context.Context, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// run runs an action in the browser within timeout, and returns its value.
func run[T any](ctx context.Context, timeout time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// must is v, failing the test when err is not nil.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// waitJS waits until expr is true in the page; it fails the test with
// the page's text when that does not happen within timeout.
func waitJS(t *testing.T, ctx context.Context, what string, timeout time.Duration, expr string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := run(ctx, 5*time.Second, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := run(ctx, 5*time.Second, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("waited %s for %s (last error %v); the page says:\n%s", timeout, what, err, text)
		}
		select {
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		case <-time.After(100 * time.Millisecond): // polls a condition with a deadline
		}
	}
}

// screenshot saves the whole page in the test's artifact directory, and
// at also when it is not "".
func screenshot(t *testing.T, ctx context.Context, name, also string) {
	t.Helper()
	png, err := run(ctx, 20*time.Second, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	for _, p := range []string{filepath.Join(t.ArtifactDir(), name), also} {
		if p == "" {
			continue
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Error(errors.Join(errors.New("save the screenshot"), err))
			continue
		}
		t.Logf("screenshot: %s", p)
	}
}

// richCluster has every part of the status the page shows: failing
// checks, a node down, a mixed Kubernetes version, etcd, a snapshot,
// certificates, add-ons, agent tunnels, pending registrations, drift, and
// reconciles with plans and errors. Its strings hold markup.
func richCluster(now time.Time) gitops.BoardCluster {
	soon, later := now.Add(20*24*time.Hour), now.Add(300*24*time.Hour)
	seen := now.Add(-time.Minute)
	st := &report.Status{Cluster: "edge", ObservedAt: now, PendingSteps: 2,
		Nodes: []report.NodeStatus{
			{Address: "10.0.0.1", Hostname: "cp-1", Roles: []string{"etcd", "controlplane"}, Reachable: true, CertsExpire: &soon,
				Containers:     []report.ContainerStatus{{Name: "etcd", State: "running", InSync: true}, {Name: "kube-apiserver", State: "restarting", Restarts: 7}},
				KubernetesNode: &report.KubernetesNode{Name: "cp-1", Ready: "True"}},
			{Address: "10.0.0.2", Hostname: "edge-1", Roles: []string{"worker"}, Error: "dial tcp 10.0.0.2:22: <b>connection refused</b>",
				KubernetesNode: &report.KubernetesNode{Name: "edge-1", Ready: "Unknown", ReadyReason: "NodeStatusUnknown", ReadyMessage: "Kubelet stopped posting node status."}},
		},
		Certificates: map[string]time.Time{"kube-apiserver": soon, "kube-ca": later},
		MissingNodes: []string{"10.0.0.3"},
		Etcd: &report.EtcdStatus{Members: []etcdmember.Member{{ID: 1, Name: "etcd-cp-1", Healthy: true}},
			Health: map[string]string{"10.0.0.1": "healthy"}},
		Addons: []report.AddonStatus{{Name: "rke-network-plugin", Objects: 12, Ready: true},
			{Name: "rke-ingress-controller", Objects: 5, NotReady: []string{"Deployment ingress-nginx/ingress-nginx: 0/1 ready"}, Pending: 1}},
		Kubernetes: &report.KubernetesVersions{Mixed: true, Running: []report.VersionNodes{{Version: "v1.31.4", Nodes: []string{"10.0.0.2"}},
			{Version: "v1.32.13", Nodes: []string{"10.0.0.1"}}}},
		Problems: []doctor.Finding{{Node: "10.0.0.2", Check: "ssh-reachable", Level: doctor.Fail, Expected: "SSH answers on port 22",
			Found: "connection refused", Fix: "start sshd on the node, or open port 22 from rigger <script>alert(1)</script>"},
			{Check: "duplicate-nodes", Level: doctor.Warn, Found: "two Nodes claim 10.0.0.4", Fix: "delete the stale one: kubectl delete node old-4"},
			{Node: "10.0.0.1", Check: "docker", Level: doctor.Pass}},
	}
	return gitops.BoardCluster{Path: "clusters/edge/cluster.yml",
		Running: &gitops.RunningReconcile{Trigger: "drift-check", Revision: "0123456789abcdef0123456789abcdef01234567", StartedAt: now},
		Status: &gitops.StatusFile{Cluster: "edge", ObservedRevision: "0123456789abcdef0123456789abcdef01234567",
			Source: gitops.Source{Branch: "main", Path: "clusters/edge/cluster.yml"},
			Conditions: []gitops.Condition{{Type: "Ready", Status: "False", Reason: "NodesUnreachable", Message: "10.0.0.2 did not answer", LastTransitionTime: now},
				{Type: "Reconciling", Status: "True", Reason: "RetryScheduled"}, {Type: "Stalled", Status: "False"}},
			LastReconcile: &gitops.LastReconcile{Trigger: "retry", FinishedAt: now, Duration: "3.2s", Steps: 2, Failed: 1},
			Snapshots:     &gitops.SnapshotStatus{Last: &gitops.SnapshotRef{Name: "rigger-auto-1", Taken: now.Add(-time.Hour), Size: 5 << 20}, Next: &soon, NotInS3: []string{"rigger-auto-0"}},
			Restore:       &gitops.RestoreStatus{ID: "r1", Snapshot: "rigger-auto-0", At: now.Add(-48 * time.Hour)},
			PendingAgents: []string{"10.0.0.9 (host <i>rogue</i>)"},
			AgentTunnels:  []gitops.AgentTunnel{{Node: "10.0.0.2", Connected: false, LastSeen: &seen}, {Node: "10.0.0.5", Connected: true, Hostname: "edge-5"}},
			Drift:         []gitops.DriftRepair{{RepairedAt: now, Node: "10.0.0.1", Component: "kubelet", Action: "replace", Reason: "spec changed by hand"}},
			Status:        st},
		Reconciles: []gitops.ReconcileRecord{
			{Trigger: "retry", Revision: "0123456789abcdef", StartedAt: now.Add(-4 * time.Second), FinishedAt: now, Steps: 2, Failed: 1,
				Error: "10.0.0.2: <img src=x>: connection refused", Plan: []string{"10.0.0.1: replace kubelet (spec changed)", "10.0.0.2: not reachable, nothing planned for it (connection refused)"}},
			{Trigger: "change", Revision: "fedcba9876543210", StartedAt: now.Add(-time.Hour), FinishedAt: now.Add(-time.Hour)},
		}}
}

// TestStatusPageShowsEverything renders a board with every part of the
// status in Chromium: each part shows, nothing fails in the script,
// markup in values stays text, and a phone does not scroll sideways.
func TestStatusPageShowsEverything(t *testing.T) {
	ctx := browser(t)
	b := &fakeBoard{}
	held := gitops.BoardCluster{Path: "clusters/far/cluster.yml", Elsewhere: true, HeldBy: "serve-<b>b</b>",
		Status: &gitops.StatusFile{Cluster: "far", Replica: "serve-<b>b</b>", Conditions: []gitops.Condition{
			{Type: gitops.ConditionReady, Status: "True", Reason: "Converged", Message: "the nodes run what cluster.yml says"}}}}
	b.set(richCluster(time.Now()), held)
	page := statuspage.New(b, statuspage.Options{})
	hs := httptest.NewServer(page)
	t.Cleanup(func() { page.Close(); hs.Close() })
	if err := do(ctx, 30*time.Second, chromedp.Navigate(hs.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the page to show edge", 20*time.Second, `!!document.querySelector('section[data-path="clusters/edge/cluster.yml"] h2')`)
	text := must(run(ctx, 10*time.Second, chromedp.Evaluate[string](`document.body.textContent`)))(t)
	for _, want := range []string{
		"2 cluster(s), 1 ready", "reconciled by replica serve-<b>b</b>", "its status as that replica committed it to status.yml",
		"reconciling now (drift-check)", "NodesUnreachable", "10.0.0.2 did not answer",
		"Failing checks", "10.0.0.2: ssh-reachable", "fix: start sshd on the node, or open port 22 from rigger <script>alert(1)</script>",
		"duplicate-nodes", "kube-apiserver (7×)", "1/2", "<b>connection refused</b>", "Unknown (NodeStatusUnknown)",
		"No Kubernetes Node yet: 10.0.0.3", "v1.31.4 (10.0.0.2)", "mixed", "etcd-cp-1", "rigger-auto-1", "5.0 MiB", "rigger-auto-0",
		"First to expire: kube-apiserver", "all 2 certificates", "rke-ingress-controller", "Deployment ingress-nginx/ingress-nginx: 0/1 ready",
		"Agent tunnels", "edge-5", "10.0.0.9 (host <i>rogue</i>)", "Drift repaired", "spec changed by hand",
		"10.0.0.2: <img src=x>: connection refused", "10.0.0.1: replace kubelet (spec changed)", "the plan was empty",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %q", want)
		}
	}
	if strings.Contains(text, "ssh-reachable") && strings.Contains(text, `docker — pass`) {
		t.Error("a check that passed is shown as failing")
	}
	if n := must(run(ctx, 5*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("main img, main script, main b, main i").length`)))(t); n != 0 {
		t.Errorf("values became markup: %d elements", n)
	}
	if err := do(ctx, 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if must(run(ctx, 10*time.Second, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)))(t) {
		t.Error("on a 390 px wide phone the page scrolls sideways")
	}
	screenshot(t, ctx, "status-page-everything-phone.png", "")
}
