package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/internal/testwait"
)

// received is one request a test server got.
type received struct {
	Method, Path, EscapedPath string
	Header                    http.Header
	Body                      []byte
}

// fields is the request's JSON body as a map (the test fails when it is
// not a JSON object).
func (r received) fields(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %s is not a JSON object: %v", r.Body, err)
	}
	return m
}

// server is an httptest server that records every request and answers as
// answer says (200 when nil).
type server struct {
	*httptest.Server
	got chan received
}

func newServer(t *testing.T, answer func(n int, w http.ResponseWriter) bool) *server {
	t.Helper()
	s := &server{got: make(chan received, 100)}
	var mu sync.Mutex
	n := 0
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		s.got <- received{Method: r.Method, Path: r.URL.Path, EscapedPath: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: body}
		if answer != nil && answer(i, w) {
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.Close)
	return s
}

// next is the next request the server gets, within a deadline.
func (s *server) next(t *testing.T) received {
	t.Helper()
	select {
	case r := <-s.got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request within 10s")
	}
	return received{}
}

// none checks that no request came, once every queue is empty (idle).
func (s *server) none(t *testing.T, idle func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the queues to empty", idle)
	select {
	case r := <-s.got:
		t.Fatalf("unexpected request %s %s %s", r.Method, r.Path, r.Body)
	default:
	}
}

// clock is a clock a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// waits records the waits between tries, and returns at once.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

// counts records Observe's calls.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) observe(target, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[target+"/"+result]++
}

func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLog(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// run starts n's senders until the test ends.
func run(t *testing.T, n *Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// idle says whether every queue of n is empty and no request is in flight.
func (n *Notifier) idle() bool {
	outs := []*outbox{n.forge}
	for _, h := range n.hooks {
		outs = append(outs, h.out)
	}
	for _, o := range outs {
		if o != nil && (o.queued() > 0 || o.busy.Load()) {
			return false
		}
	}
	return true
}

// status is a status.yml with Ready (and Stalled when stalled) as given.
func status(cluster, rev, ready, reason, message string, stalled bool) *gitops.StatusFile {
	f := &gitops.StatusFile{Cluster: cluster, ObservedRevision: rev,
		Source: gitops.Source{Repository: "https://git.example/ops/clusters.git", Branch: "main", Path: cluster + "/cluster.yml"}}
	f.Conditions = append(f.Conditions, gitops.Condition{Type: gitops.ConditionReady, Status: ready, Reason: reason, Message: message})
	st := "False"
	if stalled {
		st = "True"
	}
	f.Conditions = append(f.Conditions, gitops.Condition{Type: gitops.ConditionStalled, Status: st, Reason: reason})
	return f
}
