package agenttun

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// Figures of BenchmarkEndpointUnderAttack: how many of each attacker, and
// for how long. Bounded so that it ends by itself in about a minute.
const (
	loadIdleConns    = 2000             // TCP connections that never start TLS
	loadSlowConns    = 500              // TLS connections that send half a request, then nothing
	loadFlooders     = 20               // joined nodes whose tunnels flood pings and read nothing
	loadAttackTime   = 20 * time.Second // how long the attack lasts
	loadMemoryLimit  = 512 << 20        // deploy/'s memory limit of serve
	loadProbeTimeout = 5 * time.Second  // a real node's Docker call must answer within it
)

// BenchmarkEndpointUnderAttack runs the agent endpoint on loopback, as
// serve runs it (NewHTTPServer's deadlines, the store on disk), under
// attack for loadAttackTime: loadIdleConns connections that say nothing,
// loadSlowConns that send half a request and stop, and loadFlooders
// joined nodes (an attacker with their certificates) whose tunnels flood
// pings, 12 MB each a second, without reading a byte. Meanwhile a real
// node's agent is used every 100 ms. It reports the process's peak
// resident memory (server and attackers together: an upper bound of the
// server's), the peak Go heap, the peak goroutines, the slowest Docker
// call through the real node's tunnel, and the connections still open at
// the end; it fails when the process outgrows deploy/'s memory limit of
// serve or a Docker call fails. docs/reliability.md has its figures.
func BenchmarkEndpointUnderAttack(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	n := startNode(b)
	var nodes []Node
	for i := range loadFlooders + 1 {
		nodes = append(nodes, Node{Name: fmt.Sprintf("n%d", i), DockerSocket: n.docker.Socket})
	}
	for b.Loop() {
		ts := startServer(b, nodes...)
		ts.srv.cfg.KeepaliveInterval = DefaultKeepaliveInterval // serve's, not the tests' 1 s
		var creds []*credentials
		for i := 1; i <= loadFlooders; i++ {
			_, c := joinedCredentials(b, ts, nodes[i].Name, n)
			creds = append(creds, c)
		}
		real := ts.agentConfig(b, "n0", n)
		real.KeepaliveInterval = DefaultKeepaliveInterval
		runAgent(b, real)
		testwait.For(b, 30*time.Second, "the real node connected", func() bool { return ts.connected("n0") })
		cli, err := ts.srv.Docker(ctxFor(b), "n0")
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		baseRSS := rss(b)

		var attackers sync.WaitGroup
		var flooding, sent atomic.Int64
		flooding.Add(int64(len(creds)))
		var conns []net.Conn
		var mu sync.Mutex
		keep := func(c net.Conn) {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		for range loadIdleConns {
			c, err := net.Dial("tcp", ts.addr)
			if err != nil {
				b.Fatalf("idle connection: %v", err)
			}
			keep(c)
		}
		for range loadSlowConns {
			c, err := net.Dial("tcp", ts.addr)
			if err != nil {
				b.Fatalf("slow connection: %v", err)
			}
			keep(c)
			fmt.Fprint(c, "\x16\x03\x01") // the start of a TLS record, and no more
		}
		testwait.For(b, 30*time.Second, "the server took every connection", func() bool {
			return runtime.NumGoroutine() > loadIdleConns+loadSlowConns
		})
		// The attack's time runs from here: every connection is open.
		ctx, cancel := context.WithTimeout(context.Background(), loadAttackTime)
		// Each flooder holds its own node's tunnel.
		for i, c := range creds {
			conn := rawTunnel(b, ts, nodes[i+1].Name, c)
			keep(conn)
			attackers.Go(func() {
				defer func() { flooding.Add(-1) }()
				var pings []byte
				for j := range 10000 {
					pings = append(pings, yamuxPing(uint32(j))...)
				}
				msg := wsFrame(pings)
				for ctx.Err() == nil {
					conn.SetWriteDeadline(time.Now().Add(time.Second))
					n, err := conn.Write(msg)
					sent.Add(int64(n))
					if err != nil && !isTimeout(err) {
						return // the server closed the tunnel
					}
				}
			})
		}

		var peakRSS, peakHeap uint64
		peakGoroutines := runtime.NumGoroutine()
		var slowest time.Duration
		tick := time.NewTicker(100 * time.Millisecond)
		for ctx.Err() == nil {
			<-tick.C
			start := time.Now()
			pctx, pcancel := context.WithTimeout(context.Background(), loadProbeTimeout)
			_, err := cli.Ping(pctx)
			pcancel()
			if err != nil {
				b.Fatalf("a Docker call through the real node's tunnel during the attack: %v", err)
			}
			slowest = max(slowest, time.Since(start))
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, ms.HeapInuse)
			peakRSS = max(peakRSS, rss(b))
			peakGoroutines = max(peakGoroutines, runtime.NumGoroutine())
		}
		tick.Stop()
		still := flooding.Load()
		cancel()
		attackers.Wait()
		open := 0
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); isTimeout(err) {
				open++
			}
			c.Close()
		}
		b.ReportMetric(float64(peakRSS)/(1<<20), "peak-RSS-MB")
		b.ReportMetric(float64(peakRSS-min(baseRSS, peakRSS))/(1<<20), "RSS-growth-MB")
		b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(peakGoroutines), "peak-goroutines")
		b.ReportMetric(float64(slowest.Milliseconds()), "slowest-docker-ms")
		b.ReportMetric(float64(open), "conns-open-at-end")
		b.ReportMetric(float64(sent.Load())/(1<<20), "pings-sent-MB")
		b.ReportMetric(float64(still), "flooders-still-connected")
		if peakRSS > loadMemoryLimit {
			b.Errorf("the process reached %d MiB under attack, over serve's limit of %d MiB", peakRSS>>20, loadMemoryLimit>>20)
		}
		ts.stop()
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// rss is the process's resident memory (VmRSS).
func rss(t testing.TB) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
