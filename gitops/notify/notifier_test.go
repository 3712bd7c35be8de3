package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/internal/testwait"
)

const sha1 = "0123456789abcdef0123456789abcdef01234567"

// TestCommitStatusRequests checks each forge's request against its API's
// documentation: GitHub's "Create a commit status", Gitea's (and
// Forgejo's) CreateStatusOption, GitLab's "Set the pipeline status of a
// commit".
func TestCommitStatusRequests(t *testing.T) {
	for _, tc := range []struct {
		kind, repo   string
		path         string // escaped
		authHeader   string
		auth         string
		contextField string
		states       []string // what the forge accepts
		wantStates   []string // pending, then the end's
		extra        map[string]string
	}{
		{ForgeGitHub, "https://github.com/acme/clusters.git", "/repos/acme/clusters/statuses/" + sha1, "Authorization", "Bearer tok123", "context",
			[]string{"error", "failure", "pending", "success"}, []string{"pending", "success", "failure"},
			map[string]string{"Accept": "application/vnd.github+json", "X-Github-Api-Version": "2022-11-28"}},
		{ForgeGitea, "git@gitea.example.com:ops/clusters.git", "/repos/ops/clusters/statuses/" + sha1, "Authorization", "token tok123", "context",
			[]string{"pending", "success", "error", "failure", "warning"}, []string{"pending", "success", "failure"}, nil},
		{ForgeGitLab, "https://gitlab.example.com/infra/k8s/clusters.git", "/projects/infra%2Fk8s%2Fclusters/statuses/" + sha1, "Private-Token", "tok123", "name",
			[]string{"pending", "running", "success", "failed", "canceled"}, []string{"pending", "success", "failed"}, nil},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			srv := newServer(t, nil)
			f, err := NewForge(tc.kind, tc.repo, srv.URL+"/api", "tok123")
			if err != nil {
				t.Fatal(err)
			}
			n := New(Config{Forge: f, Wait: (&waits{}).wait})
			run(t, n)
			before := status("prod", "old", "True", "ReconciliationSucceeded", "fine", false)
			n.Started(gitops.StartUpdate{Path: "prod/cluster.yml", Status: before,
				Running: gitops.RunningReconcile{Trigger: "change", Revision: sha1}})
			ok := status("prod", sha1, "True", "ReconciliationSucceeded", "the nodes run what cluster.yml of 0123456789ab says", false)
			n.Updated(gitops.StatusUpdate{Path: "prod/cluster.yml", Revision: sha1, Prev: before, Next: ok})
			bad := status("prod", sha1, "False", "NodesUnreachable", strings.Repeat("node 10.0.0.1 did not answer; ", 20), false)
			n.Updated(gitops.StatusUpdate{Path: "prod/cluster.yml", Revision: sha1, Prev: ok, Next: bad})
			for i, want := range tc.wantStates {
				r := srv.next(t)
				if r.Method != http.MethodPost || r.EscapedPath != "/api"+tc.path {
					t.Fatalf("request %d: %s %s, want POST /api%s", i, r.Method, r.EscapedPath, tc.path)
				}
				if got := r.Header.Get(tc.authHeader); got != tc.auth {
					t.Errorf("%s: %q, want %q", tc.authHeader, got, tc.auth)
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				for k, v := range tc.extra {
					if r.Header.Get(k) != v {
						t.Errorf("%s: %q, want %q", k, r.Header.Get(k), v)
					}
				}
				body := r.fields(t)
				state, _ := body["state"].(string)
				if state != want || !slices.Contains(tc.states, state) {
					t.Errorf("request %d: state %q, want %q (one of %v)", i, state, want, tc.states)
				}
				if body[tc.contextField] != "rigger/prod" {
					t.Errorf("request %d: %s = %v, want rigger/prod", i, tc.contextField, body[tc.contextField])
				}
				desc, _ := body["description"].(string)
				if desc == "" || len([]rune(desc)) > 140 {
					t.Errorf("request %d: description %q (empty, or over GitHub's 140 characters)", i, desc)
				}
				if i == 1 && !strings.HasPrefix(desc, "ReconciliationSucceeded: ") || i == 2 && !strings.HasPrefix(desc, "NodesUnreachable: node 10.0.0.1") {
					t.Errorf("request %d: description %q is not Ready's reason and message", i, desc)
				}
				for k := range body {
					if !slices.Contains([]string{"state", "description", tc.contextField}, k) {
						t.Errorf("request %d: field %q is not the API's", i, k)
					}
				}
			}
			// A drift check of the same revision, with the same result:
			// nothing new to say.
			n.Started(gitops.StartUpdate{Path: "prod/cluster.yml", Status: bad, Running: gitops.RunningReconcile{Trigger: "drift-check", Revision: sha1}})
			n.Updated(gitops.StatusUpdate{Path: "prod/cluster.yml", Revision: sha1, Prev: bad, Next: bad})
			srv.none(t, n.idle)
		})
	}
}

