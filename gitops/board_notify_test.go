package gitops_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/notify"
)

// TestBoardNotifications drives a Board as serve's workers do, with a
// Notifier watching it: a new revision that fails, is retried and
// converges, then a failed snapshot; a webhook and GitHub's commit status
// API (httptest) get what each step calls for, in order.
func TestBoardNotifications(t *testing.T) {
	type got struct{ path, body string }
	hook, forge := make(chan got, 20), make(chan got, 20)
	serve := func(ch chan got) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			ch <- got{r.URL.Path, string(b)}
			w.WriteHeader(http.StatusCreated)
		}))
		t.Cleanup(s.Close)
		return s
	}
	hookSrv, forgeSrv := serve(hook), serve(forge)
	target, err := notify.ParseTarget("json=" + hookSrv.URL + "/hook")
	if err != nil {
		t.Fatal(err)
	}
	f, err := notify.NewForge(notify.ForgeGitHub, "git@github.com:acme/clusters.git", forgeSrv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	board := gitops.NewBoard(0)
	n := notify.New(notify.Config{Targets: []notify.Target{target}, Forge: f})
	n.Watch(board)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	const path, revA, revB = "prod/cluster.yml", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	st := func(rev, ready, reason, msg string) *gitops.StatusFile {
		return &gitops.StatusFile{Cluster: "prod", ObservedRevision: rev, Conditions: []gitops.Condition{
			{Type: gitops.ConditionReady, Status: ready, Reason: reason, Message: msg},
			{Type: gitops.ConditionStalled, Status: "False", Reason: reason}}}
	}
	at := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	readyA := st(revA, "True", gitops.ReasonSucceeded, "the nodes run what cluster.yml of aaaa says")
	board.Known(path, readyA) // status.yml read back at start
	board.Started(path, "start", revA, at)
	board.Finished(path, gitops.ReconcileRecord{Revision: revA}, readyA) // nothing new
	board.Started(path, "change", revB, at)
	failing := st(revA, "False", gitops.ReasonNodesUnreachable, "1 node(s) of cluster.yml could not be reached")
	board.Finished(path, gitops.ReconcileRecord{Revision: revB}, failing)
	board.Started(path, "retry", revB, at)
	readyB := st(revB, "True", gitops.ReasonSucceeded, "the nodes run what cluster.yml of bbbb says")
	board.Finished(path, gitops.ReconcileRecord{Revision: revB}, readyB)
	snapFailed := *readyB
	snapFailed.Snapshots = &gitops.SnapshotStatus{Error: "etcd snapshot on 10.0.0.1: no space left on device"}
	board.Started(path, "drift-check", revB, at)
	board.Finished(path, gitops.ReconcileRecord{Revision: revB}, &snapFailed)

	next := func(ch chan got) (string, map[string]any) {
		t.Helper()
		select {
		case g := <-ch:
			var m map[string]any
			if err := json.Unmarshal([]byte(g.body), &m); err != nil {
				t.Fatalf("body %s: %v", g.body, err)
			}
			return g.path, m
		case <-time.After(10 * time.Second):
			t.Fatal("no request within 10s")
		}
		return "", nil
	}
	for _, want := range []string{"not-ready", "ready", "snapshot-failed"} {
		p, m := next(hook)
		if p != "/hook" || m["kind"] != want || m["cluster"] != "prod" {
			t.Fatalf("webhook got %s %v, want %s", p, m, want)
		}
		if want == "not-ready" && m["revision"] != revB {
			t.Errorf("the failure is reported for revision %v, want the one tried, %s", m["revision"], revB)
		}
	}
	for _, want := range []string{"pending", "failure", "success"} {
		p, m := next(forge)
		if p != "/repos/acme/clusters/statuses/"+revB || m["state"] != want || m["context"] != "rigger/prod" {
			t.Fatalf("forge got %s %v, want %s on %s", p, m, want, revB)
		}
		if want == "failure" && !strings.HasPrefix(m["description"].(string), gitops.ReasonNodesUnreachable) {
			t.Errorf("failure description %v", m["description"])
		}
	}
	// Nothing more was queued: a sentinel queued now comes next on each
	// (the queues are in order).
	board.Started(path, "change", "cccccccccccccccc", at)
	if p, m := next(forge); p != "/repos/acme/clusters/statuses/cccccccccccccccc" || m["state"] != "pending" {
		t.Fatalf("after the three commit statuses, got %s %v: want the sentinel", p, m)
	}
	recovered := *readyB
	recovered.Snapshots = &gitops.SnapshotStatus{Last: &gitops.SnapshotRef{Name: "rigger-20261202"}}
	board.Finished(path, gitops.ReconcileRecord{Revision: revB}, &recovered)
	if _, m := next(hook); m["kind"] != "snapshot-recovered" {
		t.Fatalf("after the three notifications, got %v: want the sentinel", m)
	}
}

