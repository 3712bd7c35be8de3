package gitops_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"os/exec"

	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/spec"
)

// TestServerInvalidSpec follows a real repository whose cluster.yml has a
// mistake: the status commit says Stalled with the file and line, and
// neither that commit nor a commit of another file starts a reconcile.
func TestServerInvalidSpec(t *testing.T) {
	o := newOrigin(t, freePort(t)) // nothing listens: the hook's call fails, as a forge's may
	o.commit(t, "a cluster with a typo", map[string]string{
		"clusters/bad/cluster.yml": "kubernetes_verison: v1.31.4\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n",
		"README.md":                "clusters\n",
	})
	o.push(t)
	srv, events := serveClusters(t, o, nil)

	starts := 0
	wait := func(kind gitops.EventKind) gitops.Event {
		t.Helper()
		return testwait.Recv(t, events, 30*time.Second, fmt.Sprintf("a %s event", kind), func(e gitops.Event) bool {
			if e.Kind == gitops.EventReconcileStart {
				starts++
				if e.Trigger != "change" { // a first reconcile of content never applied
					t.Errorf("reconcile start's trigger %q, want change", e.Trigger)
				}
			}
			return e.Kind == kind
		})
	}
	wait(gitops.EventStatusWritten)
	conds := conditionsOf(t, o, "clusters/bad")
	stalled, ready := conds[gitops.ConditionStalled], conds[gitops.ConditionReady]
	if stalled.Status != "True" || stalled.Reason != "InvalidSpec" || ready.Reason != "InvalidSpec" ||
		!strings.Contains(ready.Message, "clusters/bad/cluster.yml:1") || !strings.Contains(ready.Message, "kubernetes_version") ||
		strings.Contains(stalled.Message, "kubernetes_version") {
		t.Errorf("Stalled condition %+v, Ready %+v: want InvalidSpec, Ready naming the file, line and the key meant, once", stalled, ready)
	}
	if msg, _ := bareGit(o, "log", "-1", "--format=%an <%ae>%n%B", "main"); !strings.Contains(msg, "rigger-e2e <rigger-e2e@example.test>") ||
		!strings.Contains(msg, gitops.TrailerKey+": clusters/bad/cluster.yml") {
		t.Errorf("the status commit lacks the author or the trailer:\n%s", msg)
	}

	// The status commit, then a commit of another file: fetched, not
	// reconciled, and status.yml is not committed again.
	srv.Trigger()
	wait(gitops.EventFetched)
	o.pull(t)
	o.commit(t, "docs", map[string]string{"README.md": "clusters, more\n"})
	o.push(t)
	srv.Trigger()
	wait(gitops.EventFetched)
	srv.Trigger()
	wait(gitops.EventFetched)
	if starts != 1 {
		t.Errorf("%d reconciles, want 1: a commit that does not change cluster.yml started one", starts)
	}
	if n, _ := bareGit(o, "rev-list", "--count", "--author=rigger-e2e", "main"); strings.TrimSpace(n) != "1" {
		t.Errorf("%s status commits, want 1", strings.TrimSpace(n))
	}
}

// serveClusters follows o's main branch, path clusters, until the test
// ends, with sessions from open (real ones when nil); it returns the
// server and its events.
func serveClusters(t *testing.T, o *origin, open gitops.Opener) (*gitops.Server, chan gitops.Event) {
	t.Helper()
	return serveClustersWith(t, o, gitops.Config{Open: open})
}

// waitEvent returns the next event of kind, dropping the others; it fails
// the test when none comes within timeout.
func waitEvent(t testing.TB, events <-chan gitops.Event, kind gitops.EventKind, timeout time.Duration) gitops.Event {
	t.Helper()
	return testwait.Recv(t, events, timeout, fmt.Sprintf("a %s event", kind), func(e gitops.Event) bool { return e.Kind == kind })
}

