package agenttun

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/transport/internal/testnode"
)

func TestServerRestart(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	ra := runAgent(t, ts.agentConfig(t, "n1", n))
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })
	cli, err := ts.srv.Docker(ctxFor(t), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Ping(ctxFor(t)); err != nil {
		t.Fatal(err)
	}

	ts.restart() // a new process: state from its directory, same address
	testwait.For(t, 30*time.Second, "agent reconnected", func() bool { return ts.connected("n1") })
	cli, err = ts.srv.Docker(ctxFor(t), "n1")
	if err != nil {
		t.Fatalf("Docker after the restart: %v", err)
	}
	if _, err := cli.Ping(ctxFor(t)); err != nil {
		t.Fatalf("Ping after the restart: %v", err)
	}
	logs := ra.logs.String()
	if strings.Count(logs, "join step 3/4") != 1 || !strings.Contains(logs, "tunnel up again") {
		t.Errorf("the agent should have joined once and reconnected with its certificate:\n%s", logs)
	}
}

// TestAbruptClosesLeaveNothingBehind dials a hundred streams and drops
// each mid-transfer, and resets the whole tunnel every ten: afterwards the
// process (server and agent) runs no more goroutines than before and its
// heap has not grown.
func TestAbruptClosesLeaveNothingBehind(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	proxy := testnode.StartProxy(t, ts.addr)
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Server = "https://" + proxy.Addr
	runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "agent connected", func() bool { return ts.connected("n1") })
	dialEcho := func() net.Conn {
		t.Helper()
		conn, err := ts.srv.Dial(ctxFor(t), "n1", "tcp", n.echo)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		return conn
	}
	dialEcho().Close() // warm up: the first stream's one-time allocations

	runtime.GC()
	baseG := runtime.NumGoroutine()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	payload := make([]byte, 256<<10)
	rand.Read(payload)
	for i := range 100 {
		conn := dialEcho()
		// Write with data in flight both ways, and close after reading a
		// part of the echo.
		go conn.Write(payload)
		buf := make([]byte, 1024)
		io.ReadFull(conn, buf)
		conn.Close()
		if i%10 == 9 {
			proxy.Reset()
			testwait.For(t, 30*time.Second, "agent reconnected", func() bool {
				if !ts.connected("n1") {
					return false
				}
				c, err := ts.srv.Dial(ctxFor(t), "n1", "tcp", n.echo)
				if err != nil {
					return false // the server has not noticed the old tunnel is gone yet
				}
				c.Close()
				return true
			})
		}
	}

	var g int
	if !testwait.Until(30*time.Second, 20*time.Millisecond, func() bool {
		runtime.GC()
		g = runtime.NumGoroutine()
		return g <= baseG
	}) {
		var dump bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&dump, 1)
		t.Fatalf("%d goroutines after the abrupt closes, %d before:\n%s", g, baseG, dump.String())
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	const slack = 16 << 20
	if after.HeapInuse > before.HeapInuse+slack {
		t.Errorf("heap in use grew from %d to %d bytes over the abrupt closes (more than %d)", before.HeapInuse, after.HeapInuse, slack)
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{base: time.Second, max: 8 * time.Second}
	for i, bound := range []time.Duration{1, 2, 4, 8, 8, 8} {
		bound *= time.Second
		for range 50 {
			c := b
			if d := c.next(); d < bound/2 || d > bound {
				t.Fatalf("wait after %d failures = %s, want within [%s, %s]", i+1, d, bound/2, bound)
			}
		}
		b.next()
	}
	seen := map[time.Duration]bool{}
	for range 20 {
		c := backoff{base: time.Second, max: time.Minute, failures: 3}
		seen[c.next()] = true
	}
	if len(seen) < 2 {
		t.Error("20 waits after the same failures were all equal: no jitter")
	}
	b.reset()
	if d := b.next(); d > time.Second {
		t.Errorf("wait after a reset = %s, want at most the base", d)
	}
}
