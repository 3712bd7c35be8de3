package agenttun

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/transport"
)

// TestPeerRelay: two replicas on one store, the node's agent connected to
// B: A reaches the node through B (Docker, an allowed port; a port the
// agent refuses is refused as through its own tunnel), says so in its
// status, and the relay serves peer certificates alone. Once the agent
// is gone A says that no replica holds its tunnel; once it connects to A,
// A uses its own tunnel.
func TestPeerRelay(t *testing.T) {
	n := startNode(t)
	b := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	a := &testServer{t: t, dir: b.dir, nodes: b.nodes, logs: &syncBuffer{},
		peers: func() []Peer { return []Peer{{ID: "b", URL: b.URL}} }}
	a.start("127.0.0.1:0")

	cfg := b.agentConfig(t, "n1", n)
	ra := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "n1 connected to b", func() bool { return b.connected("n1") })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := a.srv.Docker(ctx, "n1")
	if err != nil {
		t.Fatalf("A's Docker client of n1, whose tunnel is on B: %v", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("a Docker call through B: %v", err)
	}
	conn, err := a.srv.Dial(ctx, "n1", "tcp", n.echo)
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("through the peer ", 10000) // more than a message
	go conn.Write([]byte(msg))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
		t.Fatalf("the echo through B: %v, %d bytes", err, len(got))
	}
	conn.Close()
	var de *transport.DialError
	if _, err := a.srv.Dial(ctx, "n1", "tcp", "127.0.0.1:1"); !errors.As(err, &de) {
		t.Fatalf("a port the agent does not allow, through B: %v, want a *transport.DialError", err)
	}
	st := a.srv.Agents()
	if len(st) != 1 || !st[0].Connected || st[0].Via != "b" {
		t.Fatalf("A's status of n1: %+v, want connected via b", st)
	}

	// Only a peer certificate of the CA passes the relay.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.srv.store.CA().pool()}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(b.URL + PathPeer + "?node=n1&probe=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the relay without a peer certificate: %s, want 403", resp.Status)
	}

	ra.stop()
	testwait.For(t, 30*time.Second, "n1 gone from b", func() bool { return !b.connected("n1") })
	short, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_, err = a.srv.Dial(short, "n1", "unix", n.docker.Socket)
	var nc *NotConnectedError
	if !errors.As(err, &nc) || !strings.Contains(err.Error(), "none of the 1 other replicas holds its tunnel") {
		t.Fatalf("A's dial with the agent gone: %v, want a *NotConnectedError saying no replica holds it", err)
	}

	// The agent again, with the certificate it got from B, to A.
	cfg.Server, cfg.Token = a.URL, ""
	runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "n1 connected to a", func() bool { return a.connected("n1") })
	if st := a.srv.Agents(); st[0].Via != "" || st[0].Remote == "" {
		t.Fatalf("A's status of n1 with its tunnel here: %+v", st)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("a Docker call through A's own tunnel: %v", err)
	}
}
