package agenttun

import (
	"bytes"
	"context"

	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/transport/internal/testnode"
)

// node is what the tests' agents reach: a Docker engine API and an echo
// server.
type node struct {
	docker *testnode.Docker
	echo   string
}

func startNode(t testing.TB) node {
	return node{docker: testnode.StartDocker(t, "1.43"), echo: testnode.StartEcho(t)}
}

func port(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testServer is a tunnel server on loopback, restartable on its address
// with the same state.
type testServer struct {
	t     testing.TB
	dir   string
	nodes []Node
	srv   *Server
	http  *httptest.Server
	addr  string
	URL   string
	token string // the last token agentConfig issued
	logs  *syncBuffer
	// peers, when set, are the server's peers (Config.Peers).
	peers func() []Peer
}

// startServer starts a server with a store in a temporary directory that
// admits nodes, and issues a token.
func startServer(t testing.TB, nodes ...Node) *testServer {
	t.Helper()
	ts := &testServer{t: t, dir: t.TempDir(), nodes: nodes, logs: &syncBuffer{}}
	ts.start("127.0.0.1:0")
	return ts
}

func (ts *testServer) start(addr string) {
	t := ts.t
	t.Helper()
	store, err := OpenStore(ts.dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := store.CA().TLSConfig([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var peerClient *PeerClient
	if ts.peers != nil {
		peerClient = NewPeerClient(store, "replica-"+strconv.Itoa(len(ts.dir)))
	}
	srv, err := NewServer(Config{
		Cluster: "c1", Store: store, Nodes: ts.nodes, Peers: ts.peers, PeerClient: peerClient,
		KeepaliveInterval: time.Second, ConnectWait: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(ts.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config = NewHTTPServer(srv, nil) // serve's deadlines; StartTLS sets its TLS
	hs.Listener.Close()
	hs.Listener = ln
	hs.TLS = tlsConfig
	hs.StartTLS()
	ts.srv, ts.http, ts.addr, ts.URL = srv, hs, ln.Addr().String(), hs.URL
	t.Cleanup(ts.stop)
}

// stop stops the server as a process exit would: listener, connections
// and tunnels closed.
func (ts *testServer) stop() {
	ts.srv.Close()
	ts.http.CloseClientConnections()
	ts.http.Close()
}

// restart stops the server and starts a new one on the same address with
// the same state.
func (ts *testServer) restart() {
	ts.stop()
	ts.start(ts.addr)
}

// agentConfig is an agent of n joining ts as name, with a token issued
// for name.
func (ts *testServer) agentConfig(t testing.TB, name string, n node) AgentConfig {
	tok, err := ts.srv.store.IssueToken("c1", name, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts.token = tok
	return AgentConfig{
		Server: ts.URL, Token: ts.token, CAChecksum: ts.srv.store.CA().Checksum(), Node: name,
		DockerSocket: n.docker.Socket, AllowPorts: []int{port(t, n.echo)}, StateDir: t.TempDir(),
		KeepaliveInterval: time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Hostname: "host-" + name,
	}
}

// runningAgent is an agent running in the test.
type runningAgent struct {
	done   chan struct{}
	err    error // set once done is closed
	logs   *syncBuffer
	cancel context.CancelFunc
}

// stop stops the agent and waits for it to end.
func (ra *runningAgent) stop() {
	ra.cancel()
	<-ra.done
}

// runAgent runs an agent until the test ends.
func runAgent(t testing.TB, cfg AgentConfig) *runningAgent {
	t.Helper()
	ra := &runningAgent{done: make(chan struct{}), logs: &syncBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(ra.logs, nil))
	a, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra.cancel = cancel
	go func() {
		defer close(ra.done)
		ra.err = a.Run(ctx)
	}()
	t.Cleanup(ra.stop)
	return ra
}

// wait returns the agent's error once it exits by itself.
func (ra *runningAgent) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-ra.done:
		return ra.err
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not exit; its log:\n%s", ra.logs)
		return nil
	}
}

func (ts *testServer) connected(name string) bool {
	for _, a := range ts.srv.Agents() {
		if a.Node == name {
			return a.Connected
		}
	}
	return false
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

// requestRecorder counts what reaches a handler, to tell whether a token
// was sent.
type requestRecorder struct {
	next http.Handler
	mu   sync.Mutex
	auth []string // Authorization headers seen
	path []string
}

func (r *requestRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	r.path = append(r.path, req.URL.Path)
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}
