// Package statuspage is rigger serve's live status page: an http.Handler
// that serves the page at / and its changes as server-sent events at
// /events, from serve's gitops.Board. Everything the page needs is
// embedded (no CDN, no external font), so that it works offline. What it
// shows is what status.yml holds, which holds no secret, and the page
// puts every value in the DOM as text, never as HTML.
package statuspage

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rigger/rigger/gitops"
)

// Board is what the page shows and follows: *gitops.Board's methods it
// calls (a fake in tests).
type Board interface {
	Since(version uint64) gitops.BoardChanges
	Subscribe() (<-chan struct{}, func())
}

var _ Board = (*gitops.Board)(nil)

// Defaults of Options.
const (
	// DefaultMaxStreams is how many /events streams are open at once; one
	// more is answered 503 (each holds a goroutine and a connection).
	DefaultMaxStreams = 100
	// DefaultKeepAlive is the time between two comments on an idle
	// /events stream, so that proxies and browsers keep it open and a
	// closed one is noticed.
	DefaultKeepAlive = 25 * time.Second
	// DefaultMinInterval is the shortest time between two "board" events
	// of a stream: the changes of a busy serve (many clusters reconciled
	// at once) come together, at most one event a second.
	DefaultMinInterval = time.Second
	// writeTimeout bounds each write to an /events stream: a client that
	// stops reading is dropped.
	writeTimeout = 30 * time.Second
)

// Options are the settings of New; zero values are the defaults.
type Options struct {
	MaxStreams  int
	KeepAlive   time.Duration
	MinInterval time.Duration
	// Log is told of streams refused; nil logs nothing.
	Log *slog.Logger
	// Now is the clock of the snapshots' time (time.Now when nil).
	Now func() time.Time
}

//go:embed assets
var assets embed.FS

// Handler serves the page: / (the page), /static/ (its script and style
// sheet), /events (server-sent events) and /api/clusters (the same data
// as JSON, once).
type Handler struct {
	board   Board
	o       Options
	mux     *http.ServeMux
	streams atomic.Int64
	// closed ends every /events stream (Close).
	closed    chan struct{}
	closeOnce sync.Once
}

// New is the status page of board.
func New(board Board, o Options) *Handler {
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.MinInterval <= 0 {
		o.MinInterval = DefaultMinInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{board: board, o: o, mux: http.NewServeMux(), closed: make(chan struct{})}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /events", h.events)
	h.mux.HandleFunc("GET /api/clusters", h.clusters)
	return h
}

// Close ends the /events streams, and every later one at once: an
// http.Server's Shutdown waits for connections to be idle, which a stream
// never is (serve calls Close from RegisterOnShutdown). Browsers connect
// again by themselves.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.closed) })
}

// ServeHTTP serves the page with headers that keep it to its own origin:
// its own scripts and styles only, no framing, no referrer (a token in the
// URL stays on this page).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// Snapshot is what the page gets: the clusters on the board, and when.
// On /api/clusters and in the first event of a stream it is the whole
// board (Full); in the next ones, only the clusters changed since the
// stream's last event, and the paths of those removed.
type Snapshot struct {
	Now      time.Time             `json:"now"`
	Full     bool                  `json:"full"`
	Clusters []gitops.BoardCluster `json:"clusters"`
	Removed  []string              `json:"removed,omitempty"`
}

// snapshot is the board's changes since version as JSON, and the board's
// version.
func (h *Handler) snapshot(since uint64) ([]byte, uint64, error) {
	c := h.board.Since(since)
	b, err := json.Marshal(Snapshot{Now: h.o.Now().UTC(), Full: c.Full, Clusters: c.Changed, Removed: c.Removed})
	if err != nil {
		return nil, 0, fmt.Errorf("status page: %w", err)
	}
	return b, c.Version, nil
}

// clusters is /api/clusters: the board as JSON.
func (h *Handler) clusters(w http.ResponseWriter, _ *http.Request) {
	b, _, err := h.snapshot(0)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// events is /events: a "board" event with the whole board at once, and
// one with what changed after each change (at most one every MinInterval:
// the changes in between come together), a comment when idle for KeepAlive, until the
// client goes away, the handler is closed, or a write takes longer than
// writeTimeout.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	if n := h.streams.Add(1); n > int64(h.o.MaxStreams) {
		h.streams.Add(-1)
		h.o.Log.Warn("status page: too many event streams, one refused", "max", h.o.MaxStreams, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("too many event streams open (%d): close other status pages", h.o.MaxStreams), http.StatusServiceUnavailable)
		return
	}
	defer h.streams.Add(-1)
	changed, cancel := h.board.Subscribe()
	defer cancel()
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not hold events back
	send := func(msg []byte) bool {
		// A deadline per write: serve's WriteTimeout would end the stream.
		if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(msg); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// version is the board's as the stream's last event told it: each
	// event after the first has only what changed since (a serve with
	// many clusters and pages open would otherwise send every cluster to
	// every page each second).
	var version uint64
	board := func() bool {
		b, v, err := h.snapshot(version)
		if err != nil {
			return false
		}
		version = v
		// JSON has no raw newline: one data line.
		return send(fmt.Appendf(nil, "event: board\ndata: %s\n\n", b))
	}
	if !send([]byte("retry: 3000\n\n")) || !board() {
		return
	}
	last := time.Now()
	idle := time.NewTimer(h.o.KeepAlive)
	defer idle.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.closed:
			return
		case <-changed:
			// Wait out MinInterval since the last event; changes meanwhile
			// are in the next snapshot.
			wait := time.NewTimer(time.Until(last.Add(h.o.MinInterval)))
			select {
			case <-r.Context().Done():
				wait.Stop()
				return
			case <-h.closed:
				wait.Stop()
				return
			case <-wait.C:
			}
			if !board() {
				return
			}
			last = time.Now()
		case <-idle.C:
			if !send([]byte(": keep-alive\n\n")) {
				return
			}
		}
		idle.Reset(h.o.KeepAlive)
	}
}
