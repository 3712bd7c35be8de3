package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/gitops/replicas"
	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/agenttun"
)

// TestAgentRecordsInSecrets: with --state-backend kubernetes the agent
// tunnel's CA and records are in Secrets shared by serve's replicas and
// rigger agent command (RIGGER_E2E=1, a real API server). What a serve kept
// in its --state-dir before is moved in at its start, with the same CA; a
// second replica opens the same CA; a node joins through one replica with
// a token agent command issued from a kubeconfig, and once that replica is
// gone its tunnel comes up through the other with the certificate it got;
// a third replica, started since, reaches the node through the one that
// holds its tunnel (the peer relay), and its status says so.
func TestAgentRecordsInSecrets(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	client, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := defaultStateNamespace
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := api.WriteKubeconfig(t)
	// The node's Docker engine, as far as the tunnel goes: a socket
	// answering /_ping and /version.
	socket := filepath.Join(t.TempDir(), "docker.sock")
	engine, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(engine, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.43")
		if strings.HasSuffix(r.URL.Path, "/version") {
			io.WriteString(w, `{"ApiVersion":"1.43","MinAPIVersion":"1.24","Version":"24.0.9","Os":"linux","Arch":"amd64"}`)
			return
		}
		io.WriteString(w, "OK")
	}))
	defer engine.Close()
	file := writeCluster(t, strings.Replace(agentClusterYML, "    internal_address: 10.0.0.20\n", "    internal_address: 10.0.0.20\n    docker_socket: "+socket+"\n", 1))
	c, _, err := spec.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	inSecrets := []string{"--state-backend", "kubernetes", "--kubeconfig", kubeconfig}

	// The CLI does not make a CA of its own in Secrets serve has not
	// filled.
	_, stderr, code := run(t, append([]string{"agent", "command", "-f", file, "--node", "192.0.2.20", "--server", "https://127.0.0.1:1"}, inSecrets...)...)
	if code == 0 || !strings.Contains(stderr, "holds no agent tunnel CA") || !strings.Contains(stderr, secretstate.AgentCASecret) {
		t.Fatalf("agent command before serve filled the Secrets: exit %d, %s; want a refusal naming the CA's Secret", code, stderr)
	}

	// A serve of before: its records in its --state-dir.
	oldDir := t.TempDir()
	old, err := agenttun.OpenStore(agentStoreDir(oldDir), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.IssueToken("edge", "192.0.2.10", time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	records := &secretstate.AgentRecords{Secrets: client.CoreV1().Secrets(ns), Namespace: ns}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	storeA, err := openAgentStore(t.Context(), oldDir, records, log, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if storeA.CA().Checksum() != old.CA().Checksum() || !strings.Contains(logs.String(), "moved from the state directory into Secrets") {
		t.Fatalf("replica A's CA %s, the directory's %s; log:\n%s\nwant the directory's moved in", storeA.CA().Checksum(), old.CA().Checksum(), logs)
	}
	storeB, err := openAgentStore(t.Context(), t.TempDir(), records, log, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if storeB.CA().Checksum() != storeA.CA().Checksum() {
		t.Fatal("replica B opened another CA than replica A's")
	}
	if toks, err := records.List(t.Context(), "tokens"); err != nil || len(toks) != 1 {
		t.Fatalf("%d token Secrets (%v), want the directory's one", len(toks), err)
	}

	a, urlA, stopA := listenEndpointOn(t, storeA, "127.0.0.1:0", logs)
	defer stopA()
	b, urlB, stopB := listenEndpointOn(t, storeB, "127.0.0.1:0", logs)
	defer stopB()
	for _, e := range []*agentEndpoint{a, b} {
		s, err := e.open(c, reconcile.Options{StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}

	out, stderr, code := run(t, append([]string{"agent", "command", "-f", file, "--node", "192.0.2.20", "--server", urlA}, inSecrets...)...)
	if code != 0 {
		t.Fatalf("agent command: exit %d: %s", code, stderr)
	}
	tok := strings.Fields(out[strings.Index(out, "RIGGER_TOKEN=")+len("RIGGER_TOKEN="):])[0]
	if !strings.Contains(out, "--ca-checksum "+storeA.CA().Checksum()) {
		t.Fatalf("agent command printed %s; want the replicas' CA checksum", out)
	}

	agentDir := t.TempDir()
	connect := func(server, token string, e *agentEndpoint) func() {
		ag, err := agenttun.NewAgent(agenttun.AgentConfig{Server: server + "/agent/edge", Token: token, CAChecksum: storeA.CA().Checksum(),
			Node: "192.0.2.20", DockerSocket: socket, StateDir: agentDir})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { ag.Run(ctx) })
		if !testwait.Until(30*time.Second, 10*time.Millisecond, func() bool { return e.servers["edge"].Agents()[1].Connected }) {
			t.Fatalf("the agent did not connect through %s:\n%s", server, logs)
		}
		return func() { cancel(); wg.Wait() }
	}
	stop := connect(urlA, tok, a)
	stop()
	stopA()
	// Replica A gone: the agent, with the certificate it got there,
	// connects through B, which reads its serial from the Secrets.
	stop = connect(urlB, "", b)
	// A replica started since, without the tunnel, reaches the node
	// through B, the replica that holds it.
	storeC, err := openAgentStore(t.Context(), t.TempDir(), records, log, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cEnd, _, stopC := listenEndpointOn(t, storeC, "127.0.0.1:0", logs)
	defer stopC()
	cEnd.peerClient = agenttun.NewPeerClient(storeC, "c")
	bAddr := strings.TrimPrefix(urlB, "https://")
	cEnd.setReplicas("c", func() []replicas.Member {
		return []replicas.Member{{ID: "b", AgentAddress: bAddr}, {ID: "c", AgentAddress: "127.0.0.1:1"}}
	})
	s, err := cEnd.openSession(c, reconcile.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli, err := cEnd.servers["edge"].Docker(ctx, "192.0.2.20")
	if err != nil {
		t.Fatalf("replica C's Docker client of the node whose tunnel is on B: %v", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("a Docker call from C through B: %v", err)
	}
	if tun := cEnd.tunnels("edge"); len(tun) != 2 || !tun[1].Connected || tun[1].Replica != "b" {
		t.Fatalf("C's tunnels for status.yml: %+v, want 192.0.2.20 connected through replica b", tun)
	}
	stop()
	nodes, err := records.List(t.Context(), "nodes")
	if err != nil || len(nodes) != 1 {
		t.Fatalf("%d node Secrets (%v), want 192.0.2.20's", len(nodes), err)
	}

	out, stderr, code = run(t, append([]string{"agent", "approve", "-f", file}, inSecrets...)...)
	if code != 0 || !strings.Contains(out, "no join of cluster edge waits for approval") {
		t.Fatalf("agent approve: exit %d, %s%s", code, out, stderr)
	}
}
