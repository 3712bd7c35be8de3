package sshtun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/client"
	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/transport"
)

// peer is one SSH endpoint, a node or the bastion, and its one connection.
// The connection is made on first use; concurrent first uses share one
// dial. When it drops, the next use dials again, no sooner than the
// backoff after a failed dial allows.
type peer struct {
	t      *Transport
	name   string
	host   Host
	addr   string // host:port dialed and looked up in known_hosts
	creds  *credentials
	via    *peer  // the bastion, nil when dialed directly
	socket string // docker_socket; nodes only

	dockerLock chan struct{} // serializes creating the Docker client

	mu      sync.Mutex
	conn    *sshConn  // the live connection, if any
	call    *dialCall // the dial in progress, if any
	closed  bool
	fails   int       // failed dials in a row
	lastErr error     // of the last failed dial
	retryAt time.Time // no new dial before this after a failure
	docker  *client.Client
	version types.Version // what docker's engine answered CheckDocker
}

// sshConn is one established SSH connection.
type sshConn struct {
	client *ssh.Client
	done   chan struct{} // closed when the connection has ended
}

func (c *sshConn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// dialCall is a dial in progress that callers wait for. It runs on its own
// context, which is canceled when the last caller waiting for it gives up
// or the transport closes, so one caller's cancellation does not fail the
// others.
type dialCall struct {
	done    chan struct{}
	conn    *sshConn
	err     error
	waiters int
	cancel  context.CancelFunc
	// handshaking is set once the TCP connection is made: the dial is
	// in its SSH handshake.
	handshaking atomic.Bool
}

func (t *Transport) newPeer(name string, h Host, creds *credentials, via *peer, socket string) *peer {
	return &peer{t: t, name: name, host: h, addr: h.hostPort(), creds: creds, via: via, socket: socket,
		dockerLock: make(chan struct{}, 1)}
}

func (p *peer) viaName() string {
	if p.via == nil {
		return ""
	}
	return "bastion_host " + p.via.addr
}

// connection returns the live connection, dialing one if needed.
func (p *peer) connection(ctx context.Context) (*sshConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("node %s: %w", p.name, err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("node %s: %w", p.name, transport.ErrClosed)
	}
	if p.conn != nil && p.conn.alive() {
		c := p.conn
		p.mu.Unlock()
		return c, nil
	}
	call := p.call
	if call == nil {
		if p.lastErr != nil && p.t.now().Before(p.retryAt) {
			err := p.lastErr
			p.mu.Unlock()
			return nil, err
		}
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		call = &dialCall{done: make(chan struct{}), cancel: cancel}
		if !p.t.goroutine(func() { p.run(dctx, call) }) {
			cancel()
			p.mu.Unlock()
			return nil, fmt.Errorf("node %s: %w", p.name, transport.ErrClosed)
		}
		p.call = call
	}
	call.waiters++
	p.mu.Unlock()

	waited := time.Now()
	select {
	case <-call.done:
		return call.conn, call.err
	case <-ctx.Done():
		p.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			call.cancel()
			if p.call == call {
				p.call = nil // the next caller starts afresh
			}
		}
		p.mu.Unlock()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("node %s: connect: %w", p.name, ctx.Err())
		}
		// The caller's time ran out first: where the connection got is
		// what a person needs, as when the dial's own timeouts expire.
		op := transport.OpConnect
		if call.handshaking.Load() {
			op = transport.OpHandshake
		}
		return nil, &transport.UnreachableError{Node: p.name, Addr: p.addr, Via: p.viaName(), Op: op,
			Timeout: time.Since(waited).Round(time.Millisecond), Err: ctx.Err()}
	}
}