// TestCommitStatusNewRevisionFails: a new revision that fails is marked
// on its own commit (not on the one last applied, which status.yml's
// ObservedRevision still names), and its retries add nothing.
func TestCommitStatusNewRevisionFails(t *testing.T) {
	srv := newServer(t, nil)
	f, _ := NewForge(ForgeGitea, "https://gitea.example.com/ops/clusters.git", srv.URL, "tok")
	n := New(Config{Forge: f})
	run(t, n)
	applied := status("prod", "aaaa", "True", "ReconciliationSucceeded", "fine", false)
	n.Updated(gitops.StatusUpdate{Path: "p", Revision: "aaaa", Prev: applied, Next: applied}) // a serve that starts: already set
	n.Started(gitops.StartUpdate{Path: "p", Status: applied, Running: gitops.RunningReconcile{Trigger: "change", Revision: "bbbb"}})
	failed := status("prod", "aaaa", "False", "ApplyFailed", "kubelet did not start", false)
	n.Updated(gitops.StatusUpdate{Path: "p", Revision: "bbbb", Prev: applied, Next: failed})
	n.Started(gitops.StartUpdate{Path: "p", Status: failed, Running: gitops.RunningReconcile{Trigger: "retry", Revision: "bbbb"}})
	n.Updated(gitops.StatusUpdate{Path: "p", Revision: "bbbb", Prev: failed, Next: failed})
	for _, want := range []string{"pending", "failure"} {
		r := srv.next(t)
		if !strings.HasSuffix(r.Path, "/statuses/bbbb") || r.fields(t)["state"] != want {
			t.Fatalf("got %s %s, want %s on bbbb", r.Path, r.Body, want)
		}
	}
	srv.none(t, n.idle)
}

