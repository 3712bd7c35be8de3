// Package sshtun reaches nodes over SSH, as RKE does, and fixes what RKE
// got wrong: host keys are verified against known_hosts, every step has a
// timeout, each node has one SSH connection that carries every channel
// (the Docker API, etcd client traffic, health checks) and is kept alive
// and re-established when it drops, and no more than a set number of
// connections are set up at once.
//
// The node's Docker socket is reached with direct-streamlocal@openssh.com
// (sshd needs AllowStreamLocalForwarding yes, its default) and node-local
// TCP ports with direct-tcpip (AllowTcpForwarding yes, the default). The
// SSH user needs nothing but access to the Docker socket: sshtun never runs
// a command on a node.
//
// A *Transport implements transport.Transport; docs/ssh.md describes the
// cluster.yml settings that fill its Config.
package sshtun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/client"

	"github.com/rigger/rigger/transport"
)

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.EngineVersions = (*Transport)(nil)
)

// Transport reaches the nodes of a Config over SSH. It is safe for
// concurrent use; connections are made on first use, not by New.
type Transport struct {
	cfg     Config
	log     *slog.Logger
	keys    *hostKeys
	nodes   map[string]*peer
	bastion *peer
	slots   chan struct{} // MaxParallelDials tokens
	now     func() time.Time
	backoff backoff

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // dials, keepalives and connection watchers
}

// New checks cfg, reads every key and certificate it names, and returns a
// transport that connects to a node when it is first used. All problems
// with cfg are reported at once, each prefixed by its node; nothing is
// dialed.
func New(cfg Config) (*Transport, error) {
	return newTransport(cfg, time.Now)
}

func newTransport(cfg Config, now func() time.Time) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("ssh transport: %w", err)
	}
	keys, err := newHostKeys(cfg.KnownHostsFiles, cfg.HostKeyPolicy, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("ssh transport: %w", err)
	}
	t := &Transport{
		cfg:     cfg,
		log:     cfg.Logger,
		keys:    keys,
		nodes:   make(map[string]*peer, len(cfg.Nodes)),
		slots:   make(chan struct{}, cfg.MaxParallelDials),
		now:     now,
		backoff: backoff{base: BackoffBase, max: BackoffMax},
	}
	var errs []error
	if cfg.Bastion != nil {
		const name = "bastion_host"
		creds, err := newCredentials(name, *cfg.Bastion, cfg.AgentSocket, now)
		if err != nil {
			errs = append(errs, err)
		}
		t.bastion = t.newPeer(name, *cfg.Bastion, creds, nil, "")
	}
	for _, n := range cfg.Nodes {
		creds, err := newCredentials(n.Name, n.Host, cfg.AgentSocket, now)
		if err != nil {
			errs = append(errs, err)
		}
		t.nodes[n.Name] = t.newPeer(n.Name, n.Host, creds, t.bastion, n.DockerSocket)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ssh transport: %w", err)
	}
	if cfg.HostKeyPolicy == HostKeyPolicyOff {
		t.log.Warn("SSH host keys are not checked (rigger.ssh.host_key_policy: off): anyone on the network path can impersonate a node")
	}
	return t, nil
}

// Docker returns the node's Docker client; see transport.Transport.
func (t *Transport) Docker(ctx context.Context, node string) (*client.Client, error) {
	p, err := t.peer(node)
	if err != nil {
		return nil, err
	}
	select {
	case p.dockerLock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.dockerLock }()

	p.mu.Lock()
	cli := p.docker
	p.mu.Unlock()
	if cli != nil {
		return cli, nil
	}
	// Connected first, within the connection's own timeouts (the
	// handshake's is longer than the engine's answer may take), so that
	// a node that does not complete its SSH handshake is said to, not a
	// Docker engine that does not answer.
	if _, err := p.connection(ctx); err != nil {
		return nil, err
	}
	cli, err = transport.NewDockerClient(node, p.socket, p.dialDocker, t.cfg.Answers)
	if err != nil {
		return nil, err
	}
	v, err := transport.CheckDocker(ctx, node, cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		cli.Close()
		return nil, fmt.Errorf("node %s: %w", node, transport.ErrClosed)
	}
	p.docker, p.version = cli, v
	return cli, nil
}

// EngineVersion is what node's engine answered when its Docker client was
// made; see transport.EngineVersions. The transport lives for one command
// or reconcile, so it is the version of the engine it talks to.
func (t *Transport) EngineVersion(node string) (types.Version, bool) {
	p, err := t.peer(node)
	if err != nil {
		return types.Version{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version, p.docker != nil
}

// Dial connects to addr as seen from the node; see transport.Transport.
func (t *Transport) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	p, err := t.peer(node)
	if err != nil {
		return nil, err
	}
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
	default:
		return nil, fmt.Errorf("node %s: dial %s %s: network not supported over SSH", node, network, addr)
	}
	return p.dial(ctx, network, addr)
}

// Close closes every connection and waits for the transport's goroutines
// to end.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	for _, p := range t.nodes {
		p.shutdown()
	}
	if t.bastion != nil {
		t.bastion.shutdown()
	}
	t.wg.Wait()
	return nil
}

func (t *Transport) peer(node string) (*peer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("node %s: %w", node, transport.ErrClosed)
	}
	p, ok := t.nodes[node]
	if !ok {
		return nil, fmt.Errorf("node %s: %w", node, transport.ErrUnknownNode)
	}
	return p, nil
}

// goroutine runs f tracked by the transport, unless it is closed.
func (t *Transport) goroutine(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// acquire takes one of the MaxParallelDials slots.
func (t *Transport) acquire(ctx context.Context) (release func(), err error) {
	select {
	case t.slots <- struct{}{}:
		return func() { <-t.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// backoff spaces out reconnection attempts to a peer whose last dial failed.
type backoff struct {
	base, max time.Duration
}

// Reconnection backoff: the wait after the first failed dial, doubling
// with each failure in a row up to the maximum. Within it, uses of the
// node fail at once with the last error instead of dialing again.
const (
	BackoffBase = 500 * time.Millisecond
	BackoffMax  = 30 * time.Second
)

// after returns the wait after the given number of failures in a row.
func (b backoff) after(failures int) time.Duration {
	d := b.base
	for i := 1; i < failures && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

// handshakeState records what happened during one SSH handshake, so that a
// failure can be told apart: host key refused, login refused, or neither.
type handshakeState struct {
	mu         sync.Mutex
	keyChecked bool
	keyErr     error
	offers     []string
}

func (s *handshakeState) hostKeyDone(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keyChecked, s.keyErr = true, err
}

func (s *handshakeState) offered(labels []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offers = labels
}

func (s *handshakeState) result() (checked bool, keyErr error, offers []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keyChecked, s.keyErr, s.offers
}
