// Package transporttest holds the conformance suite every transport runs:
// the behaviour the rest of rigger relies on, whichever way a node is
// reached. A transport's tests call TestConformance with a function that
// builds a fresh transport to one node that runs a TCP echo server.
package transporttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/versions"

	"github.com/rigger/rigger/transport"
)

// Target is a transport under test and what the suite may expect of the
// node it reaches.
type Target struct {
	Transport transport.Transport
	Node      string // a node the transport reaches
	// EchoAddr is a TCP address, as seen from the node, of a server that
	// writes back every byte it reads.
	EchoAddr string
	// ClosedAddr is a TCP address, as seen from the node, where nothing
	// listens.
	ClosedAddr string
	// Container is the name of a container that exists on the node.
	Container string
}

// timeout bounds every step; a transport that hangs fails instead.
const timeout = 30 * time.Second

// TestConformance runs the suite. newTarget is called once per subtest and
// must return a transport that has not been used yet; the suite closes it.
func TestConformance(t *testing.T, newTarget func(t *testing.T) Target) {
	fresh := func(t *testing.T) Target {
		t.Helper()
		tg := newTarget(t)
		t.Cleanup(func() { tg.Transport.Close() })
		return tg
	}
	t.Run("DockerVersion", func(t *testing.T) { testDockerVersion(t, fresh(t)) })
	t.Run("DockerSameClient", func(t *testing.T) { testDockerSameClient(t, fresh(t)) })
	t.Run("ListContainers", func(t *testing.T) { testListContainers(t, fresh(t)) })
	t.Run("DialEcho", func(t *testing.T) { testDialEcho(t, fresh(t)) })
	t.Run("DialClosedPort", func(t *testing.T) { testDialClosedPort(t, fresh(t)) })
	t.Run("UnknownNode", func(t *testing.T) { testUnknownNode(t, fresh(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, fresh(t)) })
	t.Run("CancelBeforeFirstUse", func(t *testing.T) { testCancelBeforeFirstUse(t, fresh(t)) })
	t.Run("DeadlinePassed", func(t *testing.T) { testDeadlinePassed(t, fresh(t)) })
	t.Run("Close", func(t *testing.T) { testClose(t, fresh(t)) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

func testDockerVersion(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	cli, err := tg.Transport.Docker(ctx, tg.Node)
	if err != nil {
		t.Fatalf("Docker: %v", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		t.Fatalf("ServerVersion: %v", err)
	}
	if versions.LessThan(v.APIVersion, transport.MinDockerAPIVersion) {
		t.Errorf("engine API %s is older than %s, Docker should have refused it", v.APIVersion, transport.MinDockerAPIVersion)
	}
	if versions.GreaterThan(cli.ClientVersion(), v.APIVersion) {
		t.Errorf("client speaks API %s, newer than the engine's %s: version not negotiated", cli.ClientVersion(), v.APIVersion)
	}
	// The version the transport read on connecting, when it keeps it, is
	// the engine's, as transport.EngineVersion gives it either way.
	if got, err := transport.EngineVersion(ctx, tg.Transport, tg.Node, cli); err != nil || got.Version != v.Version || got.APIVersion != v.APIVersion {
		t.Errorf("EngineVersion = %s (API %s), %v; the engine says %s (API %s)", got.Version, got.APIVersion, err, v.Version, v.APIVersion)
	}
}

func testDockerSameClient(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	a, err := tg.Transport.Docker(ctx, tg.Node)
	if err != nil {
		t.Fatalf("Docker: %v", err)
	}
	b, err := tg.Transport.Docker(ctx, tg.Node)
	if err != nil {
		t.Fatalf("Docker, second call: %v", err)
	}
	if a != b {
		t.Error("two Docker calls for one node returned different clients; want the same one reused")
	}
}

func testListContainers(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	cli, err := tg.Transport.Docker(ctx, tg.Node)
	if err != nil {
		t.Fatalf("Docker: %v", err)
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		t.Fatalf("ContainerList: %v", err)
	}
	if tg.Container == "" {
		return
	}
	var names []string
	for _, c := range list {
		names = append(names, c.Names...)
	}
	if !slices.Contains(names, "/"+tg.Container) {
		t.Errorf("ContainerList = %v, want %q among them", names, "/"+tg.Container)
	}
}

// echo sends size random bytes through conn while reading the echo, and
// checks that what comes back is what went out.
func echo(t *testing.T, conn net.Conn, size int) {
	t.Helper()
	out := make([]byte, size)
	rand.Read(out)
	conn.SetDeadline(time.Now().Add(timeout))
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(out)
		werr <- err
	}()
	in := make([]byte, size)
	if _, err := io.ReadFull(conn, in); err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(in, out) {
		t.Fatalf("echo returned different bytes than were sent (%d bytes)", size)
	}
}

func testDialEcho(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	conn, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr)
	if err != nil {
		t.Fatalf("Dial %s: %v", tg.EchoAddr, err)
	}
	defer conn.Close()
	echo(t, conn, 1)
	echo(t, conn, 1<<20) // more than any SSH window: flow control both ways
}

func testDialClosedPort(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	start := time.Now()
	conn, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.ClosedAddr)
	if err == nil {
		conn.Close()
		t.Fatalf("Dial %s (nothing listens) succeeded", tg.ClosedAddr)
	}
	var de *transport.DialError
	if !errors.As(err, &de) {
		t.Errorf("Dial %s: %v (%T), want a *transport.DialError", tg.ClosedAddr, err, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refused dial took %s, want an error at once", d)
	}
	// The node's connection survives a refused dial.
	conn, err = tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr)
	if err != nil {
		t.Fatalf("Dial after a refused dial: %v", err)
	}
	defer conn.Close()
	echo(t, conn, 100)
}

func testUnknownNode(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	if _, err := tg.Transport.Dial(ctx, "no-such-node", "tcp", tg.EchoAddr); !errors.Is(err, transport.ErrUnknownNode) {
		t.Errorf("Dial to an unknown node: %v, want ErrUnknownNode", err)
	}
	if _, err := tg.Transport.Docker(ctx, "no-such-node"); !errors.Is(err, transport.ErrUnknownNode) {
		t.Errorf("Docker of an unknown node: %v, want ErrUnknownNode", err)
	}
}

func testConcurrent(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli, err := tg.Transport.Docker(ctx, tg.Node)
			if err != nil {
				errs <- err
				return
			}
			if _, err := cli.Ping(ctx); err != nil {
				errs <- err
				return
			}
			if _, err := cli.ContainerList(ctx, container.ListOptions{}); err != nil {
				errs <- err
				return
			}
			conn, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			msg := make([]byte, 64<<10)
			rand.Read(msg)
			conn.SetDeadline(time.Now().Add(timeout))
			go conn.Write(msg)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(conn, got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, msg) {
				errs <- errors.New("echo mixed up bytes between concurrent connections")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testCancelBeforeFirstUse(t *testing.T, tg Target) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	conn, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr)
	if err == nil {
		conn.Close()
		t.Fatal("Dial with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with a canceled context: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Dial with a canceled context took %s", d)
	}
	// A canceled first use leaves the transport usable.
	conn, err = tg.Transport.Dial(ctxFor(t), tg.Node, "tcp", tg.EchoAddr)
	if err != nil {
		t.Fatalf("Dial after a canceled one: %v", err)
	}
	defer conn.Close()
	echo(t, conn, 10)
}

func testDeadlinePassed(t *testing.T, tg Target) {
	// Connect first, so that what is tested is the dial of a channel.
	if _, err := tg.Transport.Docker(ctxFor(t), tg.Node); err != nil {
		t.Fatalf("Docker: %v", err)
	}
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	conn, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr)
	if err == nil {
		conn.Close()
		t.Fatal("Dial with an expired deadline succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial with an expired deadline: %v, want context.DeadlineExceeded", err)
	}
}

func testClose(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	cli, err := tg.Transport.Docker(ctx, tg.Node)
	if err != nil {
		t.Fatalf("Docker: %v", err)
	}
	conn, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	echo(t, conn, 10)

	if err := tg.Transport.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A connection made before Close is closed with it.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("Read on a connection after Close succeeded")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("a connection made before Close stayed open after it")
	}
	if _, err := tg.Transport.Dial(ctx, tg.Node, "tcp", tg.EchoAddr); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Dial after Close: %v, want ErrClosed", err)
	}
	if _, err := tg.Transport.Docker(ctx, tg.Node); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Docker after Close: %v, want ErrClosed", err)
	}
	if _, err := cli.Ping(ctx); err == nil {
		t.Error("Ping through a Docker client after Close succeeded")
	}
	if err := tg.Transport.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