func TestWebhookPayloads(t *testing.T) {
	generic, slack := newServer(t, nil), newServer(t, nil)
	var targets []Target
	for _, s := range []string{"json=" + generic.URL + "/hook/secret", "slack=" + slack.URL + "/services/T/B/secret"} {
		tg, err := ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tg)
	}
	clk := &clock{now: time.Date(2026, 12, 2, 16, 30, 0, 0, time.UTC)}
	n := New(Config{Targets: targets, Now: clk.Now})
	run(t, n)
	prev := status("prod", "r1", "True", "ReconciliationSucceeded", "fine", false)
	next := status("prod", "r1", "False", "NodesUnreachable", "node <!channel> & co did not answer", false)
	n.Updated(gitops.StatusUpdate{Path: "prod/cluster.yml", Revision: "r2", Prev: prev, Next: next})

	g := generic.next(t)
	if g.Method != http.MethodPost || g.Path != "/hook/secret" || g.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("generic: %s %s %v", g.Method, g.Path, g.Header)
	}
	want := map[string]any{"apiVersion": "rigger.io/notification/v1", "cluster": "prod", "path": "prod/cluster.yml",
		"repository": "https://git.example/ops/clusters.git", "branch": "main", "revision": "r2", "kind": "not-ready",
		"severity": "error", "reason": "NodesUnreachable", "message": "node <!channel> & co did not answer", "time": "2026-12-02T16:30:00Z"}
	if d := cmp.Diff(want, g.fields(t)); d != "" {
		t.Errorf("generic payload (-want +got):\n%s", d)
	}

	s := slack.next(t)
	if s.Method != http.MethodPost || s.Path != "/services/T/B/secret" {
		t.Fatalf("slack: %s %s", s.Method, s.Path)
	}
	var p slackPayload
	if err := json.Unmarshal(s.Body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Text != "cluster prod is not Ready (NodesUnreachable): node &lt;!channel&gt; &amp; co did not answer" {
		t.Errorf("slack text %q", p.Text)
	}
	if len(p.Blocks) != 2 || p.Blocks[0].Type != "section" || p.Blocks[0].Text == nil || p.Blocks[0].Text.Type != "mrkdwn" ||
		p.Blocks[1].Type != "context" || len(p.Blocks[1].Elements) != 1 {
		t.Fatalf("slack blocks %s", s.Body)
	}
	sec := p.Blocks[0].Text.Text
	if !strings.Contains(sec, "&lt;!channel&gt; &amp; co") || strings.Contains(sec, "<!channel>") {
		t.Errorf("slack section not escaped: %q", sec)
	}
	if !strings.Contains(p.Blocks[1].Elements[0].Text, "revision `r2`") {
		t.Errorf("slack context %q", p.Blocks[1].Elements[0].Text)
	}
}

// TestDedup: the same event is sent once within DedupWindow, and again
// after it; another event is sent at once.
func TestDedup(t *testing.T) {
	srv := newServer(t, nil)
	tg, _ := ParseTarget(srv.URL)
	clk := &clock{now: time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)}
	n := New(Config{Targets: []Target{tg}, Now: clk.Now})
	run(t, n)
	ready := status("prod", "r1", "True", "ReconciliationSucceeded", "fine", false)
	failing := status("prod", "r1", "False", "NodesUnreachable", "10.0.0.1", false)
	flap := func() {
		n.Updated(gitops.StatusUpdate{Path: "p", Prev: ready, Next: failing})
		n.Updated(gitops.StatusUpdate{Path: "p", Prev: failing, Next: ready})
	}
	kinds := func(k int) []string {
		var out []string
		for range k {
			out = append(out, srv.next(t).fields(t)["kind"].(string))
		}
		return out
	}
	flap()
	if got := kinds(2); !slices.Equal(got, []string{"not-ready", "ready"}) {
		t.Fatalf("first flap sent %v", got)
	}
	clk.add(DedupWindow - time.Second)
	flap()
	srv.none(t, n.idle)
	// Another message is another event.
	other := status("prod", "r1", "False", "NodesUnreachable", "10.0.0.2", false)
	n.Updated(gitops.StatusUpdate{Path: "p", Prev: ready, Next: other})
	if got := kinds(1); got[0] != "not-ready" {
		t.Fatalf("another event sent %v", got)
	}
	clk.add(time.Second)
	flap()
	if got := kinds(2); !slices.Equal(got, []string{"not-ready", "ready"}) {
		t.Fatalf("after the window, sent %v", got)
	}
}

