package statuspage_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/statuspage"
)

// fakeBoard is a board whose clusters the test sets: set replaces them
// all (a follower then gets the whole board), put changes one (a follower
// that saw the version before gets only it).
type fakeBoard struct {
	mu       sync.Mutex
	clusters []gitops.BoardCluster
	version  uint64
	put1     *gitops.BoardCluster // what the last change was, when a put
	subs     []chan struct{}
}

func (b *fakeBoard) Since(v uint64) gitops.BoardChanges {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.put1 != nil && v == b.version-1 {
		return gitops.BoardChanges{Version: b.version, Changed: []gitops.BoardCluster{*b.put1}}
	}
	return gitops.BoardChanges{Version: b.version, Full: true, Changed: append([]gitops.BoardCluster{}, b.clusters...)}
}

func (b *fakeBoard) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs = append(b.subs, ch)
	b.mu.Unlock()
	return ch, func() {}
}

func (b *fakeBoard) set(c ...gitops.BoardCluster) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clusters, b.put1 = c, nil
	b.changedLocked()
}

func (b *fakeBoard) put(c gitops.BoardCluster) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.IndexFunc(b.clusters, func(have gitops.BoardCluster) bool { return have.Path == c.Path })
	b.clusters[i], b.put1 = c, &c
	b.changedLocked()
}

func (b *fakeBoard) changedLocked() {
	b.version++
	for _, ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func cluster(path, ready, rev string) gitops.BoardCluster {
	return gitops.BoardCluster{Path: path, Status: &gitops.StatusFile{Cluster: "c", ObservedRevision: rev,
		Conditions: []gitops.Condition{{Type: gitops.ConditionReady, Status: ready}}}}
}

// TestPage: the page, its script and style sheet come from the binary,
// with headers that keep the page to its own origin; unknown paths are 404.
func TestPage(t *testing.T) {
	srv := httptest.NewServer(statuspage.New(&fakeBoard{}, statuspage.Options{}))
	defer srv.Close()
	for path, want := range map[string]string{
		"/":                 "text/html",
		"/static/app.js":    "javascript",
		"/static/style.css": "text/css",
	} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %s, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		// Offline: nothing from another origin.
		if s := string(body); strings.Contains(s, "http://") || strings.Contains(s, "https://") || strings.Contains(s, "//cdn") {
			t.Errorf("%s refers to another origin", path)
		}
		if path == "/static/app.js" && strings.Contains(string(body), "innerHTML") {
			t.Error("app.js uses innerHTML: data must go in as text")
		}
	}
	for _, path := range []string{"/nope", "/events/x", "/static/none.js"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// readEvent reads the next "board" event of an /events stream.
func readEvent(t *testing.T, r *bufio.Reader) statuspage.Snapshot {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read /events: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "board":
			var s statuspage.Snapshot
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s); err != nil {
				t.Fatalf("event data: %v: %s", err, line)
			}
			return s
		}
	}
}

// TestEvents: /events sends the board at once and after each change, and
// keeps an idle stream alive with comments.
func TestEvents(t *testing.T) {
	b := &fakeBoard{}
	b.set(cluster("a/cluster.yml", "True", "rev1"))
	srv := httptest.NewServer(statuspage.New(b, statuspage.Options{KeepAlive: 50 * time.Millisecond, MinInterval: 200 * time.Millisecond}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	s := readEvent(t, r)
	if len(s.Clusters) != 1 || s.Clusters[0].Status.ObservedRevision != "rev1" {
		t.Fatalf("first event: %+v", s)
	}
	// Idle: a keep-alive comment comes.
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ": keep-alive") {
			break
		}
	}
	b.set(cluster("a/cluster.yml", "False", "rev2"), cluster("b/cluster.yml", "True", "rev2"))
	s = readEvent(t, r)
	if len(s.Clusters) != 2 || s.Clusters[0].Status.ObservedRevision != "rev2" || s.Clusters[0].Status.Conditions[0].Status != "False" {
		t.Fatalf("event after the change: %+v", s)
	}
	// Changes in quick succession: one event, with the last of them, at
	// least MinInterval after the one before.
	sent := time.Now()
	for _, rev := range []string{"rev3", "rev4", "rev5"} {
		b.set(cluster("a/cluster.yml", "True", rev))
	}
	s = readEvent(t, r)
	if took := time.Since(sent); took < 150*time.Millisecond {
		t.Errorf("an event %s after the one before, want at least MinInterval (200ms)", took)
	}
	if got := s.Clusters[0].Status.ObservedRevision; got != "rev5" {
		t.Errorf("the event after three quick changes shows %s, want rev5 (the last)", got)
	}
	if !s.Full {
		t.Errorf("the board was replaced, the event is not Full: %+v", s)
	}
	// One cluster changed: the event has only it.
	b.put(cluster("a/cluster.yml", "False", "rev6"))
	s = readEvent(t, r)
	if s.Full || len(s.Clusters) != 1 || s.Clusters[0].Path != "a/cluster.yml" || s.Clusters[0].Status.ObservedRevision != "rev6" {
		t.Errorf("the event after one cluster changed: %+v", s)
	}
}

// TestEventsLimit: one stream more than MaxStreams is refused with 503.
func TestEventsLimit(t *testing.T) {
	srv := httptest.NewServer(statuspage.New(&fakeBoard{}, statuspage.Options{MaxStreams: 1}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	first, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	readEvent(t, bufio.NewReader(first.Body)) // the stream is open
	second, err := srv.Client().Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	second.Body.Close()
	if second.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second stream: %d, want 503", second.StatusCode)
	}
}

// TestAPIClusters: /api/clusters is the board as JSON, [] when empty.
func TestAPIClusters(t *testing.T) {
	b := &fakeBoard{}
	h := statuspage.New(b, statuspage.Options{Now: func() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/clusters", nil))
	if got := strings.TrimSpace(rec.Body.String()); got != `{"now":"2026-12-02T00:00:00Z","full":true,"clusters":[]}` {
		t.Errorf("empty board: %s", got)
	}
	// A cluster another replica holds says so, and which.
	b.set(gitops.BoardCluster{Path: "far/cluster.yml", Elsewhere: true, HeldBy: "serve-b"})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/clusters", nil))
	if got, want := strings.TrimSpace(rec.Body.String()), `{"now":"2026-12-02T00:00:00Z","full":true,"clusters":[{"path":"far/cluster.yml","elsewhere":true,"heldBy":"serve-b"}]}`; got != want {
		t.Errorf("a cluster held elsewhere:\n got %s\nwant %s", got, want)
	}
}

// TestEventsOutliveServerTimeouts: a stream lasts longer than the
// server's ReadTimeout and WriteTimeout (serve's are 30s and 60s).
func TestEventsOutliveServerTimeouts(t *testing.T) {
	b := &fakeBoard{}
	b.set(cluster("a/cluster.yml", "True", "rev1"))
	srv := httptest.NewUnstartedServer(statuspage.New(b, statuspage.Options{MinInterval: time.Millisecond}))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	// Past both timeouts, a change still comes.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		b.set(cluster("a/cluster.yml", "True", "rev1")) // a change a stream must answer: wakes it
		readEvent(t, r)
	}
	b.set(cluster("a/cluster.yml", "False", "rev2"))
	for {
		if s := readEvent(t, r); s.Clusters[0].Status.ObservedRevision == "rev2" {
			break
		}
	}
}
