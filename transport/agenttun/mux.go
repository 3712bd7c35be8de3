package agenttun

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-yamux/v5"
)

// Budgets of one tunnel, on both sides. The yamux fork of libp2p enforces
// them: a ping is answered from a queue of pingBacklog replies (the
// excess is dropped, never a goroutine per ping), a stream the other side
// opens beyond maxIncomingStreams is reset at once, and the bytes a
// tunnel's streams may hold unread (their receive windows) are reserved
// from tunnelWindowBudget, so that a peer that floods or never reads
// costs a bounded amount of memory.
const (
	pingBacklog        = 16
	maxStreamWindow    = 1 << 20
	tunnelWindowBudget = 32 << 20
	// The agent accepts the streams the server opens; the server accepts
	// none (an agent never opens one).
	agentIncomingStreams  = 256
	serverIncomingStreams = 0
	// acceptBacklog bounds the streams waiting for the agent's accept.
	acceptBacklog = 64
)

// muxConfig is the multiplexer's configuration; incoming is how many
// streams the other side may open at once.
func muxConfig(keepalive time.Duration, incoming uint32, log *slog.Logger) *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = acceptBacklog
	c.PingBacklog = pingBacklog
	c.EnableKeepAlive = true
	c.KeepAliveInterval = keepalive
	c.ConnectionWriteTimeout = keepalive
	c.MaxIncomingStreams = incoming
	c.MaxStreamWindowSize = maxStreamWindow
	c.LogOutput = debugWriter{log}
	return c
}

// debugWriter carries yamux's log lines to log at debug level.
type debugWriter struct{ log *slog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	if w.log.Enabled(context.Background(), slog.LevelDebug) {
		w.log.Debug(strings.TrimSpace(string(p)), "component", "yamux")
	}
	return len(p), nil
}

// windowBudget is the memory one tunnel's streams may reserve for their
// receive windows; each stream reserves from it through a span.
type windowBudget struct {
	mu         sync.Mutex
	used, size int
}

func newWindowBudget(size int) func() (yamux.MemoryManager, error) {
	b := &windowBudget{size: size}
	return func() (yamux.MemoryManager, error) { return &windowSpan{b: b}, nil }
}

var errWindowBudget = errors.New("the tunnel's memory budget for unread bytes is spent")

// windowSpan is one stream's share of a windowBudget.
type windowSpan struct {
	b    *windowBudget
	held int
}

func (s *windowSpan) ReserveMemory(size int, _ uint8) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.b.used+size > s.b.size {
		return errWindowBudget
	}
	s.b.used += size
	s.held += size
	return nil
}

func (s *windowSpan) ReleaseMemory(size int) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	size = min(size, s.held)
	s.b.used -= size
	s.held -= size
}

func (s *windowSpan) Done() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.used -= s.held
	s.held = 0
}

// tunnelConn is a WebSocket as the byte stream yamux runs on. Its Close
// drops the connection without the WebSocket close handshake: a peer that
// never answers it (or declared a frame it never sends) must not hold up
// whoever closes the tunnel.
type tunnelConn struct {
	net.Conn
	ws *websocket.Conn
}

func newTunnelConn(ctx context.Context, ws *websocket.Conn) *tunnelConn {
	return &tunnelConn{Conn: websocket.NetConn(ctx, ws, websocket.MessageBinary), ws: ws}
}

func (c *tunnelConn) Close() error {
	err := c.ws.CloseNow()
	c.Conn.Close() // stops the adapter's timers; the connection is closed already
	return err
}
