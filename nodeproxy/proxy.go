// Package nodeproxy is the local TCP load balancer that runs as the
// nginx-proxy container on nodes without the controlplane role: it listens
// on the node (RKE: port 6443 on every address) and forwards each
// connection to one of the API servers, as the nginx stream configuration
// of rancher/rke-tools does.
//
// Upstreams are tried from a round-robin position, each with a short dial
// timeout, falling over to the next one on failure. An upstream that could
// not be dialed is skipped by later connections for a while (a passive
// health mark, like nginx's max_fails/fail_timeout), unless no other
// upstream is left. The bytes are spliced both ways with half-close kept:
// a client that closes its write side still reads the server's answer.
package nodeproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rigger/rigger/internal/ctxwait"
)

// Defaults of Config.
const (
	// DefaultDialTimeout is nginx-proxy's proxy_connect_timeout in RKE.
	DefaultDialTimeout = 2 * time.Second
	// DefaultFailTimeout is how long an upstream that failed a dial is
	// skipped (nginx's fail_timeout is 10s; API servers restart faster).
	DefaultFailTimeout = 5 * time.Second
	// DefaultShutdownGrace is how long Serve waits for open connections
	// after its context ends before it closes them: within the 10 seconds
	// Docker gives a container to stop.
	DefaultShutdownGrace = 8 * time.Second
)

// acceptBackoff is the pause after a temporary accept error (out of file
// descriptors), so that the loop does not spin.
const acceptBackoff = 50 * time.Millisecond

// Dialer opens a connection to an upstream. net.Dialer.DialContext is one.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Config is what a Proxy forwards to and how.
type Config struct {
	// Upstreams are host:port addresses, tried in this order from a
	// round-robin position. At least one.
	Upstreams []string
	// DialTimeout bounds each dial of an upstream. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// FailTimeout is how long an upstream is skipped after a failed dial.
	// Default DefaultFailTimeout.
	FailTimeout time.Duration
	// ShutdownGrace is how long Serve lets open connections finish after
	// its context ends. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Dial opens upstream connections. Default: a net.Dialer.
	Dial Dialer
	// Logger receives upstream failures and recoveries, never one line per
	// connection. Default: discard.
	Logger *slog.Logger
}

// Proxy forwards TCP connections to a set of upstreams.
type Proxy struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time // a seam for tests of the health mark
	next atomic.Uint64    // round-robin position
	// allDown is set while no upstream answers, so that the refused
	// connections are logged once, not one by one.
	allDown atomic.Bool

	mu        sync.Mutex
	downUntil []time.Time // per upstream: skipped until then
}

// New checks cfg, fills its defaults and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("no upstreams: give at least one host:port")
	}
	for _, u := range cfg.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return nil, fmt.Errorf("upstream %q: %w", u, err)
		}
	}
	cfg.Upstreams = append([]string(nil), cfg.Upstreams...)
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.FailTimeout <= 0 {
		cfg.FailTimeout = DefaultFailTimeout
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxy{
		cfg:       cfg,
		log:       log.With("component", "nginx-proxy"),
		now:       time.Now,
		downUntil: make([]time.Time, len(cfg.Upstreams)),
	}, nil
}

// Serve accepts connections on ln and forwards them until ctx ends. Then it
// closes ln, waits up to ShutdownGrace for open connections to finish,
// closes those still open and returns nil. It returns an error only when
// accepting fails for another reason; ln is closed in every case.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{} // open client connections
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
	}
	untrack := func(c net.Conn) {
		mu.Lock()
		delete(conns, c)
		mu.Unlock()
	}

	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var acceptErr error
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if isTemporary(err) {
				p.log.Warn("accept failed, retrying", "err", err)
				if ctxwait.Sleep(ctx, acceptBackoff) != nil {
					break
				}
				continue
			}
			acceptErr = fmt.Errorf("accept: %w", err)
			break
		}
		track(c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer untrack(c)
			p.handle(ctx, c)
		}()
	}
	ln.Close()

	// Stop taking new connections, let the open ones finish for a while.
	mu.Lock()
	n := len(conns)
	mu.Unlock()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if n > 0 {
		p.log.Info("stopping, waiting for open connections", "connections", n, "grace", p.cfg.ShutdownGrace)
	}
	grace := time.NewTimer(p.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		mu.Lock()
		p.log.Warn("grace period over, closing open connections", "connections", len(conns))
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		<-done
	}
	return acceptErr
}

// isTemporary reports accept errors worth retrying, such as running out
// of file descriptors: the listener itself is fine.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// handle forwards one client connection and closes it.
func (p *Proxy) handle(ctx context.Context, client net.Conn) {
	up, err := p.dial(ctx)
	if err != nil {
		if ctx.Err() == nil && p.allDown.CompareAndSwap(false, true) {
			p.log.Error("no upstream reachable, closing connections until one answers", "err", err)
		}
		client.Close()
		return
	}
	p.allDown.Store(false)
	// The upstream connection is closed with the client's: Serve closes
	// the client connection when the grace period is over.
	splice(client, up)
}

// dial connects to an upstream: those not marked down first, from the
// round-robin position, then the marked ones, so that a connection is
// refused only when no upstream answers at all.
func (p *Proxy) dial(ctx context.Context) (net.Conn, error) {
	n := len(p.cfg.Upstreams)
	start := int(p.next.Add(1)-1) % n
	now := p.now()
	var skipped []int
	var errs []error
	try := func(i int) net.Conn {
		addr := p.cfg.Upstreams[i]
		dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		c, err := p.cfg.Dial(dctx, "tcp", addr)
		cancel()
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() == nil {
				p.markDown(i, err)
			}
			return nil
		}
		p.markUp(i)
		return c
	}
	for k := range n {
		i := (start + k) % n
		if p.isDown(i, now) {
			skipped = append(skipped, i)
			continue
		}
		if c := try(i); c != nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	for _, i := range skipped {
		if c := try(i); c != nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, errors.Join(errs...)
}

func (p *Proxy) isDown(i int, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return now.Before(p.downUntil[i])
}

// markDown skips upstream i for FailTimeout, logging only when it was up.
func (p *Proxy) markDown(i int, err error) {
	now := p.now()
	p.mu.Lock()
	wasUp := p.downUntil[i].IsZero()
	p.downUntil[i] = now.Add(p.cfg.FailTimeout)
	p.mu.Unlock()
	if wasUp {
		p.log.Warn("upstream unreachable, skipping it", "upstream", p.cfg.Upstreams[i], "for", p.cfg.FailTimeout, "err", err)
	}
}

// markUp clears upstream i's mark, logging when it had one.
func (p *Proxy) markUp(i int) {
	p.mu.Lock()
	wasDown := !p.downUntil[i].IsZero()
	p.downUntil[i] = time.Time{}
	p.mu.Unlock()
	if wasDown {
		p.log.Info("upstream reachable again", "upstream", p.cfg.Upstreams[i])
	}
}

// splice copies both ways until both sides are done, passing on a
// half-close, then closes both connections. An error in one direction
// (a reset, or a connection closed at shutdown) ends both.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(b, a) }()
	go func() { defer wg.Done(); pipe(a, b) }()
	wg.Wait()
	a.Close()
	b.Close()
}

// pipe copies src to dst; at src's end of stream it closes dst's write side.
func pipe(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	// No half-close on this kind of connection: end both directions.
	dst.Close()
	src.Close()
}