// serveClustersWith is serveClusters with cfg's Open, PendingAgents,
// AgentTunnels, StateDir, Board, Decrypt and Log.
func serveClustersWith(t *testing.T, o *origin, cfg gitops.Config) (*gitops.Server, chan gitops.Event) {
	t.Helper()
	repo, err := gitrepo.Open(context.Background(), filepath.Join(t.TempDir(), "clone"), "file://"+o.bare, gitrepo.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan gitops.Event, 100)
	stateDir := cfg.StateDir
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	srv, err := gitops.New(gitops.Config{Repo: repo, RepoURL: "file://" + o.bare, Branch: "main", Path: "clusters",
		StateDir: stateDir, Interval: time.Hour, DriftInterval: time.Hour, MaxConcurrent: cfg.MaxConcurrent,
		Author: object.Signature{Name: "rigger-e2e", Email: "rigger-e2e@example.test"},
		Open:   cfg.Open, PendingAgents: cfg.PendingAgents, AgentTunnels: cfg.AgentTunnels, Board: cfg.Board,
		Decrypt: cfg.Decrypt, Log: cfg.Log,
		Events: func(e gitops.Event) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv, events
}

// conditionsOf returns the conditions of the status.yml in dir on main,
// by type; it has a Stalled one.
func conditionsOf(t *testing.T, o *origin, dir string) map[string]gitops.Condition {
	t.Helper()
	out, err := bareGit(o, "show", "main:"+dir+"/status.yml")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := gitops.ParseStatus([]byte(out))
	if f == nil {
		t.Fatalf("%s/status.yml does not parse:\n%s", dir, out)
	}
	conds := map[string]gitops.Condition{}
	for _, c := range f.Conditions {
		conds[c.Type] = c
	}
	if _, ok := conds[gitops.ConditionStalled]; !ok {
		t.Fatalf("%s/status.yml has no Stalled condition:\n%s", dir, out)
	}
	return conds
}

// bareGit runs git in the bare repository.
func bareGit(o *origin, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", o.bare}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestServerStatusBranchAndDuplicates: with a status branch, status.yml
// files go there and the branch of cluster.yml gets none; two cluster.yml
// with one cluster_name are both refused, each naming the other, whichever
// serve read first.
func TestServerStatusBranchAndDuplicates(t *testing.T) {
	o := newOrigin(t, freePort(t))
	// Nodes on a closed loopback port: they cannot be reached, at once.
	dup := "cluster_name: dup\nnodes:\n  - {address: 127.0.0.1, port: 1, user: u, role: [etcd, controlplane, worker]}\n" +
		"rigger:\n  ssh:\n    host_key_policy: \"off\"\n"
	o.commit(t, "two clusters with one name", map[string]string{"clusters/a/cluster.yml": dup, "clusters/b/cluster.yml": dup})
	o.push(t)
	repo, err := gitrepo.Open(context.Background(), filepath.Join(t.TempDir(), "clone"), "file://"+o.bare, gitrepo.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan string, 10)
	srv, err := gitops.New(gitops.Config{Repo: repo, Branch: "main", StatusBranch: "rigger-status", Path: "clusters",
		StateDir: t.TempDir(), Interval: time.Hour, DriftInterval: time.Hour, MaxConcurrent: 2,
		Author: object.Signature{Name: "rigger-e2e", Email: "rigger-e2e@example.test"},
		Events: func(e gitops.Event) {
			if e.Kind == gitops.EventStatusWritten {
				written <- e.Path
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	reasons := map[string]string{}
	testwait.For(t, 2*time.Minute, "both clusters refused as duplicates", func() error {
		testwait.Recv(t, written, time.Minute, "a status file written", nil)
		for _, p := range []string{"clusters/a/status.yml", "clusters/b/status.yml"} {
			out, err := bareGit(o, "show", "rigger-status:"+p)
			if err != nil {
				continue // not written yet
			}
			f := gitops.ParseStatus([]byte(out))
			if f == nil {
				t.Fatalf("%s does not parse:\n%s", p, out)
			}
			for _, c := range f.Conditions {
				if c.Type == gitops.ConditionReady && c.Reason == "DuplicateCluster" {
					reasons[p] = c.Message
				}
			}
		}
		if len(reasons) != 2 {
			return fmt.Errorf("refused: %v", reasons)
		}
		return nil
	})
	if out, err := bareGit(o, "ls-tree", "-r", "--name-only", "main"); err != nil || strings.Contains(out, "status.yml") {
		t.Errorf("main got a status.yml (%v):\n%s", err, out)
	}
	for p, msg := range reasons {
		other := "clusters/a/cluster.yml"
		if strings.HasPrefix(p, "clusters/a/") {
			other = "clusters/b/cluster.yml"
		}
		if !strings.Contains(msg, other) || !strings.Contains(msg, `"dup"`) {
			t.Errorf("%s: %q does not name %s and the name", p, msg, other)
		}
	}
}

// TestServerHostileClusterStallsAlone follows a real repository with a
// cluster.yml made to cost memory (an alias inside itself), one larger
// than rigger reads, one whose plan would be refused (an inline add-on
// that is not YAML: decide.CheckSpec, as every command runs it) and a
// good one: the first three are Stalled with what is wrong, and never
// reach a session; the good one goes on to its reconcile (its session is
// opened).
func TestServerHostileClusterStallsAlone(t *testing.T) {
	o := newOrigin(t, freePort(t))
	good := "cluster_name: good\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n"
	o.commit(t, "three clusters", map[string]string{
		"clusters/good/cluster.yml": good,
		"clusters/bomb/cluster.yml": "cluster_name: bomb\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n" +
			"services:\n  kube-api:\n    admission_configuration: &a {apiVersion: v1, kind: X, x: *a}\n",
		"clusters/big/cluster.yml": good + strings.Repeat("# padding that compresses well\n", 300_000), // 9 MiB
		"clusters/addon/cluster.yml": "cluster_name: addon\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n" +
			"addons: |\n  kind: [ConfigMap\n",
	})
	o.push(t)
	var mu sync.Mutex
	opened := map[string]bool{}
	_, events := serveClusters(t, o, func(c *spec.Cluster, _ reconcile.Options) (gitops.Session, error) {
		mu.Lock()
		defer mu.Unlock()
		opened[c.ClusterName] = true
		return nil, errors.New("no nodes in this test")
	})

	waitStatusWritten(t, events, 4)
	for cluster, want := range map[string]string{
		"bomb":  "clusters/bomb/cluster.yml:6:62: error: services.kube-api.admission_configuration.x: the alias *a is inside the value it names",
		"big":   "clusters/big/cluster.yml: error: the file is larger than 8 MiB",
		"addon": "clusters/addon/cluster.yml: error: addons: document 1 at line 1: yaml: line 1",
	} {
		conds := conditionsOf(t, o, "clusters/"+cluster)
		if c, r := conds[gitops.ConditionStalled], conds[gitops.ConditionReady]; c.Status != "True" || c.Reason != "InvalidSpec" || !strings.Contains(r.Message, want) {
			t.Errorf("%s: Stalled %+v, Ready %+v, want InvalidSpec, Ready saying %q", cluster, c, r, want)
		}
	}
	if c := conditionsOf(t, o, "clusters/good")[gitops.ConditionStalled]; c.Status != "False" {
		t.Errorf("good: Stalled %+v, want False: it is retried", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if !opened["good"] || opened["bomb"] || opened["big"] || opened["addon"] {
		t.Errorf("sessions opened for %v, want the good cluster's only", opened)
	}
}

// TestServerPendingAgents: the agents of nodes a cluster.yml does not
// declare, and the tunnels of those it does, are listed in its status.yml.
func TestServerPendingAgents(t *testing.T) {
	o := newOrigin(t, freePort(t))
	o.commit(t, "an edge cluster", map[string]string{
		"clusters/edge/cluster.yml": "cluster_name: edge\nnodes:\n  - {address: 192.0.2.10, role: [etcd, controlplane, worker], transport: agent}\n",
	})
	o.push(t)
	var asked []string
	var mu sync.Mutex
	seen := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	_, events := serveClustersWith(t, o, gitops.Config{
		Open: func(*spec.Cluster, reconcile.Options) (gitops.Session, error) {
			return nil, errors.New("no nodes in this test")
		},
		PendingAgents: func(cluster string) []string {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, cluster)
			return []string{"192.0.2.99 (host edge-99)"}
		},
		AgentTunnels: func(string) []gitops.AgentTunnel {
			return []gitops.AgentTunnel{{Node: "192.0.2.10", Connected: true, Hostname: "edge-10", LastSeen: &seen}}
		},
	})
	waitEvent(t, events, gitops.EventStatusWritten, 30*time.Second)
	out, err := bareGit(o, "show", "main:clusters/edge/status.yml")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := gitops.ParseStatus([]byte(out))
	if f == nil || !slices.Equal(f.PendingAgents, []string{"192.0.2.99 (host edge-99)"}) {
		t.Errorf("status.yml does not list the pending agent:\n%s", out)
	}
	if want := []gitops.AgentTunnel{{Node: "192.0.2.10", Connected: true, Hostname: "edge-10", LastSeen: &seen}}; f == nil || !cmp.Equal(f.AgentTunnels, want) {
		t.Errorf("status.yml does not give the agent node's tunnel:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(asked, "edge") {
		t.Errorf("pending agents asked for %v, want edge", asked)
	}
}

// TestStateDirBoundToItsClusterYML: a cluster's state directory (its CA,
// keys and admin certificate) is bound to the cluster.yml it was made
// for. After a restart of serve, a cluster.yml elsewhere in the
// repository that takes the same cluster_name is refused, naming the one
// the directory is for, and never opened on the directory; a cluster named
// as serve's own directory is refused too.
func TestStateDirBoundToItsClusterYML(t *testing.T) {
	stateDir := t.TempDir()
	cluster := func(name string) string {
		return "cluster_name: " + name + "\nnodes:\n  - {address: 127.0.0.1, port: 1, user: u, role: [etcd, controlplane, worker]}\n"
	}
	o := newOrigin(t, freePort(t))
	o.commit(t, "the real cluster", map[string]string{"clusters/real/cluster.yml": cluster("prod")})
	o.push(t)
	var mu sync.Mutex
	opened := map[string]string{} // state directory → cluster_name
	open := func(c *spec.Cluster, opts reconcile.Options) (gitops.Session, error) {
		mu.Lock()
		opened[opts.StateDir] = c.ClusterName
		mu.Unlock()
		return nil, errors.New("no nodes in this test")
	}
	// The first serve stays idle: it fetches once an hour.
	_, events := serveClustersWith(t, o, gitops.Config{Open: open, StateDir: stateDir})
	waitEvent(t, events, gitops.EventStatusWritten, time.Minute)
	b, err := os.ReadFile(filepath.Join(stateDir, "prod", gitops.BindingFile))
	if err != nil || !strings.Contains(string(b), "clusters/real/cluster.yml") {
		t.Fatalf("the state directory is not bound to its cluster.yml: %s, %v", b, err)
	}

	// Someone replaces the real cluster.yml by another that takes its name,
	// and adds one named as serve's own directory; serve starts again.
	o.pull(t)
	run(t, o.work, "git", "rm", "-q", "clusters/real/cluster.yml")
	o.commit(t, "a newcomer", map[string]string{"clusters/newcomer/cluster.yml": cluster("prod"), "clusters/own/cluster.yml": cluster(gitops.ServeDir)})
	o.push(t)
	mu.Lock()
	clear(opened)
	mu.Unlock()
	_, events = serveClustersWith(t, o, gitops.Config{Open: open, StateDir: stateDir})
	for range 2 {
		waitEvent(t, events, gitops.EventStatusWritten, time.Minute)
	}
	o.pull(t)
	newcomer := conditionsOf(t, o, "clusters/newcomer")[gitops.ConditionReady]
	if newcomer.Reason != string(gitops.ReasonDuplicateCluster) || !strings.Contains(newcomer.Message, "clusters/real/cluster.yml") ||
		!strings.Contains(newcomer.Message, gitops.BindingFile) {
		t.Errorf("the newcomer: %+v; want it refused, naming the cluster.yml the directory is for", newcomer)
	}
	own := conditionsOf(t, o, "clusters/own")[gitops.ConditionReady]
	if own.Reason != string(gitops.ReasonDuplicateCluster) || !strings.Contains(own.Message, "rigger serve's own directory") {
		t.Errorf("a cluster named %s: %+v; want it refused", gitops.ServeDir, own)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(opened) != 0 {
		t.Errorf("sessions opened on %v", opened)
	}
}

// waitStatusWritten waits up to a minute for status.yml commits of n
// different clusters.
func waitStatusWritten(t *testing.T, events <-chan gitops.Event, n int) {
	t.Helper()
	written := map[string]bool{}
	timeout := time.After(60 * time.Second)
	for len(written) < n {
		select {
		case e := <-events:
			if e.Kind == gitops.EventStatusWritten {
				written[e.Path] = true
			}
		case <-timeout:
			t.Fatalf("status.yml written for %v only, want %d clusters", written, n)
		}
	}
}
