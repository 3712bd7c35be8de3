package gitops_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/statuspage"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/lock"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// subnet is this package's sandbox (sandboxtest's table).
const subnet = 5

const (
	clusterPath = "clusters/sandbox/cluster.yml"
	statusPath  = "clusters/sandbox/status.yml"
	secret      = "e2e-webhook-secret-0123456789abcdef"
	author      = "rigger-e2e <rigger-e2e@example.test>"
	// oneFlag is the kube-proxy setting of the example; withFlag adds a
	// flag beside it: a one-flag change.
	oneFlag  = `conntrack-max-per-core: "0"`
	withFlag = oneFlag + "\n      v: \"4\"" // RKE's default is 2
)

// TestServeSandbox follows a bare repository served on loopback whose
// post-receive hook calls serve's webhook (as a forge does), against a real
// one-node cluster on the sandbox:
//   - a push of cluster.yml converges the cluster and a status commit appears;
//   - a human commit pushed while rigger commits its status is kept, and so
//     is rigger's;
//   - status commits and commits that do not touch cluster.yml start no
//     reconcile;
//   - a bad signature is refused (403) and fetches nothing;
//   - a container removed by hand is repaired by the drift check and recorded;
//   - two serve processes on the same cluster never apply at once;
//   - no status commit carries a secret.
func TestServeSandbox(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Nodes: 1, Images: true})
	bin := sandboxtest.BuildRigger(t)
	all := []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
	// The network plugin only, as the other packages' sandbox clusters: the
	// add-ons engine is the same under serve as under apply, and reconcile's
	// TestClusterSandbox rolls out CoreDNS and metrics-server.
	yml := sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, sb, map[int][]string{0: all}))
	if !strings.Contains(yml, oneFlag) {
		t.Fatalf("the example cluster.yml has no %s to change", oneFlag)
	}

	port := freePort(t)
	origin := newOrigin(t, port)
	origin.commit(t, "add the sandbox cluster", map[string]string{clusterPath: yml, "README.md": "clusters\n"})
	origin.push(t)

	stateDir := t.TempDir()
	// serve's notifications of this run, as a webhook receives them.
	notified := make(chan map[string]any, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n map[string]any
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			t.Errorf("a notification that is not JSON: %v", err)
		}
		select {
		case notified <- n:
		default:
		}
	}))
	defer receiver.Close()
	a := startServe(t, bin, "a", origin, stateDir, port, true, "--notify", "json="+receiver.URL+"/hook")
	cli := sandboxtest.DockerClient(t, sb.Nodes[0])
	ctx := context.Background()
	var st *gitops.StatusFile

	ok := t.Run("the first push converges and its status is committed", func(t *testing.T) {
		first := origin.head(t)
		st = origin.waitStatus(t, "the first reconcile", 10*time.Minute, func(f *gitops.StatusFile) bool {
			return f.ObservedRevision == first && ready(f) == "True"
		})
		if st.Status == nil || len(st.Status.Nodes) != 1 || !st.Status.Nodes[0].Reachable {
			t.Fatalf("status.yml does not show the node: %+v", st.Status)
		}
		if code := a.readyz(); code != http.StatusOK {
			t.Errorf("/readyz of a serve that fetched: %d", code)
		}
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", a.port)); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		// The status page's data shows what status.yml does: the cluster
		// Ready at that revision, its node reachable, the reconcile's plan.
		testwait.For(t, time.Minute, "the status page's data to show the cluster Ready", func() error {
			var page statuspage.Snapshot
			if err := getJSON(fmt.Sprintf("http://127.0.0.1:%d/api/clusters", a.port), &page); err != nil {
				return err
			}
			if len(page.Clusters) != 1 || page.Clusters[0].Path != clusterPath || page.Clusters[0].Status == nil {
				return fmt.Errorf("clusters %+v", page.Clusters)
			}
			c := page.Clusters[0]
			if c.Status.ObservedRevision != first || ready(c.Status) != "True" || c.Status.Status == nil ||
				len(c.Status.Status.Nodes) != 1 || !c.Status.Status.Nodes[0].Reachable || len(c.Reconciles) == 0 {
				return fmt.Errorf("cluster %s: revision %s, Ready %s, %d reconciles", c.Path, c.Status.ObservedRevision, ready(c.Status), len(c.Reconciles))
			}
			return nil
		})
		n := testwait.Recv(t, notified, time.Minute, "the notification that the cluster is Ready", func(n map[string]any) bool {
			return n["kind"] == "ready"
		})
		if n["path"] != clusterPath || n["revision"] != first || n["apiVersion"] != "rigger.io/notification/v1" {
			t.Errorf("the Ready notification: %v", n)
		}
	})
	if !ok {
		t.FailNow()
	}

	t.Run("a one-flag change and a human commit pushed behind it: both kept", func(t *testing.T) {
		before, err := cli.ContainerInspect(ctx, "kube-proxy")
		if err != nil {
			t.Fatal(err)
		}
		origin.pull(t)
		origin.commit(t, "kube-proxy: log more", map[string]string{clusterPath: strings.Replace(yml, oneFlag, withFlag, 1)})
		origin.push(t)
		change := origin.head(t)
		origin.commit(t, "docs: a human's commit", map[string]string{"README.md": "clusters, written by a human\n"})
		origin.push(t)
		human := origin.head(t)
		st = origin.waitStatus(t, "the reconcile of the change", 5*time.Minute, func(f *gitops.StatusFile) bool {
			return f.ObservedRevision == change && ready(f) == "True"
		})
		for _, c := range st.Status.Nodes[0].Containers {
			if !c.InSync {
				t.Errorf("after the change, %s is not in sync: %+v", c.Name, c)
			}
		}
		if after, err := cli.ContainerInspect(ctx, "kube-proxy"); err != nil || after.ID == before.ID ||
			!strings.Contains(strings.Join(after.Args, " "), "--v=4") {
			t.Errorf("the change did not replace kube-proxy with --v=4 (%v)", err)
		}
		if got := origin.show(t, "main:README.md"); got != "clusters, written by a human\n" {
			t.Errorf("the human's README.md is now %q", got)
		}
		if log := origin.git(t, "log", "--format=%H", "main"); !strings.Contains(log, human) || !strings.Contains(log, change) {
			t.Errorf("a commit was lost: main's history\n%s\nlacks %s or %s", log, human, change)
		}
		// Rigger's status commits were pushed after the human's: their
		// trailer is there, and the hook called the webhook for them too.
		if msgs := origin.git(t, "log", "--format=%B", human+"..main"); !strings.Contains(msgs, gitops.TrailerKey+": "+clusterPath) {
			t.Errorf("no status commit after the human's commit:\n%s", msgs)
		}
	})

	t.Run("status commits, other files' commits and quiet drift checks start no reconcile and commit nothing", func(t *testing.T) {
		// The last status commit has been fetched (its hook called the
		// webhook) once serve logs it; a reconcile it would start would
		// come before the next drift check, which is sequential with it.
		head := origin.head(t)
		if !a.waitLog(time.Minute, func(e logEntry) bool { return e.Msg == "fetched" && e.Revision == head }) {
			t.Fatalf("serve never fetched the last status commit %s", head)
		}
		driftCheck := func() {
			t.Helper()
			since := time.Now()
			if !a.waitLog(time.Minute, func(e logEntry) bool {
				return e.Msg == "reconcile done" && e.Trigger == "drift-check" && e.Time.After(since)
			}) {
				t.Fatal("no drift check in a minute (--drift-interval 20s)")
			}
		}
		// The first drift check after the change may still find the cluster
		// settling (under make test's load, once: a status that differed
		// from the one of the change's reconcile); it commits what it saw.
		// The next one, with nothing changed, commits nothing.
		driftCheck()
		commits, before := origin.git(t, "rev-list", "--count", "--author=rigger-e2e", "main"), strings.TrimSpace(origin.git(t, "rev-parse", "main"))
		driftCheck()
		if got := a.count(func(e logEntry) bool { return e.Msg == "reconcile starts" && e.Trigger == "change" }); got != 2 {
			t.Errorf("%d reconciles of a change, want 2 (the first push and the flag):\n%s", got, a.tail())
		}
		if now := origin.git(t, "rev-list", "--count", "--author=rigger-e2e", "main"); now != commits {
			t.Errorf("a drift check that changed nothing committed status.yml (%s commits, then %s):\n%s", strings.TrimSpace(commits), strings.TrimSpace(now),
				origin.git(t, "diff", before, "main", "--", statusPath))
		}
	})

	t.Run("a bad or missing signature is refused and fetches nothing", func(t *testing.T) {
		fetches := a.metric(t, `rigger_git_fetches_total{result="ok"}`)
		body := `{"ref":"refs/heads/main"}`
		code := postWebhook(t, port, body, webhook.Sign([]byte("not-the-secret-xxxxxxxxxx"), []byte(body)))
		if code != http.StatusForbidden && code != http.StatusUnauthorized {
			t.Errorf("a bad signature got %d", code)
		}
		if code := postWebhook(t, port, body, ""); code != http.StatusUnauthorized {
			t.Errorf("no signature got %d, want 401", code)
		}
		// A good one is fetched: the refused ones would have been fetched
		// before it, and counted.
		if code := postWebhook(t, port, body, webhook.Sign([]byte(secret), []byte(body))); code >= 300 {
			t.Fatalf("a good signature got %d", code)
		}
		var after float64
		rt.Eventually(ctx, t, time.Minute, "the signed webhook's fetch", func(context.Context) (bool, error) {
			after = a.metric(t, `rigger_git_fetches_total{result="ok"}`)
			return after > fetches, nil
		})
		if after != fetches+1 {
			t.Errorf("%v fetches for one signed and two refused webhooks, want 1", after-fetches)
		}
	})

	t.Run("a container removed by hand is repaired by the drift check and recorded", func(t *testing.T) {
		if err := cli.ContainerRemove(ctx, "kube-proxy", container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		origin.waitStatus(t, "the drift repair", 3*time.Minute, func(f *gitops.StatusFile) bool {
			for _, d := range f.Drift {
				if d.Component == "kube-proxy" && d.Error == "" {
					return ready(f) == "True"
				}
			}
			return false
		})
		if _, err := cli.ContainerInspect(ctx, "kube-proxy"); err != nil {
			t.Errorf("kube-proxy was not recreated: %v", err)
		}
	})

	t.Run("suspended: a change is reported, not applied; resumed: applied", func(t *testing.T) {
		proxy, err := cli.ContainerInspect(ctx, "kube-proxy")
		if err != nil {
			t.Fatal(err)
		}
		// The nodes run withFlag: going back to yml is a change.
		suspended := strings.Replace(yml, "rigger:\n", "rigger:\n  suspend: true\n", 1)
		origin.pull(t)
		origin.commit(t, "suspend, and a change that must wait", map[string]string{clusterPath: suspended})
		origin.push(t)
		pause := origin.head(t)
		st = origin.waitStatus(t, "the suspended reconcile", 3*time.Minute, func(f *gitops.StatusFile) bool {
			return f.ObservedRevision == pause && f.Suspended
		})
		if r := condition(st, gitops.ConditionReady); r.Reason != gitops.ReasonSuspended || r.Status != "Unknown" || st.Status.PendingSteps == 0 {
			t.Errorf("suspended with a change pending: Ready %+v, %d steps pending", r, st.Status.PendingSteps)
		}
		if now, err := cli.ContainerInspect(ctx, "kube-proxy"); err != nil || now.ID != proxy.ID {
			t.Errorf("a suspended cluster's kube-proxy was changed (%v)", err)
		}
		origin.pull(t)
		origin.commit(t, "resume", map[string]string{clusterPath: yml})
		origin.push(t)
		resume := origin.head(t)
		origin.waitStatus(t, "the resumed reconcile", 5*time.Minute, func(f *gitops.StatusFile) bool {
			return f.ObservedRevision == resume && ready(f) == "True" && !f.Suspended
		})
		if now, err := cli.ContainerInspect(ctx, "kube-proxy"); err != nil || now.ID == proxy.ID {
			t.Errorf("the resumed change did not replace kube-proxy (%v)", err)
		}
		if st.Snapshots == nil || st.Snapshots.Last == nil || st.Snapshots.Last.Kind != "scheduled" || st.Snapshots.Next == nil {
			t.Errorf("status.yml has no scheduled snapshot (backup_config is on by default): %+v", st.Snapshots)
		}
	})

	b := startServe(t, bin, "b", origin, stateDir, 0, false)
	t.Run("two serves with one state directory never hold the cluster at once", func(t *testing.T) {
		origin.pull(t)
		origin.commit(t, "kube-proxy: log more again", map[string]string{clusterPath: strings.Replace(yml, oneFlag, withFlag, 1)})
		origin.push(t)
		third := origin.head(t)
		origin.waitStatus(t, "the reconcile with two servers", 5*time.Minute, func(f *gitops.StatusFile) bool {
			return f.ObservedRevision == third && ready(f) == "True"
		})
		// Both have held the cluster and let it go at least once.
		for _, p := range []*serveProc{a, b} {
			if !p.waitLog(2*time.Minute, func(e logEntry) bool { return e.Msg == "cluster unlocked" }) {
				t.Errorf("serve %s never held and released the cluster's lock", p.name)
			}
		}
		checkNoOverlap(t, a, b)
	})
	a.stop()
	b.stop()

	kubeconfig := writeKubeconfig(t, bin, yml, filepath.Join(stateDir, "sandbox"))
	t.Run("two replicas: the holder of the cluster's Lease reconciles, the other takes over", func(t *testing.T) {
		c := startServe(t, bin, "c", origin, stateDir, 0, false, "--leader-elect", "--kubeconfig", kubeconfig, "--lease-namespace", "kube-system")
		d := startServe(t, bin, "d", origin, stateDir, 0, false, "--leader-elect", "--kubeconfig", kubeconfig, "--lease-namespace", "kube-system")
		for _, p := range []*serveProc{c, d} {
			testwait.For(t, 2*time.Minute, "serve "+p.name+" ready: every replica is, each with its share", func() bool {
				return p.readyz() == http.StatusOK
			})
		}
		holds := func(e logEntry) bool { return e.Msg == "holding the cluster's Lease: this replica reconciles it" }
		var holder, other *serveProc
		testwait.For(t, 2*time.Minute, "a replica holding the cluster's Lease", func() bool {
			switch {
			case c.count(holds) > 0:
				holder, other = c, d
			case d.count(holds) > 0:
				holder, other = d, c
			}
			return holder != nil
		})
		// Each replica is stopped only once it has locked the cluster to
		// reconcile it: checkNoOverlap needs a hold of each to prove anything.
		locked := func(e logEntry) bool { return e.Msg == "cluster locked" }
		if !holder.waitLog(time.Minute, locked) {
			t.Errorf("the holder, serve %s, never locked the cluster to reconcile it", holder.name)
		}
		holder.stop() // SIGTERM: it gives the Lease up at once
		if !other.waitLog(time.Minute, holds) {
			t.Fatalf("serve %s never took the cluster over from the stopped one", other.name)
		}
		if !other.waitLog(time.Minute, locked) {
			t.Errorf("the new holder, serve %s, never locked the cluster to reconcile it", other.name)
		}
		other.stop()
		checkNoOverlap(t, c, d)
	})

	t.Run("a CLI apply elsewhere is refused while another rigger holds the cluster's Lease", func(t *testing.T) {
		cs := kubeClient(t, kubeconfig)
		other := lock.Holder{ID: "rigger serve on elsewhere (pid 7)", Host: "elsewhere", PID: 7, Command: "serve", Since: time.Now()}
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer lcancel()
		_, release, err := lock.Lease(lctx, cs, reconcile.ClusterLeaseNamespace, reconcile.ClusterLeaseName, other, lock.LeaseOptions{Wait: true})
		if err != nil {
			t.Fatalf("take the cluster's Lease: %v", err)
		}
		file := filepath.Join(t.TempDir(), "cluster.yml")
		if err := os.WriteFile(file, []byte(strings.Replace(yml, oneFlag, oneFlag+"\n      v: \"5\"", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "apply", "--yes", "-f", file, "--state-dir", t.TempDir()).CombinedOutput()
		release()
		if err == nil || !strings.Contains(string(out), other.ID) {
			t.Errorf("apply while another rigger holds the cluster's Lease: %v\n%s\nwant a refusal naming %q", err, out, other.ID)
		}
	})

	t.Run("no status commit holds a secret", func(t *testing.T) {
		scanStatusCommits(t, origin, filepath.Join(stateDir, "sandbox"))
	})
}

func condition(f *gitops.StatusFile, typ string) gitops.Condition {
	for _, c := range f.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return gitops.Condition{}
}

// writeKubeconfig is the sandbox cluster's admin kubeconfig, from rigger
// kubeconfig.
func writeKubeconfig(t testing.TB, bin, yml, state string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.yml"), []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "kubeconfig")
	if msg, err := exec.Command(bin, "kubeconfig", "-f", filepath.Join(dir, "cluster.yml"), "--state-dir", state, "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("rigger kubeconfig: %v\n%s", err, msg)
	}
	return out
}

// ready is the Ready condition's status.
func ready(f *gitops.StatusFile) string {
	for _, c := range f.Conditions {
		if c.Type == gitops.ConditionReady {
			return c.Status
		}
	}
	return ""
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// origin is a bare repository with a post-receive hook that calls the
// webhook of the serve listening on port, and a working clone of it.
type origin struct {
	bare, work string
}

func newOrigin(t testing.TB, port int) *origin {
	t.Helper()
	dir := t.TempDir()
	o := &origin{bare: filepath.Join(dir, "origin.git"), work: filepath.Join(dir, "work")}
	run(t, dir, "git", "init", "-q", "--bare", "-b", "main", o.bare)
	body := `{"ref":"refs/heads/main"}`
	hook := fmt.Sprintf("#!/bin/sh\ncurl -s -o /dev/null -m 5 -X POST -H 'Content-Type: application/json' "+
		"-H 'X-Rigger-Signature-256: %s' --data '%s' http://127.0.0.1:%d%s || true\n",
		webhook.Sign([]byte(secret), []byte(body)), body, port, webhook.Path([]byte(secret)))
	if err := os.WriteFile(filepath.Join(o.bare, "hooks", "post-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "git", "clone", "-q", o.bare, o.work)
	run(t, o.work, "git", "checkout", "-q", "-b", "main")
	return o
}

func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.test",
		"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func (o *origin) git(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, o.bare, "git", args...)
}

func (o *origin) show(t testing.TB, obj string) string {
	t.Helper()
	return o.git(t, "show", obj)
}

func (o *origin) head(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(run(t, o.work, "git", "rev-parse", "HEAD"))
}

func (o *origin) commit(t testing.TB, msg string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(o.work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, o.work, "git", "add", p)
	}
	run(t, o.work, "git", "commit", "-q", "-m", msg)
}

// push pushes main; when rigger pushed a status commit first, it rebases
// on it and pushes again, as a person would.
func (o *origin) push(t testing.TB) {
	t.Helper()
	for range 5 {
		cmd := exec.Command("git", "push", "-q", "origin", "main")
		cmd.Dir = o.work
		if cmd.Run() == nil {
			return
		}
		o.pull(t)
	}
	t.Fatal("git push rejected five times")
}

// pull takes rigger's status commits into the working clone.
func (o *origin) pull(t testing.TB) {
	t.Helper()
	run(t, o.work, "git", "pull", "-q", "--rebase", "origin", "main")
}

// waitStatus waits until main's status.yml satisfies ok.
func (o *origin) waitStatus(t testing.TB, what string, timeout time.Duration, ok func(*gitops.StatusFile) bool) *gitops.StatusFile {
	t.Helper()
	var f *gitops.StatusFile
	last := ""
	testwait.For(t, timeout, what, func() error {
		out, err := exec.Command("git", "-C", o.bare, "show", "main:"+statusPath).Output()
		if err != nil {
			return fmt.Errorf("git show main:%s: %v; the last status.yml read:\n%s", statusPath, err, last)
		}
		last = string(out)
		if f = gitops.ParseStatus(out); f == nil || !ok(f) {
			return fmt.Errorf("status.yml did not get there; it is:\n%s", last)
		}
		return nil
	})
	return f
}

// serveProc is a running `rigger serve` and its JSON log.
type serveProc struct {
	name string
	port int
	// stop interrupts serve and waits for it to end.
	stop func()
	// ending is set when serve is expected to end: it is stopped, or
	// killed on purpose (expectEnd).
	ending atomic.Bool
	mu     sync.Mutex
	log    []logEntry
	raw    bytes.Buffer
}

type logEntry struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	Trigger  string    `json:"trigger"`
	Steps    int       `json:"steps"`
	Revision string    `json:"revision"`
}

// startServe starts rigger serve on origin; with webhook, it listens on
// port with the webhook secret (port 0: a free one, no webhook).
func startServe(t testing.TB, bin, name string, o *origin, stateDir string, port int, hook bool, extra ...string) *serveProc {
	t.Helper()
	if port == 0 {
		port = freePort(t)
	}
	dir := t.TempDir()
	args := []string{"serve", "--repo", "file://" + o.bare, "--branch", "main", "--path", "clusters",
		"--state-dir", stateDir, "--workdir", filepath.Join(dir, "clone"), "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--interval", "2s", "--drift-interval", "20s", "--author", author, "--log-format", "json", "--log-level", "debug"}
	if hook {
		f := filepath.Join(dir, "webhook-secret")
		if err := os.WriteFile(f, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--webhook-secret-file", f, "--interval", "1h")
	}
	args = append(args, extra...)
	p := &serveProc{name: name, port: port}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer logFile.Close()
		sc := bufio.NewScanner(io.TeeReader(stderr, logFile))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e logEntry
			_ = json.Unmarshal(sc.Bytes(), &e)
			p.mu.Lock()
			p.log = append(p.log, e)
			p.raw.Write(sc.Bytes())
			p.raw.WriteByte('\n')
			p.mu.Unlock()
		}
		if !p.ending.Load() {
			t.Errorf("serve %s ended by itself; its log ends:\n%s", name, p.tail())
		}
	}()
	p.stop = sync.OnceFunc(func() {
		p.ending.Store(true)
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = cmd.Wait()
	})
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("serve %s log:\n%s", name, p.tail())
		}
	})
	return p
}