// TestRetries: 5xx and network errors are retried with backoff, 429 after
// its Retry-After, 4xx not at all, and a request is given up after
// MaxTries; errors and logs never show the URL's secret path.
func TestRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    func(n int, w http.ResponseWriter) bool
		tries     int
		waits     []time.Duration
		result    string
		logSubstr string
	}{
		{"fails twice then succeeds", func(n int, w http.ResponseWriter) bool {
			if n <= 2 {
				w.WriteHeader(http.StatusBadGateway)
				return true
			}
			return false
		}, 3, []time.Duration{RetryMin, 2 * RetryMin}, "sent", ""},
		{"429 with Retry-After", func(n int, w http.ResponseWriter) bool {
			if n == 1 {
				w.Header().Set("Retry-After", "37")
				w.WriteHeader(http.StatusTooManyRequests)
				return true
			}
			return false
		}, 2, []time.Duration{37 * time.Second}, "sent", ""},
		{"503 with a short Retry-After waits the backoff", func(n int, w http.ResponseWriter) bool {
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
			return false
		}, 2, []time.Duration{RetryMin}, "sent", ""},
		{"400 is not retried", func(n int, w http.ResponseWriter) bool {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return true
		}, 1, nil, "failed", "400 Bad Request: invalid_payload"},
		{"always 500: gives up", func(n int, w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusInternalServerError)
			return true
		}, MaxTries, []time.Duration{RetryMin, 2 * RetryMin, 4 * RetryMin, 8 * RetryMin}, "failed", "gave up after 5 tries"},
		{"Retry-After past the budget: gives up", func(n int, w http.ResponseWriter) bool {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}, 1, nil, "failed", "gave up after 1 tries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.answer)
			tg, _ := ParseTarget("slack=" + srv.URL + "/services/secret-path")
			w, c, logs := &waits{}, &counts{}, &syncBuffer{}
			n := New(Config{Targets: []Target{tg}, Wait: w.wait, Observe: c.observe, Log: testLog(logs)})
			run(t, n)
			n.Updated(gitops.StatusUpdate{Path: "p", Next: status("prod", "r", "False", "X", "y", false)})
			for range tc.tries {
				srv.next(t)
			}
			srv.none(t, n.idle)
			if d := cmp.Diff(tc.waits, w.all()); d != "" {
				t.Errorf("waits (-want +got):\n%s", d)
			}
			if c.get("slack/"+tc.result) != 1 {
				t.Errorf("counts %v, want one slack/%s", c.m, tc.result)
			}
			if !strings.Contains(logs.String(), tc.logSubstr) || strings.Contains(logs.String(), "secret-path") {
				t.Errorf("logs lack %q or show the URL:\n%s", tc.logSubstr, logs)
			}
		})
	}
}

// TestNetworkErrorHidesURL: a request that cannot connect is retried, and
// its error names no URL.
func TestNetworkErrorHidesURL(t *testing.T) {
	srv := newServer(t, nil)
	url := srv.URL + "/services/secret-path"
	srv.Close() // nothing listens there any more
	tg, _ := ParseTarget(url)
	w, c, logs := &waits{}, &counts{}, &syncBuffer{}
	n := New(Config{Targets: []Target{tg}, Wait: w.wait, Observe: c.observe, Log: testLog(logs)})
	run(t, n)
	n.Updated(gitops.StatusUpdate{Path: "p", Next: status("prod", "r", "False", "X", "y", false)})
	testwait.For(t, 10*time.Second, "the request given up", func() bool { return c.get("json/failed") > 0 })
	if len(w.all()) != MaxTries-1 {
		t.Errorf("waited %v, want %d retries", w.all(), MaxTries-1)
	}
	if strings.Contains(logs.String(), "secret-path") || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("logs show the URL or lack the cause:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "host="+tg.Host) {
		t.Errorf("logs do not name the host:\n%s", logs)
	}
}