// TestServerNotifications follows a real repository whose cluster.yml has
// a mistake: the webhook is told the cluster stalled, naming the file and
// line, and the commit that added the file gets a failed commit status;
// a new commit with another mistake gets its own.
func TestServerNotifications(t *testing.T) {
	type got struct {
		path string
		body map[string]any
	}
	hook, forge := make(chan got, 20), make(chan got, 20)
	serve := func(ch chan got) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var m map[string]any
			if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
				t.Errorf("body: %v", err)
			}
			ch <- got{r.URL.Path, m}
			w.WriteHeader(http.StatusCreated)
		}))
		t.Cleanup(s.Close)
		return s
	}
	hookSrv, forgeSrv := serve(hook), serve(forge)
	target, _ := notify.ParseTarget(hookSrv.URL + "/hook")
	f, err := notify.NewForge(notify.ForgeGitHub, "https://github.com/acme/clusters.git", forgeSrv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	board := gitops.NewBoard(0)
	n := notify.New(notify.Config{Targets: []notify.Target{target}, Forge: f})
	n.Watch(board)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	o := newOrigin(t, freePort(t))
	o.commit(t, "a cluster with a typo", map[string]string{
		"clusters/bad/cluster.yml": "kubernetes_verison: v1.31.4\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n",
	})
	o.push(t)
	first := o.head(t)
	srv, events := serveClustersWith(t, o, gitops.Config{Board: board})
	next := func(ch chan got) got {
		t.Helper()
		select {
		case g := <-ch:
			return g
		case <-time.After(30 * time.Second):
			t.Fatal("no request within 30s")
		}
		return got{}
	}
	h := next(hook)
	msg, _ := h.body["message"].(string)
	if h.body["kind"] != "stalled" || h.body["reason"] != "InvalidSpec" || h.body["revision"] != first ||
		h.body["path"] != "clusters/bad/cluster.yml" || !strings.Contains(msg, "clusters/bad/cluster.yml:1") {
		t.Errorf("webhook got %v: want stalled, InvalidSpec, revision %s, the file and line", h.body, first)
	}
	// cluster.yml names no cluster (it does not parse): the context is its path.
	g := next(forge)
	if g.path != "/repos/acme/clusters/statuses/"+first || g.body["state"] != "failure" || g.body["context"] != "rigger/clusters/bad/cluster.yml" {
		t.Errorf("forge got %s %v: want a failure on %s", g.path, g.body, first)
	}

	waitEvent(t, events, gitops.EventStatusWritten, 30*time.Second)
	o.commit(t, "another typo", map[string]string{
		"clusters/bad/cluster.yml": "kubernetes_version: v1.31.4\nnodez: []\n",
	})
	o.push(t)
	second := o.head(t)
	srv.Trigger()
	g = next(forge)
	if g.path != "/repos/acme/clusters/statuses/"+second || g.body["state"] != "failure" || !strings.Contains(g.body["description"].(string), "InvalidSpec") {
		t.Errorf("forge got %s %v: want a failure on %s", g.path, g.body, second)
	}
}
