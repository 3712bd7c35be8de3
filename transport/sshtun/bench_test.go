package sshtun

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// benchTarget is a node to benchmark against: in-process here, the sandbox
// in e2e_test.go.
type benchTarget struct {
	cfg  Config
	node string
	echo string // node-local echo address; empty: skip the dial benchmarks
}

func inProcessBench(b *testing.B) benchTarget {
	n := startNode(b, nodeOptions{})
	return benchTarget{cfg: n.config(), node: "n1", echo: n.echo}
}

func BenchmarkInProcess(b *testing.B) {
	runBenchmarks(b, inProcessBench(b))
}

// runBenchmarks measures what connection reuse buys:
//
//   - DockerCall/one-connection: a Docker API call (container list) over
//     the node's one SSH connection, as sshtun does it;
//   - DockerCall/new-connection-each: the same call on a fresh connection
//     every time, as RKE's dialer does (TCP, SSH handshake, auth, ping);
//   - FirstConnection: what the first use of a node costs: TCP, key
//     exchange, host key check, authentication and one channel;
//   - Channel: opening and closing one more channel on a live connection.
func runBenchmarks(b *testing.B, bt benchTarget) {
	ctx := context.Background()
	list := container.ListOptions{All: true}
	b.Run("DockerCall/one-connection", func(b *testing.B) {
		tr := newT(b, bt.cfg)
		cli, err := tr.Docker(ctx, bt.node)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, err := cli.ContainerList(ctx, list); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DockerCall/new-connection-each", func(b *testing.B) {
		for b.Loop() {
			tr, err := New(bt.cfg)
			if err != nil {
				b.Fatal(err)
			}
			cli, err := tr.Docker(ctx, bt.node)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cli.ContainerList(ctx, list); err != nil {
				b.Fatal(err)
			}
			tr.Close()
		}
	})
	if bt.echo == "" {
		return
	}
	b.Run("FirstConnection", func(b *testing.B) {
		for b.Loop() {
			tr, err := New(bt.cfg)
			if err != nil {
				b.Fatal(err)
			}
			conn, err := tr.Dial(ctx, bt.node, "tcp", bt.echo)
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
			tr.Close()
		}
	})
	b.Run("Channel", func(b *testing.B) {
		tr := newT(b, bt.cfg)
		if conn, err := tr.Dial(ctx, bt.node, "tcp", bt.echo); err != nil {
			b.Fatal(err)
		} else {
			conn.Close()
		}
		b.ResetTimer()
		for b.Loop() {
			conn, err := tr.Dial(ctx, bt.node, "tcp", bt.echo)
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
}
