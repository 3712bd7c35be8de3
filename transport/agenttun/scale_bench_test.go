package agenttun

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// BenchmarkSessions holds 1,000 agent tunnels to one server, agents
// simulated in the process, each joined with the token and then dialled
// through once, and reports the heap the tunnels hold (both ends: server
// and agents) in MB per 1,000 sessions. The bound is 300 MB for
// the server alone.
func BenchmarkSessions(b *testing.B) {
	const sessions = 1000
	n := startNode(b)
	nodes := make([]Node, sessions)
	for i := range nodes {
		nodes[i] = Node{Name: fmt.Sprintf("n%d", i), DockerSocket: n.docker.Socket}
	}
	for b.Loop() {
		ts := startServer(b, nodes...)
		// serve's keepalive (and so write timeout), not the tests' 1 s:
		// a thousand tunnels coming up at once on two cores take longer.
		ts.srv.cfg.KeepaliveInterval = DefaultKeepaliveInterval
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)

		ctx, cancel := context.WithCancel(context.Background())
		var agents sync.WaitGroup
		for i := range sessions {
			cfg := ts.agentConfig(b, nodes[i].Name, n)
			cfg.StateDir = ""
			cfg.KeepaliveInterval = DefaultKeepaliveInterval
			a, err := NewAgent(cfg)
			if err != nil {
				b.Fatal(err)
			}
			agents.Go(func() { a.Run(ctx) })
		}
		testwait.For(b, 5*time.Minute, "every agent connected", func() bool {
			up := 0
			for _, a := range ts.srv.Agents() {
				if a.Connected {
					up++
				}
			}
			return up == sessions
		})
		for _, node := range nodes {
			conn, err := ts.srv.Dial(ctx, node.Name, "tcp", n.echo)
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MB/1000-sessions")
		b.ReportMetric(float64(runtime.NumGoroutine())/sessions, "goroutines/session")
		cancel()
		agents.Wait()
		ts.stop()
	}
}
