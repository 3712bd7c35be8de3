// Package testnode runs, in the test process, what a transport talks to on
// a node: an SSH server built on x/crypto/ssh that forwards direct-tcpip
// and direct-streamlocal@openssh.com channels as OpenSSH's sshd does
// (including its error replies), a Docker engine API on a Unix socket that
// answers the calls rigger's checks make, a TCP echo server, and a proxy
// that can go silent to simulate a partition. Tests use it for the fault
// cases a real sshd cannot easily produce.
package testnode

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Options shape a Server.
type Options struct {
	// HostKeys are the server's host keys (plain or certificate signers).
	// Empty: one fresh ed25519 key.
	HostKeys []ssh.Signer
	// Users maps a user name to its authorized keys.
	Users map[string][]ssh.PublicKey
	// UserCA, when set, is trusted for user certificates whose principals
	// include the user.
	UserCA ssh.PublicKey
	// HandshakeDelay is how long the server waits after accepting a
	// connection before it speaks SSH.
	HandshakeDelay time.Duration
	// Sockets maps a socket path a client asks for to a local socket.
	// Paths not listed are refused with OpenSSH's "open failed".
	Sockets map[string]string
}

// Server is an in-process SSH server on 127.0.0.1.
type Server struct {
	Addr     string
	HostKeys []ssh.Signer

	opts Options
	ln   net.Listener
	quit chan struct{}
	wg   sync.WaitGroup

	accepted    atomic.Int64
	inHandshake atomic.Int64
	maxHS       atomic.Int64

	mu       sync.Mutex
	conns    map[net.Conn]bool
	channels map[string]int
}

// Start starts a server; it stops when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.HostKeys) == 0 {
		opts.HostKeys = []ssh.Signer{NewKey(t)}
	}
	s := &Server{Addr: ln.Addr().String(), HostKeys: opts.HostKeys, opts: opts, ln: ln,
		quit: make(chan struct{}), conns: make(map[net.Conn]bool), channels: make(map[string]int)}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.Close)
	return s
}

// Port is the server's port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Accepted is how many TCP connections the server has accepted.
func (s *Server) Accepted() int { return int(s.accepted.Load()) }

// MaxConcurrentHandshakes is the most connections that were waiting out
// HandshakeDelay at the same time: a measure of how many connections a
// client sets up at once that does not depend on when the client and the
// server each see the handshake end.
func (s *Server) MaxConcurrentHandshakes() int { return int(s.maxHS.Load()) }

// Channels is how many channels of the given type were opened
// successfully.
func (s *Server) Channels(typ string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.channels[typ]
}

// Open is how many connections are currently open.
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// DropAll closes every open connection, as a restarted sshd or a reset
// would.
func (s *Server) DropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

// Close stops the server and closes its connections.
func (s *Server) Close() {
	select {
	case <-s.quit:
		return
	default:
	}
	close(s.quit)
	s.ln.Close()
	s.DropAll()
	s.wg.Wait()
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				c.Close()
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
			s.handle(c)
		}()
	}
}

func (s *Server) config() *ssh.ServerConfig {
	checker := &ssh.CertChecker{
		IsUserAuthority: func(auth ssh.PublicKey) bool {
			return s.opts.UserCA != nil && string(auth.Marshal()) == string(s.opts.UserCA.Marshal())
		},
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if _, ok := key.(*ssh.Certificate); ok {
				return checker.Authenticate(meta, key)
			}
			for _, k := range s.opts.Users[meta.User()] {
				if string(k.Marshal()) == string(key.Marshal()) {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, fmt.Errorf("key not authorized for %s", meta.User())
		},
	}
	for _, k := range s.opts.HostKeys {
		cfg.AddHostKey(k)
	}
	return cfg
}

func (s *Server) handle(c net.Conn) {
	n := s.inHandshake.Add(1)
	for {
		m := s.maxHS.Load()
		if n <= m || s.maxHS.CompareAndSwap(m, n) {
			break
		}
	}
	if s.opts.HandshakeDelay > 0 {
		// Wait, but notice a client that gives up meanwhile: keep what it
		// sends (its version line) for the handshake.
		var err error
		c, err = delay(c, s.opts.HandshakeDelay)
		if err != nil {
			s.inHandshake.Add(-1)
			return
		}
	}
	s.inHandshake.Add(-1)
	conn, chans, reqs, err := ssh.NewServerConn(c, s.config())
	if err != nil {
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.channel(nc)
		}()
	}
}

