package nodeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// listen returns a listener on a free port of 127.0.0.1, closed at the end.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serve runs handle for every connection on a new listener and returns its address.
func serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// named is an upstream that writes its name and closes.
func named(t testing.TB, name string) string {
	return serve(t, func(c net.Conn) { io.WriteString(c, name) })
}

// downAddr is an address nothing listens on: a closed listener's.
func downAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// counting wraps the default dialer and counts dials per address.
type counting struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[addr]++
	c.mu.Unlock()
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func (c *counting) count(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[addr]
}

// start runs a proxy with cfg until the test ends and returns its address.
// The setup functions run before it serves (to replace its clock).
func start(t testing.TB, cfg Config, setup ...func(*Proxy)) (string, *Proxy) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(p)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), p
}

// roundTrip connects to addr, reads until EOF and returns what it read.
func roundTrip(t testing.TB, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read through the proxy: %v", err)
	}
	return string(b)
}

func TestBalancesRoundRobin(t *testing.T) {
	ups := []string{named(t, "a"), named(t, "b"), named(t, "c")}
	addr, _ := start(t, Config{Upstreams: ups})
	got := map[string]int{}
	for range 9 {
		got[roundTrip(t, addr)]++
	}
	for _, name := range []string{"a", "b", "c"} {
		if got[name] != 3 {
			t.Errorf("connections per upstream %v, want 3 each", got)
			break
		}
	}
}

func TestFailsOverAndSkipsDownUpstream(t *testing.T) {
	down := downAddr(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	d := &counting{}
	ups := []string{down, named(t, "b"), named(t, "c")}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	addr, _ := start(t, Config{
		Upstreams:   ups,
		Dial:        d.dial,
		FailTimeout: time.Minute,
		Logger:      slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil)),
	}, func(p *Proxy) { p.now = func() time.Time { return time.Unix(0, clock.Load()) } })

	got := map[string]int{}
	for range 6 {
		got[roundTrip(t, addr)]++
	}
	if got["b"]+got["c"] != 6 || got["b"] == 0 || got["c"] == 0 {
		t.Errorf("answers %v, want all 6 from b and c", got)
	}
	if n := d.count(down); n != 1 {
		t.Errorf("the down upstream was dialed %d times, want once (then skipped)", n)
	}
	logMu.Lock()
	if n := strings.Count(logs.String(), "upstream unreachable"); n != 1 {
		t.Errorf("%d 'upstream unreachable' lines, want 1:\n%s", n, logs.String())
	}
	logMu.Unlock()

	// After FailTimeout the upstream is tried again.
	clock.Add(int64(2 * time.Minute))
	for range 3 {
		roundTrip(t, addr)
	}
	if n := d.count(down); n != 2 {
		t.Errorf("after the fail timeout the down upstream was dialed %d times in all, want 2", n)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestMarkedUpstreamUsedWhenNoOtherIsLeft(t *testing.T) {
	// The only upstream failed once; it is back and must not be skipped.
	ln := listen(t)
	upAddr := ln.Addr().String()
	ln.Close()
	addr, _ := start(t, Config{Upstreams: []string{upAddr}, FailTimeout: time.Hour})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read through the proxy with no upstream succeeded")
	}
	c.Close()

	ln2, err := net.Listen("tcp", upAddr)
	if err != nil {
		t.Skipf("cannot listen again on %s: %v", upAddr, err)
	}
	go func() {
		c, err := ln2.Accept()
		if err == nil {
			io.WriteString(c, "back")
			c.Close()
		}
	}()
	defer ln2.Close()
	if got := roundTrip(t, addr); got != "back" {
		t.Errorf("got %q, want the recovered upstream's answer", got)
	}
}

