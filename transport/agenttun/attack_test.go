package agenttun

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// joinedCredentials joins name to ts with a real agent, stops it and
// returns its configuration (whose state directory holds the
// credentials) and its credentials.
func joinedCredentials(t testing.TB, ts *testServer, name string, n node) (AgentConfig, *credentials) {
	t.Helper()
	cfg := ts.agentConfig(t, name, n)
	ra := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected(name) })
	ra.stop()
	testwait.For(t, 30*time.Second, "agent's tunnel down", func() bool { return !ts.connected(name) })
	a, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := a.loadCredentials()
	if err != nil || creds == nil {
		t.Fatalf("credentials of %s: %v", name, err)
	}
	return cfg, creds
}

// rawTunnel opens a tunnel for name with creds below the agent's code:
// the WebSocket handshake by hand, then the raw TLS connection, on which
// the test writes what no agent would.
func rawTunnel(t testing.TB, ts *testServer, name string, creds *credentials) net.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: creds.roots, Certificates: []tls.Certificate{creds.cert},
		ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("attacker's TLS connection: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET %s?node=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s: attacker\r\n\r\n",
		PathConnect, url.QueryEscape(name), ts.addr, headerHostname)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("attacker's WebSocket handshake: %v, %v", resp, err)
	}
	conn.SetDeadline(time.Time{})
	return conn
}

// wsFrame is one binary WebSocket message from a client (masked, with a
// zero key).
func wsFrame(payload []byte) []byte {
	b := []byte{0x82, 0xff}
	b = binary.BigEndian.AppendUint64(b, uint64(len(payload)))
	b = append(b, 0, 0, 0, 0)
	return append(b, payload...)
}

// yamuxPing is a yamux ping request (SYN) with id.
func yamuxPing(id uint32) []byte {
	h := make([]byte, 12)
	h[0], h[1] = 0, 2 // version, typePing
	binary.BigEndian.PutUint16(h[2:], 1)
	binary.BigEndian.PutUint32(h[8:], id)
	return h
}

// TestPingFloodBounded: an agent that floods pings and reads none of the
// replies must not make the server hold a goroutine (and its memory) per
// ping; hashicorp/yamux answered each ping from a goroutine of its own.
func TestPingFloodBounded(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	_, creds := joinedCredentials(t, ts, "n1", n)
	base := runtime.NumGoroutine()
	conn := rawTunnel(t, ts, "n1", creds)
	testwait.For(t, 30*time.Second, "attacker's tunnel up", func() bool { return ts.connected("n1") })

	// 2,000,000 pings (24 MB), 10,000 to a WebSocket message, and not a
	// byte read.
	var pings []byte
	for i := range 10000 {
		pings = append(pings, yamuxPing(uint32(i))...)
	}
	msg := wsFrame(pings)
	peak := 0
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 200 && time.Now().Before(deadline); i++ {
		conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write(msg); err != nil {
			break // the server closed the tunnel: as good as dropping pings
		}
		peak = max(peak, runtime.NumGoroutine())
	}
	// Give a handler's goroutines a moment to pile up, if they do.
	testwait.For(t, 30*time.Second, "server read the pings", func() bool {
		peak = max(peak, runtime.NumGoroutine())
		return true
	})
	t.Logf("goroutines: %d before the flood, %d at most during it", base, peak)
	if peak-base > 500 {
		t.Fatalf("a ping flood raised the goroutines from %d to %d: the server must answer pings from a bounded queue", base, peak)
	}
}

// TestBrokenTunnelDoesNotFreezeTheServer: a tunnel whose agent declares
// an absurd WebSocket frame and then sends nothing more must not block
// the server when the node's real tunnel replaces it: status, joins and
// dials of the cluster go on.
func TestBrokenTunnelDoesNotFreezeTheServer(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket}, Node{Name: "n2", DockerSocket: n.docker.Socket})
	cfg, creds := joinedCredentials(t, ts, "n1", n)
	conn := rawTunnel(t, ts, "n1", creds)
	testwait.For(t, 30*time.Second, "attacker's tunnel up", func() bool { return ts.connected("n1") })

	// Pings whose answers it never reads, until the server's writes block.
	var pings []byte
	for i := range 10000 {
		pings = append(pings, yamuxPing(uint32(i))...)
	}
	for range 100 {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write(wsFrame(pings)); err != nil {
			break
		}
	}
	conn.SetWriteDeadline(time.Time{})
	// A binary frame declaring 2^62 bytes of payload and 1 byte of it,
	// then silence with the TCP connection kept open.
	frame := []byte{0x82, 0xff}
	frame = binary.BigEndian.AppendUint64(frame, 1<<62)
	frame = append(frame, 0, 0, 0, 0, 'x')
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write(frame) // the server may have stopped reading: that is the point

	// The node's real agent, from its own host, replaces the broken
	// tunnel.
	runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "the real agent's tunnel", func() bool {
		got := make(chan []AgentStatus, 1)
		go func() { got <- ts.srv.Agents() }()
		select {
		case as := <-got:
			return len(as) == 2 && as[0].Connected && as[0].Hostname == "host-n1"
		case <-time.After(5 * time.Second):
			t.Fatalf("the server's status is blocked while a broken tunnel is replaced; its log:\n%s", ts.logs)
			return false
		}
	})
	// Another node's join goes through.
	runAgent(t, ts.agentConfig(t, "n2", n))
	testwait.For(t, 15*time.Second, "n2 joined and connected", func() bool { return ts.connected("n2") })
}