func (s *Server) channel(nc ssh.NewChannel) {
	var upstream net.Conn
	switch nc.ChannelType() {
	case "direct-tcpip":
		var msg struct {
			Host     string
			Port     uint32
			OrigHost string
			OrigPort uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil {
			nc.Reject(ssh.ConnectionFailed, "bad request")
			return
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(msg.Host, fmt.Sprint(msg.Port)), 5*time.Second)
		if err != nil {
			// OpenSSH sends strerror(errno).
			nc.Reject(ssh.ConnectionFailed, "Connection refused")
			return
		}
		upstream = c
	case "direct-streamlocal@openssh.com":
		var msg struct {
			Path      string
			Reserved0 string
			Reserved1 uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil {
			nc.Reject(ssh.ConnectionFailed, "bad request")
			return
		}
		local, ok := s.opts.Sockets[msg.Path]
		var c net.Conn
		var err error
		if ok {
			c, err = net.Dial("unix", local)
		}
		if !ok || err != nil {
			// OpenSSH says only this, whether the socket is missing or
			// the user may not open it.
			nc.Reject(ssh.ConnectionFailed, "open failed")
			return
		}
		upstream = c
	default:
		nc.Reject(ssh.UnknownChannelType, "unknown channel type")
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		upstream.Close()
		return
	}
	s.mu.Lock()
	s.channels[nc.ChannelType()]++
	s.mu.Unlock()
	go ssh.DiscardRequests(reqs)
	Pipe(ch, upstream)
}

// delay reads from c for d and returns a conn that replays what was read,
// or an error if the client hung up.
func delay(c net.Conn, d time.Duration) (net.Conn, error) {
	c.SetReadDeadline(time.Now().Add(d))
	var got []byte
	buf := make([]byte, 1024)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	c.SetReadDeadline(time.Time{})
	return &replayConn{Conn: c, prefix: got}, nil
}

type replayConn struct {
	net.Conn
	prefix []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Pipe copies both ways between a and b until both directions end, passing
// half-closes on, then closes both.
func Pipe(a, b io.ReadWriteCloser) {
	var wg sync.WaitGroup
	cp := func(dst, src io.ReadWriteCloser) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// NewKey returns a fresh ed25519 signer.
func NewKey(t testing.TB) ssh.Signer {
	t.Helper()
	s, _ := NewKeyPEM(t, nil)
	return s
}

// NewKeyPEM returns a fresh ed25519 signer and its private key in
// OpenSSH PEM form, encrypted when passphrase is not nil.
func NewKeyPEM(t testing.TB, passphrase []byte) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase != nil {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", passphrase)
	} else {
		block, err = ssh.MarshalPrivateKey(priv, "")
	}
	if err != nil {
		t.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

// Certify signs a certificate for key with ca.
func Certify(t testing.TB, ca ssh.Signer, key ssh.PublicKey, typ uint32, principals []string, validFor time.Duration) *ssh.Certificate {
	t.Helper()
	cert := &ssh.Certificate{
		Key:             key,
		Serial:          1,
		CertType:        typ,
		KeyId:           "rigger-test",
		ValidPrincipals: principals,
		ValidAfter:      uint64(time.Now().Add(-time.Minute).Unix()),
		ValidBefore:     uint64(time.Now().Add(validFor).Unix()),
	}
	if validFor == 0 {
		cert.ValidBefore = ssh.CertTimeInfinity
	}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return cert
}

// StartEcho starts a TCP server on 127.0.0.1 that writes back what it
// reads, and returns its address.
func StartEcho(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
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
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// ClosedAddr returns a 127.0.0.1 address nothing listens on.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
