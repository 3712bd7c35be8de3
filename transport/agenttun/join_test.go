package agenttun

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rigger/rigger/internal/testwait"
)

// recordRequests puts a recorder in front of ts's handler.
func recordRequests(ts *testServer) *requestRecorder {
	rec := &requestRecorder{next: ts.srv}
	ts.http.Config.Handler = rec
	return rec
}

func TestJoin(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	rec := recordRequests(ts)
	cfg := ts.agentConfig(t, "n1", n)
	ra := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })
	testwait.For(t, 30*time.Second, "tunnel up in the agent's log", func() bool {
		return strings.Contains(ra.logs.String(), "join step 4/4: tunnel up")
	})
	// One line per step of the join, in order.
	logs := ra.logs.String()
	last := -1
	for _, step := range []string{"join step 1/4: flags checked", "join step 2/4: CA fetched and matched",
		"join step 3/4: token accepted", "join step 4/4: tunnel up"} {
		i := strings.Index(logs, step)
		if i < 0 || i < last || strings.Count(logs, step) != 1 {
			t.Errorf("the agent's log does not say %q once, after the previous step:\n%s", step, logs)
		}
		last = i
	}
	if strings.Contains(logs, ts.token) || strings.Contains(ts.logs.String(), ts.token) {
		t.Error("a log holds the token")
	}
	// The token went to the join only.
	rec.mu.Lock()
	for i, a := range rec.auth {
		if a != "" && rec.path[i] != PathJoin {
			t.Errorf("the token was sent to %s", rec.path[i])
		}
	}
	rec.mu.Unlock()

	// At rest: the server keeps the token's hash only, until the join
	// uses it up; the agent its own key; both mode 0600.
	tokenFile := filepath.Join(ts.dir, filepath.FromSlash(tokenKey(ts.token)))
	if _, err := os.Stat(tokenFile); err == nil {
		t.Errorf("%s is still there: a token joins once", tokenFile)
	}
	unused, err := ts.srv.store.IssueToken("c1", "n1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tokenFile = filepath.Join(ts.dir, filepath.FromSlash(tokenKey(unused)))
	filepath.WalkDir(ts.dir, func(p string, d os.DirEntry, err error) error {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), ts.token) || strings.Contains(string(b), unused) {
			t.Errorf("%s holds the token", p)
		}
		return nil
	})
	for _, p := range []string{tokenFile, filepath.Join(ts.dir, filepath.FromSlash(nodeKey("c1", "n1"))), filepath.Join(ts.dir, caKeyFile),
		filepath.Join(cfg.StateDir, agentKeyFile), filepath.Join(cfg.StateDir, agentCertFile)} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", p, err)
		}
	}

	// Later connections use the node's certificate: no token needed.
	ra.stop()
	ts.restart()
	rec = recordRequests(ts)
	again := cfg
	again.Token = ""
	ra2 := runAgent(t, again)
	testwait.For(t, 30*time.Second, "agent connected with its certificate", func() bool { return ts.connected("n1") })
	if !strings.Contains(ra2.logs.String(), "credentials found") {
		t.Errorf("the agent did not say it used its credentials:\n%s", ra2.logs)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, a := range rec.auth {
		if a != "" || rec.path[i] == PathJoin {
			t.Errorf("an agent holding a certificate sent a token or joined (%s)", rec.path[i])
		}
	}
}

func TestWrongChecksumSendsNoToken(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	// A server with another CA where the agent expects the real one: a
	// man in the middle, or the wrong URL.
	impostor := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	rec := recordRequests(impostor)
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Server = impostor.URL
	err := runAgent(t, cfg).wait(t)
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("agent against a server with another CA: %v, want a *ChecksumError", err)
	}
	if !strings.Contains(err.Error(), "the token was not sent") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is not one line saying the token was not sent", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, a := range rec.auth {
		if a != "" || rec.path[i] != PathCACerts {
			t.Errorf("the agent sent %s with Authorization %q; want only the CA fetched, without a token", rec.path[i], a)
		}
	}
	if len(rec.path) == 0 {
		t.Error("the agent did not fetch the CA")
	}
}

func TestBadTokenRefused(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})

	// Tokens are scoped to their cluster.
	otherTok, err := ts.srv.store.IssueToken("c2", "n1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expiring, err := ts.srv.store.IssueToken("c1", "n1", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.now = func() time.Time { return time.Now().Add(2 * time.Minute) }

	for _, tc := range []struct{ name, token string }{
		{"unknown", tokenPrefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{"another cluster's", otherTok},
		{"expired", expiring},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ts.agentConfig(t, "n1", n)
			cfg.Token = tc.token
			err := runAgent(t, cfg).wait(t)
			var re *RefusedError
			if !errors.As(err, &re) || re.Code != codeBadToken {
				t.Fatalf("agent with a bad token: %v, want a *RefusedError %s", err, codeBadToken)
			}
			if !strings.Contains(err.Error(), "join refused by the server: the join token is not valid") ||
				strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line saying the token is refused", err)
			}
		})
	}
	if ts.connected("n1") {
		t.Error("a node joined with a bad token")
	}
}

// dialAs opens a tunnel to the server at url claiming node with the
// credentials of cfg.
func dialAs(t *testing.T, url string, cfg AgentConfig, node string) (*http.Response, error) {
	t.Helper()
	a, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := a.loadCredentials()
	if err != nil || creds == nil {
		t.Fatalf("credentials of %s: %v", cfg.Node, err)
	}
	hc := verifiedClient(creds.roots, &creds.cert)
	defer hc.CloseIdleConnections()
	c, resp, err := websocket.Dial(ctxFor(t), url+PathConnect+"?node="+node, &websocket.DialOptions{HTTPClient: hc})
	if err == nil {
		c.CloseNow()
	}
	return resp, err
}