// run dials for call and publishes the result.
func (p *peer) run(ctx context.Context, call *dialCall) {
	defer call.cancel()
	start := p.t.now()
	conn, err := p.connect(ctx, call)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.call == call {
		p.call = nil
	}
	switch {
	case err == nil && p.closed:
		conn.client.Close()
		conn, err = nil, fmt.Errorf("node %s: %w", p.name, transport.ErrClosed)
	case err == nil:
		if p.conn != nil && p.conn.alive() {
			// A dial whose callers had all given up raced a newer one.
			conn.client.Close()
			conn = p.conn
			break
		}
		if !p.watch(conn) {
			conn, err = nil, fmt.Errorf("node %s: %w", p.name, transport.ErrClosed)
			break
		}
		p.conn, p.fails, p.lastErr = conn, 0, nil
		p.t.log.Debug("ssh connected", "node", p.name, "addr", p.addr, "via", p.viaName(),
			"took", p.t.now().Sub(start).Round(time.Millisecond))
	case ctx.Err() == nil:
		p.fails++
		p.lastErr = err
		p.retryAt = p.t.now().Add(p.t.backoff.after(p.fails))
		p.t.log.Debug("ssh connect failed", "node", p.name, "addr", p.addr, "failures", p.fails, "reason", err)
	}
	call.conn, call.err = conn, err
	close(call.done)
}

// watch starts the goroutines that notice when conn ends and keep it
// alive. It returns false when the transport is closing. p.mu is held.
func (p *peer) watch(conn *sshConn) bool {
	ok := p.t.goroutine(func() {
		conn.client.Wait()
		close(conn.done)
		p.lost(conn)
	})
	if !ok {
		conn.client.Close()
		return false
	}
	p.t.goroutine(func() { p.keepalive(conn) })
	return true
}

// lost forgets a connection that has ended.
func (p *peer) lost(conn *sshConn) {
	p.mu.Lock()
	current := p.conn == conn
	if current {
		p.conn = nil
	}
	docker, closed := p.docker, p.closed
	p.mu.Unlock()
	if docker != nil {
		// Idle HTTP connections rode on the lost connection's channels.
		docker.Close()
	}
	if current && !closed {
		p.t.log.Info("ssh connection lost; the next use reconnects", "node", p.name, "addr", p.addr)
	}
}

// forget closes conn after a use showed it broken, so that the next use
// dials a new one without waiting for the connection watcher.
func (p *peer) forget(conn *sshConn) {
	p.mu.Lock()
	if p.conn == conn {
		p.conn = nil
	}
	p.mu.Unlock()
	conn.client.Close()
}

// shutdown closes the peer for good.
func (p *peer) shutdown() {
	p.mu.Lock()
	p.closed = true
	call, conn, docker := p.call, p.conn, p.docker
	p.conn, p.docker = nil, nil
	p.mu.Unlock()
	if call != nil {
		call.cancel()
	}
	if docker != nil {
		docker.Close()
	}
	if conn != nil {
		conn.client.Close()
	}
}

// keepalive probes conn every KeepaliveInterval and closes it when
// KeepaliveCountMax intervals pass without an answer: a peer that vanished
// without a TCP reset (a partition, a crashed host) is noticed in bounded
// time, not after TCP's retransmission timeout.
func (p *peer) keepalive(conn *sshConn) {
	interval := p.t.cfg.KeepaliveInterval
	if interval <= 0 {
		return
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-conn.done:
			return
		case <-ticker.C:
		}
		reply := make(chan error, 1)
		go func() {
			// OpenSSH answers unknown global requests with a failure,
			// which proves the connection alive just as well.
			_, _, err := conn.client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		timer := time.NewTimer(interval * KeepaliveCountMax)
		select {
		case err := <-reply:
			timer.Stop()
			if err != nil {
				return // the connection has ended; the watcher forgets it
			}
		case <-timer.C:
			p.t.log.Warn("ssh connection does not answer keepalives; closed it, the next use reconnects",
				"node", p.name, "addr", p.addr, "after", interval*KeepaliveCountMax)
			p.forget(conn)
			return
		case <-conn.done:
			timer.Stop()
			return
		}
	}
}

// dial opens a channel to addr on the peer. A connection found broken is
// replaced once.
func (p *peer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	for attempt := 1; ; attempt++ {
		conn, err := p.connection(ctx)
		if err != nil {
			return nil, err
		}
		var nc net.Conn
		if network == "unix" {
			nc, err = dialStreamLocal(ctx, conn.client, addr)
		} else {
			nc, err = conn.client.DialContext(ctx, network, addr)
		}
		if err == nil {
			return nc, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node %s: dial %s %s: %w", p.name, network, addr, ctx.Err())
		}
		var oce *ssh.OpenChannelError
		if errors.As(err, &oce) {
			return nil, &transport.DialError{Node: p.name, Network: network, Addr: addr, Err: err}
		}
		p.forget(conn)
		if attempt == 2 {
			return nil, fmt.Errorf("node %s: dial %s %s: connection lost: %w", p.name, network, addr, err)
		}
	}
}