func TestHalfClose(t *testing.T) {
	// The upstream reads the whole request (to EOF), then answers.
	up := serve(t, func(c net.Conn) {
		b, err := io.ReadAll(c)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "got %d bytes: %s", len(b), b)
	})
	addr, _ := start(t, Config{Upstreams: []string{up}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read after CloseWrite: %v", err)
	}
	if got, want := string(b), "got 5 bytes: hello"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestServerHalfClose(t *testing.T) {
	// The upstream answers and closes its write side, then reads the rest.
	received := make(chan string, 1)
	up := serve(t, func(c net.Conn) {
		io.WriteString(c, "hello")
		c.(*net.TCPConn).CloseWrite()
		b, _ := io.ReadAll(c)
		received <- string(b)
	})
	addr, _ := start(t, Config{Upstreams: []string{up}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v; want hello then EOF", b, err)
	}
	io.WriteString(c, "bye")
	c.Close()
	if got := testwait.Recv(t, received, 5*time.Second, "the upstream seeing the client's close", nil); got != "bye" {
		t.Errorf("upstream received %q after its half-close, want bye", got)
	}
}

func TestAllUpstreamsDownClosesPromptly(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	addr, _ := start(t, Config{
		Upstreams: []string{downAddr(t), downAddr(t)},
		Logger:    slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil)),
	})
	for range 3 { // also once both are marked down
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || !errors.Is(err, io.EOF) && !isReset(err) {
			t.Errorf("read %d bytes, %v; want the connection closed", n, err)
		}
		if d := time.Since(begin); d > time.Second {
			t.Errorf("closed after %v, want promptly", d)
		}
		c.Close()
	}
	logMu.Lock()
	defer logMu.Unlock()
	// One line per upstream and one for the outage, not one per connection.
	if n := strings.Count(logs.String(), "level="); n != 3 {
		t.Errorf("%d log lines for 3 refused connections, want 3 (2 upstreams down, 1 no upstream):\n%s", n, logs.String())
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "reset")
}

func TestDialTimeoutFallsOver(t *testing.T) {
	// The first upstream never answers a dial; the second does.
	hang := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "hang:1" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	addr, _ := start(t, Config{Upstreams: []string{"hang:1", named(t, "ok")}, Dial: hang, DialTimeout: 50 * time.Millisecond})
	begin := time.Now()
	if got := roundTrip(t, addr); got != "ok" {
		t.Errorf("got %q, want ok", got)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("took %v, want about the dial timeout", d)
	}
}

func TestCancelStops(t *testing.T) {
	up := named(t, "a")
	p, err := New(Config{Upstreams: []string{up}})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	if got := roundTrip(t, ln.Addr().String()); got != "a" {
		t.Fatalf("got %q before cancel", got)
	}
	cancel()
	if err := testwait.Recv(t, done, 5*time.Second, "Serve's return after cancel", nil); err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	// The listener itself is asked, not its port: once it is closed,
	// another test running beside this one may listen on that port.
	if tl, ok := ln.(*net.TCPListener); ok {
		tl.SetDeadline(time.Now().Add(time.Second))
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener is not closed after Serve returned: Accept: %v", err)
	}
}

func TestCancelWaitsForConnectionsThenClosesThem(t *testing.T) {
	// An upstream that echoes and never closes on its own.
	up := serve(t, func(c net.Conn) { io.Copy(c, c) })
	p, err := New(Config{Upstreams: []string{up}, ShutdownGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "x")
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Within the grace period the connection still works.
	io.WriteString(c, "y")
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("connection broken within the grace period: %v", err)
	}
	if err := testwait.Recv(t, done, 5*time.Second, "Serve's return after the grace period", nil); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after the grace period")
	}
}

func TestNewRejects(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no upstreams": {},
		"no port":      {Upstreams: []string{"10.0.0.1"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// BenchmarkThroughput copies 1 MiB per operation through the proxy to an
// upstream that discards it and acknowledges.
func BenchmarkThroughput(b *testing.B) {
	up := serve(b, func(c net.Conn) {
		io.Copy(io.Discard, c)
		io.WriteString(c, "k")
	})
	addr, _ := start(b, Config{Upstreams: []string{up}})
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkLatency is one small request and answer on an open connection.
func BenchmarkLatency(b *testing.B) {
	up := serve(b, func(c net.Conn) { io.Copy(c, c) })
	addr, _ := start(b, Config{Upstreams: []string{up}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg, got := []byte("ping"), make([]byte, 4)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatal(err)
		}
	}
}