func TestNodeActsOnlyAsItself(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "a", DockerSocket: n.docker.Socket}, Node{Name: "b", DockerSocket: n.docker.Socket})
	cfgA := ts.agentConfig(t, "a", n)
	runAgent(t, cfgA)
	testwait.For(t, 30*time.Second, "a connected", func() bool { return ts.connected("a") })

	// Node a's certificate used to open node b's tunnel.
	resp, err := dialAs(t, ts.URL, cfgA, "b")
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a's certificate for b's tunnel: %v (%v), want 403", err, resp)
	}
	var re *RefusedError
	if err := refusalOf("connect", resp); !errors.As(err, &re) || re.Code != codeNotYourself ||
		!strings.Contains(err.Error(), "the certificate presented is node a's, not node b's") {
		t.Errorf("refusal: %v, want %s naming both nodes", err, codeNotYourself)
	}
	if ts.connected("b") {
		t.Error("node b is connected through a's certificate")
	}

	// Node a's certificate used for a node of the same name in another
	// cluster served by the same endpoint (same CA).
	other, err := NewServer(Config{Cluster: "c2", Store: ts.srv.store, Nodes: []Node{{Name: "a", DockerSocket: n.docker.Socket}}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hs := httptest.NewUnstartedServer(other)
	hs.TLS = ts.http.TLS
	hs.StartTLS()
	defer hs.Close()
	resp, err = dialAs(t, hs.URL, cfgA, "a")
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(refusalOf("connect", resp).Error(), "the certificate presented is for cluster [c1], not c2") {
		t.Fatalf("c1's certificate for c2's node a: %v (%v), want 403 naming both clusters", err, resp)
	}

	// A node's older certificate stops working when it joins again.
	stale := cfgA
	stale.StateDir = t.TempDir()
	for _, f := range []string{agentCAFile, agentCertFile, agentKeyFile} {
		b, err := os.ReadFile(filepath.Join(cfgA.StateDir, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(stale.StateDir, f), b, 0o600)
	}
	if err := ts.srv.store.setNode("c1", "a", "0", time.Now(), time.Now().Add(time.Hour)); err != nil { // a joined again elsewhere
		t.Fatal(err)
	}
	resp, err = dialAs(t, ts.URL, stale, "a")
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a replaced certificate: %v (%v), want 401", err, resp)
	}
}

func TestPendingUntilDeclared(t *testing.T) {
	n := startNode(t)
	ts := startServer(t)
	ra := runAgent(t, ts.agentConfig(t, "n1", n))
	testwait.For(t, 30*time.Second, "agent listed as pending", func() bool {
		p := ts.srv.Pending()
		return len(p) == 1 && p[0].Node == "n1" && p[0].Hostname == "host-n1"
	})
	if _, err := ts.srv.Dial(ctxFor(t), "n1", "tcp", n.echo); err == nil || !strings.Contains(err.Error(), "not a node of this transport") {
		t.Errorf("Dial to a pending node: %v, want ErrUnknownNode", err)
	}
	select {
	case <-ra.done:
		t.Fatalf("a pending agent exited (%v); want it waiting", ra.err)
	default:
	}
	ts.srv.SetNodes([]Node{{Name: "n1", DockerSocket: n.docker.Socket}})
	testwait.For(t, 30*time.Second, "agent connected once declared", func() bool { return ts.connected("n1") })
	if p := ts.srv.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v after the node was declared", p)
	}
}

func TestSecondHostRefused(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	runAgent(t, ts.agentConfig(t, "n1", n))
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })

	// Another host with the token claims the connected node's name.
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Hostname = "intruder"
	ra := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "second host refused, naming the holder", func() bool {
		return strings.Contains(ra.logs.String(), `node n1 is connected from 127.0.0.1:`) &&
			strings.Contains(ra.logs.String(), `(host \"host-n1\")`)
	})
	if a := ts.srv.Agents(); len(a) != 1 || a[0].Hostname != "host-n1" {
		t.Errorf("Agents = %+v, want n1 still held by host-n1", a)
	}
}

// A node removed from cluster.yml while serve was not running loses its
// certificate when serve starts again.
func TestRemovedWhileStoppedRevoked(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket}, Node{Name: "n2", DockerSocket: n.docker.Socket})
	ra := runAgent(t, ts.agentConfig(t, "n1", n))
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })
	ra.stop()
	declared := ts.nodes
	ts.nodes = nil
	ts.restart() // made before its cluster.yml is read (as serve's are): revokes nothing
	if s, _ := ts.srv.store.nodeSerial("c1", "n1"); s == "" {
		t.Fatal("a server made before its cluster.yml was read revoked n1's certificate")
	}
	ts.srv.SetNodes(declared[1:]) // cluster.yml read: n1 removed
	if s, _ := ts.srv.store.nodeSerial("c1", "n1"); s != "" {
		t.Errorf("n1's certificate (serial %s) is still valid after a restart without it", s)
	}
}

func TestRemovedNodeRevoked(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	ra := runAgent(t, ts.agentConfig(t, "n1", n))
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })

	ts.srv.SetNodes(nil) // n1 removed from cluster.yml
	err := ra.wait(t)
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != codeRevoked {
		t.Fatalf("agent of a removed node: %v, want a *RefusedError %s", err, codeRevoked)
	}
}

// A token issued by another process on the store's directory (`rigger
// agent command` while serve runs) is accepted by the running server.
func TestTokenIssuedBesideTheServer(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	beside, err := OpenStore(ts.dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := beside.IssueToken("c1", "n1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Token = tok
	runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "agent joined with the token issued beside the server", func() bool { return ts.connected("n1") })
}
