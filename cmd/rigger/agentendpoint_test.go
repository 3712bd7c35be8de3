package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/agenttun"
)

const agentClusterYML = `cluster_name: edge
nodes:
  - address: 192.0.2.10
    role: [etcd, controlplane, worker]
    transport: agent
  - address: 192.0.2.20
    internal_address: 10.0.0.20
    role: [worker]
    transport: agent
`

// startEndpoint serves an agent endpoint on loopback with its store under
// stateDir, as rigger serve --agent-listen does, until the test ends.
func startEndpoint(t *testing.T, stateDir string, log io.Writer) (*agentEndpoint, string) {
	t.Helper()
	e, url, stop := listenEndpoint(t, stateDir, "127.0.0.1:0", log)
	t.Cleanup(stop)
	return e, url
}

// listenEndpoint serves an agent endpoint on listen (host:port) with its
// store under stateDir, as rigger serve --agent-listen does with
// --agent-host the host, until stop (which closes its tunnels, as serve's
// end does).
func listenEndpoint(t *testing.T, stateDir, listen string, log io.Writer) (e *agentEndpoint, url string, stop func()) {
	t.Helper()
	store, err := agenttun.OpenStore(agentStoreDir(stateDir), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return listenEndpointOn(t, store, listen, log)
}

// listenEndpointOn is listenEndpoint with store.
func listenEndpointOn(t *testing.T, store *agenttun.Store, listen string, log io.Writer) (e *agentEndpoint, url string, stop func()) {
	t.Helper()
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := store.CA().TLSConfig([]string{host}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	url = "https://" + ln.Addr().String()
	e = newAgentEndpoint(store, url, nil, slog.New(slog.NewTextHandler(log, nil)))
	hs := &http.Server{Handler: e, TLSConfig: tlsConfig}
	go hs.ServeTLS(ln, "", "")
	return e, url, sync.OnceFunc(func() {
		e.Close()
		hs.Close()
	})
}

// TestAgentEndpoint follows a node from cluster.yml to a tunnel up: serve's
// endpoint admits the cluster's agent node when the cluster is opened,
// `rigger agent command` prints the docker run line with a token, and an
// agent started with that line's flags joins through the endpoint.
func TestAgentEndpoint(t *testing.T) {
	file := writeCluster(t, agentClusterYML)
	stateDir := t.TempDir()
	logs := &syncBuffer{}
	e, url := startEndpoint(t, stateDir, logs)

	c, _, err := spec.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.open(c, reconcile.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(logs.String(), "agent node not connected") || !strings.Contains(logs.String(), "-e RIGGER_TOKEN ") {
		t.Errorf("serve did not log the docker run line of the agent node (without a token):\n%s", logs)
	}

	out, stderr, code := run(t, "agent", "command", "-f", file, "--node", "192.0.2.20", "--server", url, "--state-dir", stateDir)
	if code != 0 {
		t.Fatalf("agent command: exit %d: %s", code, stderr)
	}
	re := regexp.MustCompile(`^docker run -d --restart=unless-stopped --net=host --name rigger-agent ` +
		`-v /var/run/docker.sock:/var/run/docker.sock -v /etc/kubernetes:/etc/kubernetes -e RIGGER_TOKEN=(rgt_\S+) ` +
		`rigger/rigger:dev agent --server (\S+) --ca-checksum ([0-9a-f]{64}) --address 192.0.2.20 --internal-address 10.0.0.20\n$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("agent command printed\n%s\nwant a line matching %s", out, re)
	}
	tok, server, sum := m[1], m[2], m[3]
	if server != url+"/agent/edge" {
		t.Errorf("--server %s, want %s/agent/edge", server, url)
	}

	a, err := agenttun.NewAgent(agenttun.AgentConfig{Server: server, Token: tok, CAChecksum: sum, Node: "192.0.2.20",
		DockerSocket: "/var/run/docker.sock", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer agents.Wait()
	defer cancel()
	agents.Go(func() { a.Run(ctx) })
	if !testwait.Until(30*time.Second, 10*time.Millisecond, func() bool { return e.servers["edge"].Agents()[1].Connected }) {
		t.Fatal("the agent did not connect through serve's endpoint")
	}

	tunnels := e.tunnels("edge")
	if len(tunnels) != 2 || tunnels[0].Connected || !tunnels[1].Connected || tunnels[1].Node != "192.0.2.20" || tunnels[1].LastSeen == nil {
		t.Errorf("tunnels for status.yml: %+v, want 192.0.2.20 connected and seen, 192.0.2.10 not", tunnels)
	}

	// An agent of a node cluster.yml does not declare (no longer: its
	// token was issued while it was) is pending, and listed for
	// status.yml.
	tok30, err := e.store.IssueToken("edge", "192.0.2.30", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := agenttun.NewAgent(agenttun.AgentConfig{Server: server, Token: tok30, CAChecksum: sum, Node: "192.0.2.30",
		DockerSocket: "/var/run/docker.sock", Hostname: "edge-30"})
	if err != nil {
		t.Fatal(err)
	}
	agents.Go(func() { b.Run(ctx) })
	if !testwait.Until(30*time.Second, 10*time.Millisecond, func() bool { return slices.Equal(e.pending("edge"), []string{"192.0.2.30 (host edge-30)"}) }) {
		t.Fatalf("pending agents %v, want the undeclared node's", e.pending("edge"))
	}

	// A cluster serve has not reconciled has no endpoint.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url + "/agent/other/cacerts")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `no cluster "other"`) {
		t.Errorf("GET /agent/other/cacerts: %s %s, want 404 naming the cluster", resp.Status, body)
	}
}

func TestAgentCommandRefusesNonAgentNodes(t *testing.T) {
	file := writeCluster(t, strings.Replace(agentClusterYML, "    transport: agent\n", "    user: ubuntu\n", 1))
	for _, tc := range []struct{ node, want string }{
		{"192.0.2.10", "node 192.0.2.10 is declared with transport: ssh in " + file + ": set transport: agent for it first"},
		{"192.0.2.99", "node 192.0.2.99 is not in " + file},
	} {
		_, stderr, code := run(t, "agent", "command", "-f", file, "--node", tc.node, "--server", "https://x:9443", "--state-dir", t.TempDir())
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("agent command --node %s: exit %d, %q; want 1 and %q", tc.node, code, stderr, tc.want)
		}
	}
}

func TestServeAgentFlags(t *testing.T) {
	_, stderr, code := run(t, "serve", "--repo", "file:///nonexistent", "--state-dir", t.TempDir(), "--agent-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "--agent-listen needs --agent-host") {
		t.Errorf("serve --agent-listen without --agent-host: exit %d, %q", code, stderr)
	}
}

// A node removed from cluster.yml stays admitted while the last apply's
// nodes still hold it (the apply that cleans it reaches it through its
// tunnel), and is revoked once they do not.
func TestAgentEndpointRemovedNode(t *testing.T) {
	e, _ := startEndpoint(t, t.TempDir(), &syncBuffer{})
	full, _, err := spec.Load(writeCluster(t, agentClusterYML))
	if err != nil {
		t.Fatal(err)
	}
	without := *full
	without.Nodes = full.Nodes[:1] // 192.0.2.20 removed

	admitted := func(stateDir string) []string {
		t.Helper()
		s, err := e.open(&without, reconcile.Options{StateDir: stateDir})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		var out []string
		for _, a := range e.servers["edge"].Agents() {
			out = append(out, a.Node)
		}
		return out
	}
	applied := t.TempDir() // the last apply had both nodes
	b, err := json.Marshal(full.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(applied, "nodes.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := admitted(applied); !slices.Equal(got, []string{"192.0.2.10", "192.0.2.20"}) {
		t.Errorf("admitted %v before the removal was applied, want both nodes", got)
	}
	if got := admitted(t.TempDir()); !slices.Equal(got, []string{"192.0.2.10"}) {
		t.Errorf("admitted %v after the removal was applied, want 192.0.2.10 alone", got)
	}
}

// TestAgentRunLineQuoted: the docker run line is pasted into a root
// shell; whatever a node's values hold (spec refuses these, the line does
// not count on it), the shell reads each as one word and runs none of it.
func TestAgentRunLineQuoted(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "pwned")
	n := spec.Node{Address: "10.0.0.3$(touch " + marker + ")", InternalAddress: "10.0.0.4;touch " + marker,
		DockerSocket: "/run/d.sock`touch " + marker + "` x"}
	line := agentRunLine("https://h:1/agent/c' ; touch "+marker+" '", strings.Repeat("a", 64), "img", n, "rgt_tok")
	// docker is a shell function here that prints its arguments.
	out, err := exec.Command("sh", "-c", `docker() { for a; do printf '%s\n' "$a"; done; }; `+line).Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, line)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the shell ran a command from a node's values:\n%s", line)
	}
	args := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for _, want := range []string{n.Address, n.InternalAddress, n.DockerSocket, n.DockerSocket + ":" + n.DockerSocket} {
		if !slices.Contains(args, want) {
			t.Errorf("the shell did not read %q as one argument: %q", want, args)
		}
	}
}