// expectEnd says serve is expected to end by itself (a fault kills it).
func (p *serveProc) expectEnd() { p.ending.Store(true) }

// waitRaw waits until the raw log holds sub.
func (p *serveProc) waitRaw(timeout time.Duration, sub string) bool {
	return testwait.Until(timeout, 200*time.Millisecond, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return strings.Contains(p.raw.String(), sub)
	})
}

// readyz is the status of serve's /readyz (0 when it does not answer).
func (p *serveProc) readyz() int {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.port))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLog waits until a log entry matches.
func (p *serveProc) waitLog(timeout time.Duration, match func(logEntry) bool) bool {
	return testwait.Until(timeout, 200*time.Millisecond, func() bool { return p.count(match) > 0 })
}

func (p *serveProc) count(match func(logEntry) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.log {
		if match(e) {
			n++
		}
	}
	return n
}

func (p *serveProc) entries() []logEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]logEntry(nil), p.log...)
}

// tail is the end of the raw log.
func (p *serveProc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.raw.String()
	if len(s) > 20000 {
		s = s[len(s)-20000:]
	}
	return s
}

// metric reads one sample of serve's /metrics (0 when absent).
func (p *serveProc) metric(t testing.TB, series string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func postWebhook(t testing.TB, port int, body, sig string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", port, webhook.Path([]byte(secret))), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set("X-Rigger-Signature-256", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// checkNoOverlap checks that the two servers never held the cluster's lock
// at the same time, from their logs' "cluster locked"/"cluster unlocked".
func checkNoOverlap(t testing.TB, procs ...*serveProc) {
	t.Helper()
	type span struct {
		who        string
		start, end time.Time
	}
	var spans []span
	for _, p := range procs {
		var open *span
		for _, e := range p.entries() {
			switch e.Msg {
			case "cluster locked":
				open = &span{who: p.name, start: e.Time}
			case "cluster unlocked":
				if open != nil {
					open.end = e.Time
					spans = append(spans, *open)
					open = nil
				}
			}
		}
		if open != nil {
			open.end = time.Now()
			spans = append(spans, *open)
		}
	}
	held := map[string]int{}
	for i, a := range spans {
		held[a.who]++
		for _, b := range spans[i+1:] {
			if a.who != b.who && a.start.Before(b.end) && b.start.Before(a.end) {
				t.Errorf("serve %s (%s–%s) and serve %s (%s–%s) held the cluster at once",
					a.who, a.start.Format(time.StampMilli), a.end.Format(time.StampMilli),
					b.who, b.start.Format(time.StampMilli), b.end.Format(time.StampMilli))
			}
		}
	}
	for _, p := range procs {
		if held[p.name] == 0 {
			t.Errorf("serve %s never held the cluster's lock: the test proves nothing", p.name)
		}
	}
}

// secretPatterns are what must never be in a status commit.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`PRIVATE KEY`),
	regexp.MustCompile(`(?i)(password|secret_key|token)\s*:`),
	regexp.MustCompile(regexp.QuoteMeta(secret)),
}

// scanStatusCommits checks every commit of rigger's for keys, tokens and
// passwords, and for the cluster's own key material.
func scanStatusCommits(t testing.TB, o *origin, clusterState string) {
	t.Helper()
	patterns := secretPatterns
	keys, _ := filepath.Glob(filepath.Join(clusterState, "*key*"))
	for _, k := range keys {
		b, err := os.ReadFile(k)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) >= 40 && !strings.HasPrefix(line, "-----") {
				patterns = append(patterns, regexp.MustCompile(regexp.QuoteMeta(line)))
				break
			}
		}
	}
	if len(patterns) == len(secretPatterns) {
		t.Errorf("no key found in %s to look for: the scan would prove less than it claims", clusterState)
	}
	commits := strings.Fields(o.git(t, "log", "--format=%H", "--author=rigger-e2e", "main"))
	if len(commits) == 0 {
		t.Fatal("no status commit to scan")
	}
	for _, c := range commits {
		patch := o.git(t, "show", "--format=%B", c)
		for _, re := range patterns {
			if loc := re.FindStringIndex(patch); loc != nil {
				t.Errorf("status commit %s holds a secret (%s)", c, re)
			}
		}
	}
}

// kubeClient is a client of the sandbox cluster's API server.
func kubeClient(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// getJSON decodes the JSON answer of a GET of url into v.
func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(v)
}
