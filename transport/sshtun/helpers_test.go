package sshtun

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/rigger/rigger/transport/internal/testnode"
)

// node is an in-process node: SSH server, Docker engine, echo server, and
// the client-side files that reach it.
type node struct {
	server     *testnode.Server
	docker     *testnode.Docker
	echo       string
	key        ssh.Signer
	keyPath    string
	knownHosts string
}

type nodeOptions struct {
	apiVersion string
	server     testnode.Options
}

const testUser = "rke"

// startNode starts a node whose server authorizes a fresh key for
// testUser, with a known_hosts file that lists the server's host keys.
func startNode(t testing.TB, o nodeOptions) *node {
	t.Helper()
	if o.apiVersion == "" {
		o.apiVersion = "1.41"
	}
	key, pem := testnode.NewKeyPEM(t, nil)
	n := &node{key: key, echo: testnode.StartEcho(t), docker: testnode.StartDocker(t, o.apiVersion)}
	if o.server.Users == nil {
		o.server.Users = map[string][]ssh.PublicKey{testUser: {key.PublicKey()}}
	}
	if o.server.Sockets == nil {
		o.server.Sockets = map[string]string{DefaultDockerSocket: n.docker.Socket}
	}
	n.server = testnode.Start(t, o.server)
	dir := t.TempDir()
	n.keyPath = filepath.Join(dir, "id_ed25519")
	writeFile(t, n.keyPath, pem)
	n.knownHosts = filepath.Join(dir, "known_hosts")
	var lines bytes.Buffer
	for _, k := range n.server.HostKeys {
		if _, isCert := k.PublicKey().(*ssh.Certificate); !isCert {
			lines.WriteString(knownhosts.Line([]string{knownhosts.Normalize(n.server.Addr)}, k.PublicKey()) + "\n")
		}
	}
	writeFile(t, n.knownHosts, lines.Bytes())
	return n
}

// host is the Host that logs in to n as testUser with n's key.
func (n *node) host() Host {
	return Host{Address: "127.0.0.1", Port: n.server.Port(), User: testUser, KeyPath: n.keyPath}
}

// config is a Config for n alone, named "n1", with short timeouts.
func (n *node) config() Config {
	return Config{
		Nodes:             []Node{{Name: "n1", Host: n.host()}},
		KnownHostsFiles:   []string{n.knownHosts},
		ConnectTimeout:    5 * time.Second,
		KeepaliveInterval: time.Second,
	}
}

func newT(t testing.TB, cfg Config) *Transport {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// roundTrip dials the echo server through tr and checks one exchange.
func roundTrip(t testing.TB, tr *Transport, nodeName, echo string) {
	t.Helper()
	conn, err := tr.Dial(testCtx(t), nodeName, "tcp", echo)
	if err != nil {
		t.Fatalf("Dial %s on %s: %v", echo, nodeName, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q, %v; want ping", buf, err)
	}
}

func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// logBuffer is a concurrency-safe slog destination for tests that check
// what is logged.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func itoa(i int) string { return strconv.Itoa(i) }

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