// dialDocker is the Docker client's dialer: a channel to the node's
// Docker socket.
func (p *peer) dialDocker(ctx context.Context, _, _ string) (net.Conn, error) {
	conn, err := p.dial(ctx, "unix", p.socket)
	var de *transport.DialError
	if !errors.As(err, &de) {
		return conn, err
	}
	err = socketError(p.name, p.host.User, p.socket, de)
	var sockErr *transport.DockerSocketError
	if errors.As(err, &sockErr) && sockErr.Problem == transport.SocketUnavailable {
		p.diagnoseSocket(ctx, sockErr)
	}
	return nil, err
}

// diagnoseSocketTimeout bounds the SFTP look at a socket that could not
// be opened.
const diagnoseSocketTimeout = 5 * time.Second

// diagnoseSocket asks the node's SFTP server why the socket could not be
// opened, when it can.
func (p *peer) diagnoseSocket(ctx context.Context, e *transport.DockerSocketError) {
	ctx, cancel := context.WithTimeout(ctx, diagnoseSocketTimeout)
	defer cancel()
	conn, err := p.connection(ctx)
	if err != nil {
		return
	}
	st, err := statRemote(ctx, conn.client, p.socket)
	if err != nil {
		p.t.log.Debug("cannot stat the docker socket over SFTP", "node", p.name, "path", p.socket, "reason", err)
		return
	}
	refineSocketError(e, st)
	if e.Problem == transport.SocketUnavailable {
		// A socket the user may open: dockerd gone, or sshd forwarding
		// nothing. A TCP forward to sshd's own port tells the second.
		refuses, err := forwardingRefused(ctx, conn.client, p.addr)
		switch {
		case refuses:
			e.Problem = transport.SocketForwardingRefused
			e.Detail += fmt.Sprintf("; a TCP forward to sshd's own address %s was refused too (%v): sshd forwards nothing", p.addr, err)
		case err == nil:
			e.Detail += "; sshd forwards TCP"
		}
	}
}

// forwardingRefused says whether the node's sshd refuses to forward TCP,
// from a forward to addr, where it listens. OpenSSH refuses with "open
// failed"; a connection that failed says why ("Connection refused").
func forwardingRefused(ctx context.Context, c *ssh.Client, addr string) (bool, error) {
	nc, err := c.DialContext(ctx, "tcp", addr)
	if err == nil {
		nc.Close()
		return false, nil
	}
	var oce *ssh.OpenChannelError
	return errors.As(err, &oce) && (oce.Reason == ssh.Prohibited || oce.Message == "open failed"), err
}

// socketError turns a refused channel to the Docker socket into a
// *transport.DockerSocketError. OpenSSH says "open failed" whatever the
// cause; other servers may say more.
func socketError(node, user, path string, err error) error {
	var oce *ssh.OpenChannelError
	if !errors.As(err, &oce) {
		return err
	}
	e := &transport.DockerSocketError{Node: node, Path: path, User: user, Detail: oce.Message, Err: err}
	msg := strings.ToLower(oce.Message)
	switch {
	case oce.Reason == ssh.Prohibited:
		e.Problem = transport.SocketForwardingRefused
	case strings.Contains(msg, "no such file"):
		e.Problem = transport.SocketMissing
	case strings.Contains(msg, "permission denied"):
		e.Problem = transport.SocketPermissionDenied
	default:
		e.Problem = transport.SocketUnavailable
	}
	return e
}

// connect dials and logs in: TCP (or a channel through the bastion), then
// the SSH handshake, each with its own timeout. At most MaxParallelDials
// connects run at once across the transport.
func (p *peer) connect(ctx context.Context, call *dialCall) (*sshConn, error) {
	if err := p.creds.checkCertValid(p.name); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		raw, release, retry, err := p.open(ctx)
		if err != nil {
			if retry && attempt == 1 {
				continue
			}
			return nil, err
		}
		call.handshaking.Store(true)
		client, err := p.handshake(ctx, raw)
		release()
		if err != nil {
			return nil, err
		}
		return &sshConn{client: client, done: make(chan struct{})}, nil
	}
}

