package agenttun

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/internal/testnode"
)

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAgentAllowsOnlyItsSocketAndPorts(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Addresses = []string{"192.0.2.10"}
	runAgent(t, cfg)
	other := testnode.StartEcho(t) // listens, but its port is not allowed
	otherSock := filepath.Join(filepath.Dir(n.docker.Socket), "other.sock")
	ln, err := net.Listen("unix", otherSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	echoPort := strconv.Itoa(port(t, n.echo))
	for _, tc := range []struct {
		name, network, addr, want string
	}{
		{"port not allowed", "tcp", other, "does not allow port"},
		{"another socket", "unix", otherSock, "allows no Unix socket but its Docker socket"},
		{"another host", "tcp", net.JoinHostPort("192.0.2.11", echoPort), "dials only loopback and the node's own addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := ts.srv.Dial(ctxFor(t), "n1", tc.network, tc.addr)
			if err == nil {
				conn.Close()
				t.Fatalf("Dial %s %s succeeded, want it refused by the agent", tc.network, tc.addr)
			}
			var de *transport.DialError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dial %s %s: %v, want a *transport.DialError saying %q", tc.network, tc.addr, err, tc.want)
			}
		})
	}
	// What is allowed goes through on the same tunnel.
	for _, addr := range []string{n.echo, net.JoinHostPort("localhost", echoPort)} {
		conn, err := ts.srv.Dial(ctxFor(t), "n1", "tcp", addr)
		if err != nil {
			t.Fatalf("Dial %s: %v", addr, err)
		}
		conn.Close()
	}
}

func TestNewestTunnelWins(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	cfg := ts.agentConfig(t, "n1", n)
	// The first agent does not come back within the test once replaced.
	cfg.BackoffBase, cfg.BackoffMax = time.Hour, time.Hour
	first := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "first agent connected", func() bool { return ts.connected("n1") })

	// The same credentials from another host: the agent moved, or the old
	// tunnel is a dead connection the server has not noticed yet.
	second := cfg
	second.Hostname = "host-moved"
	second.BackoffBase, second.BackoffMax = 10*time.Millisecond, 200*time.Millisecond
	runAgent(t, second)
	testwait.For(t, 30*time.Second, "second agent's tunnel replaces the first", func() bool {
		a := ts.srv.Agents()
		return len(a) == 1 && a[0].Connected && a[0].Hostname == "host-moved"
	})
	testwait.For(t, 30*time.Second, "first agent's tunnel closed", func() bool {
		return strings.Contains(first.logs.String(), "tunnel down")
	})
	cli, err := ts.srv.Docker(ctxFor(t), "n1")
	if err != nil {
		t.Fatalf("Docker through the newest tunnel: %v", err)
	}
	if _, err := cli.Ping(ctxFor(t)); err != nil {
		t.Fatalf("Ping through the newest tunnel: %v", err)
	}
}

func TestPingsEndSilentTunnels(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	proxy := testnode.StartProxy(t, ts.addr)
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Server = "https://" + proxy.Addr
	ra := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })

	// A partition: no data, no reset, no FIN. Each side's pings go
	// unanswered, each side closes the tunnel, and the agent dials again.
	proxy.Silence()
	testwait.For(t, 30*time.Second, "agent noticed the silent tunnel and dialled again", func() bool {
		return strings.Contains(ra.logs.String(), "tunnel up again")
	})
	testwait.For(t, 30*time.Second, "server noticed the silent tunnel", func() bool {
		return strings.Contains(ts.logs.String(), "agent tunnel down")
	})
	testwait.For(t, 30*time.Second, "agent connected again", func() bool { return ts.connected("n1") })
	conn, err := ts.srv.Dial(ctxFor(t), "n1", "tcp", n.echo)
	if err != nil {
		t.Fatalf("Dial after the partition: %v", err)
	}
	conn.Close()
}

func TestNotConnected(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	ts.srv.cfg.ConnectWait = 50 * time.Millisecond
	_, err := ts.srv.Dial(ctxFor(t), "n1", "tcp", n.echo)
	var nc *NotConnectedError
	if !errors.As(err, &nc) {
		t.Fatalf("Dial to a node whose agent never connected: %v, want a *NotConnectedError", err)
	}
	var ne transport.NodeError
	if !errors.As(err, &ne) {
		t.Errorf("%T is not a transport.NodeError", err)
	}
	if !strings.Contains(err.Error(), "node n1: its agent is not connected") {
		t.Errorf("error %q does not say the agent is not connected", err)
	}
}
