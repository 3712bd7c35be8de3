package agenttun

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/internal/testnode"
	"github.com/rigger/rigger/transport/sshtun"
)

// BenchmarkTransports measures, through the agent tunnel and through SSH
// to the same in-process node on loopback:
//
//   - DockerCall: a Docker API round trip (container list) on a live
//     connection, what the engine does most;
//   - Dial: opening and closing a stream to a node-local port;
//   - Throughput: 1 MiB echoed through a node-local port.
func BenchmarkTransports(b *testing.B) {
	n := startNode(b)
	b.Run("agent", func(b *testing.B) {
		ts := startServer(b, Node{Name: "n1", DockerSocket: n.docker.Socket})
		runAgent(b, ts.agentConfig(b, "n1", n))
		runTransportBenchmarks(b, ts.srv, n)
	})
	b.Run("ssh", func(b *testing.B) {
		tr, err := sshtun.New(sshConfig(b, n))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		runTransportBenchmarks(b, tr, n)
	})
}

// sshConfig is an SSH transport to an in-process SSH server in front of n.
func sshConfig(b *testing.B, n node) sshtun.Config {
	key, pem := testnode.NewKeyPEM(b, nil)
	srv := testnode.Start(b, testnode.Options{
		Users:   map[string][]ssh.PublicKey{"rigger": {key.PublicKey()}},
		Sockets: map[string]string{sshtun.DefaultDockerSocket: n.docker.Socket},
	})
	dir := b.TempDir()
	keyPath, khPath := filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	kh := knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, srv.HostKeys[0].PublicKey()) + "\n"
	if err := os.WriteFile(keyPath, pem, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(khPath, []byte(kh), 0o600); err != nil {
		b.Fatal(err)
	}
	return sshtun.Config{
		Nodes:           []sshtun.Node{{Name: "n1", Host: sshtun.Host{Address: "127.0.0.1", Port: srv.Port(), User: "rigger", KeyPath: keyPath}}},
		KnownHostsFiles: []string{khPath},
		ConnectTimeout:  5 * time.Second,
	}
}

func runTransportBenchmarks(b *testing.B, tr transport.Transport, n node) {
	ctx := context.Background()
	b.Run("DockerCall", func(b *testing.B) {
		cli, err := tr.Docker(ctx, "n1")
		if err != nil {
			b.Fatal(err)
		}
		list := container.ListOptions{All: true}
		for b.Loop() {
			if _, err := cli.ContainerList(ctx, list); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Dial", func(b *testing.B) {
		for b.Loop() {
			conn, err := tr.Dial(ctx, "n1", "tcp", n.echo)
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
	b.Run("Throughput", func(b *testing.B) {
		conn, err := tr.Dial(ctx, "n1", "tcp", n.echo)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		buf := make([]byte, 1<<20)
		got := make([]byte, len(buf))
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			errc := make(chan error, 1)
			go func() {
				_, err := conn.Write(buf)
				errc <- err
			}()
			if _, err := io.ReadFull(conn, got); err != nil {
				b.Fatal(err)
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		}
	})
}