// open makes the byte stream the SSH connection runs on and takes a dial
// slot, which the caller releases after the handshake. retry says the
// bastion's connection broke and a second attempt may succeed.
func (p *peer) open(ctx context.Context) (raw net.Conn, release func(), retry bool, err error) {
	var bastion *sshConn
	if p.via != nil {
		// The bastion is connected first and outside the slot, which it
		// needs for itself.
		if bastion, err = p.via.connection(ctx); err != nil {
			return nil, nil, false, fmt.Errorf("node %s: reach bastion_host: %w", p.name, err)
		}
	}
	release, err = p.t.acquire(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("node %s: wait for a free dial slot (rigger.max_parallel): %w", p.name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, p.t.cfg.ConnectTimeout)
	defer cancel()
	if bastion == nil {
		var d net.Dialer
		raw, err = d.DialContext(cctx, "tcp", p.addr)
	} else {
		raw, err = bastion.client.DialContext(cctx, "tcp", p.addr)
		var oce *ssh.OpenChannelError
		if err != nil && cctx.Err() == nil && !errors.As(err, &oce) {
			p.via.forget(bastion)
			retry = true
		}
	}
	if err != nil {
		release()
		return nil, nil, retry, p.unreachable(ctx, cctx, err)
	}
	return raw, release, false, nil
}

func (p *peer) unreachable(ctx, cctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("node %s: connect: %w", p.name, ctx.Err())
	}
	e := &transport.UnreachableError{Node: p.name, Addr: p.addr, Via: p.viaName(), Op: transport.OpConnect, Err: err}
	if errors.Is(cctx.Err(), context.DeadlineExceeded) {
		e.Timeout = p.t.cfg.ConnectTimeout
	}
	return e
}

// handshake runs the SSH handshake on raw within HandshakeTimeout and
// tells apart why it failed: host key, login, or the connection itself.
func (p *peer) handshake(ctx context.Context, raw net.Conn) (*ssh.Client, error) {
	st := &handshakeState{}
	hostKey, algos, err := p.t.keys.prepare(target{node: p.name, addr: p.addr, via: p.viaName()}, st)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("node %s: %w", p.name, err)
	}
	auth, authDone, err := p.creds.authMethod(ctx, st)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("node %s: %w", p.name, err)
	}
	defer authDone()
	cfg := &ssh.ClientConfig{
		User:              p.host.User,
		Auth:              []ssh.AuthMethod{auth},
		HostKeyCallback:   hostKey,
		HostKeyAlgorithms: algos,
		ClientVersion:     "SSH-2.0-rigger",
	}

	hctx, cancel := context.WithTimeout(ctx, p.t.cfg.HandshakeTimeout)
	defer cancel()
	// x/crypto's handshake has no deadline of its own, and a channel
	// through the bastion supports no deadlines: closing the stream is
	// what stops it.
	stop := context.AfterFunc(hctx, func() { raw.Close() })
	c, chans, reqs, err := ssh.NewClientConn(raw, p.addr, cfg)
	if !stop() {
		if c != nil {
			c.Close()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node %s: ssh handshake: %w", p.name, ctx.Err())
		}
		return nil, &transport.UnreachableError{Node: p.name, Addr: p.addr, Via: p.viaName(),
			Op: transport.OpHandshake, Timeout: p.t.cfg.HandshakeTimeout, Err: context.DeadlineExceeded}
	}
	if err != nil {
		raw.Close()
		checked, keyErr, offers := st.result()
		switch {
		case keyErr != nil:
			return nil, keyErr
		case checked && !connectionLost(err):
			return nil, &AuthError{Node: p.name, Addr: p.addr, Via: p.viaName(), User: p.host.User, Offered: offers, Err: err}
		default:
			return nil, &transport.UnreachableError{Node: p.name, Addr: p.addr, Via: p.viaName(),
				Op: transport.OpHandshake, Err: err}
		}
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// connectionLost reports an error that means the stream broke, not that
// the peer refused something.
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