// TestQueueOverflow: a destination that cannot keep up loses its oldest
// notifications, with a log line and a count, and the reconcile that
// queues never waits.
func TestQueueOverflow(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(n int, w http.ResponseWriter) bool {
		if n == 1 {
			<-release // the first request hangs until the test lets it go
		}
		return false
	})
	tg, _ := ParseTarget(srv.URL)
	c, logs := &counts{}, &syncBuffer{}
	n := New(Config{Targets: []Target{tg}, Observe: c.observe, Log: testLog(logs), Queue: 2})
	run(t, n)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // also when the test fails before it lets the request go
	send := func(i int) {
		n.Updated(gitops.StatusUpdate{Path: fmt.Sprintf("c%d", i), Next: status(fmt.Sprintf("c%d", i), "r", "False", "X", "y", false)})
	}
	send(0)
	if got := srv.next(t).fields(t)["cluster"]; got != "c0" { // in flight, hanging
		t.Fatalf("first request for %v", got)
	}
	for i := 1; i <= 4; i++ { // c1 and c2 are dropped: the queue holds 2
		send(i)
	}
	if c.get("json/dropped") != 2 || !strings.Contains(logs.String(), "notification queue full") {
		t.Fatalf("dropped %d; logs:\n%s", c.get("json/dropped"), logs)
	}
	free()
	for _, want := range []string{"c3", "c4"} {
		if got := srv.next(t).fields(t)["cluster"]; got != want {
			t.Fatalf("sent %v, want %s", got, want)
		}
	}
	srv.none(t, n.idle)
	if c.get("json/sent") != 3 {
		t.Errorf("sent %d, want 3", c.get("json/sent"))
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"": 0, "120": 2 * time.Minute, "0": 0, "-3": 0, "soon": 0, "9227000000": 24 * time.Hour,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := retryAfter(h, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}

// TestStopLeavesQueue: requests still queued when serve stops are logged,
// not tried (nor counted as failed).
func TestStopLeavesQueue(t *testing.T) {
	srv := newServer(t, nil)
	tg, _ := ParseTarget(srv.URL + "/secret-path")
	c, logs := &counts{}, &syncBuffer{}
	n := New(Config{Targets: []Target{tg}, Observe: c.observe, Log: testLog(logs)})
	for i := range 3 {
		n.Updated(gitops.StatusUpdate{Path: fmt.Sprintf("c%d", i), Next: status(fmt.Sprintf("c%d", i), "r", "False", "X", "y", false)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.Run(ctx) // returns at once: ctx has ended
	if !strings.Contains(logs.String(), "queued notifications are not sent") || !strings.Contains(logs.String(), "queued=3") {
		t.Errorf("logs:\n%s", logs)
	}
	if len(c.m) != 0 {
		t.Errorf("counted %v", c.m)
	}
	select {
	case r := <-srv.got:
		t.Errorf("sent %s after serve stopped", r.Body)
	default:
	}
}

// TestCommitStatusSameState: a failure for another message only is not
// set again, one for another reason is, but not on GitLab, which refuses a
// status in the state the commit's is in already.
func TestCommitStatusSameState(t *testing.T) {
	for kind, want := range map[string][]string{ForgeGitLab: {"failed", "success"}, ForgeGitHub: {"failure", "failure", "success"}} {
		t.Run(kind, func(t *testing.T) {
			srv := newServer(t, nil)
			f, _ := NewForge(kind, "https://forge.example.com/ops/clusters.git", srv.URL, "tok")
			n := New(Config{Forge: f})
			run(t, n)
			a := status("prod", sha1, "False", "NodesUnreachable", "10.0.0.1", false)
			a2 := status("prod", sha1, "False", "NodesUnreachable", "10.0.0.2", false)
			b := status("prod", sha1, "False", "ApplyFailed", "kubelet did not start", false)
			ok := status("prod", sha1, "True", "ReconciliationSucceeded", "fine", false)
			n.Updated(gitops.StatusUpdate{Path: "p", Revision: sha1, Next: a})
			n.Updated(gitops.StatusUpdate{Path: "p", Revision: sha1, Prev: a, Next: a2})
			n.Updated(gitops.StatusUpdate{Path: "p", Revision: sha1, Prev: a2, Next: b})
			n.Updated(gitops.StatusUpdate{Path: "p", Revision: sha1, Prev: b, Next: ok})
			for _, w := range want {
				if got := srv.next(t).fields(t)["state"]; got != w {
					t.Fatalf("state %v, want %s (all: %v)", got, w, want)
				}
			}
			srv.none(t, n.idle)
		})
	}
}
