// Package simnode runs simulated nodes in the test process, for measuring
// how rigger's cost grows with the number of nodes (issue 38) on a machine
// that cannot run a thousand real ones.
//
// What is simulated, and what is real:
//
//   - Each node is an x/crypto/ssh server on its own loopback address
//     (127.0.x.y, all of 127.0.0.0/8 being loopback on Linux) and a fixed
//     port, with its own ed25519 host key. KnownHosts gives the lines of a
//     known_hosts file for all of them, so that rigger's host-key check
//     runs as on a real cluster. It accepts one user key (public-key
//     authentication only) and refuses every other.
//   - It answers direct-streamlocal@openssh.com for the Docker socket's
//     path, as OpenSSH's sshd does, by serving an in-process Docker Engine
//     API (Engine) on that channel; any other socket path is refused with
//     OpenSSH's "open failed".
//   - It answers direct-tcpip to the node's loopback (or its address) for
//     the ports of the kubelet's health (10248 /healthz) and kube-proxy's
//     (10256 /healthz, 10249 /metrics with the Services' rules programmed
//     at the container's start), as those components do, and only while
//     the Engine runs a container of that name: a stopped kubelet does
//     not answer, and a connection to it closes when it stops. Every
//     other port (etcd, the API server, the controller manager's and the
//     scheduler's) is refused with "Connection refused": nothing
//     simulates them.
//   - The Engine keeps containers, images and the host's files in memory.
//     It runs nothing: a container's state is what its calls made it.
//
// Real: everything on the other side of the SSH connection, that is
// rigger's transport, Docker client, observe and plan code, and the
// loopback TCP stack. The simulated end costs CPU and memory in the
// process that runs it: the benchmarks (BenchmarkScaleSimulated here,
// BenchmarkServeSimulated in gitops) run the nodes in a child
// process (StartProcess, Serve), so that the heap they measure is
// rigger's alone. Plan and Apply are the nodes' part of rigger's plan and
// apply that they run; Converge gives a node what a plan expects.
package simnode

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// DefaultPort is the SSH port of the simulated nodes: a fixed high port,
// so that neither root nor a free port 22 is needed (cluster.yml's port:
// says it to rigger).
const DefaultPort = 22022

// DefaultDockerSocket is the socket path the nodes answer for, rigger's
// default docker_socket.
const DefaultDockerSocket = "/var/run/docker.sock"

// Options shape a Cluster.
type Options struct {
	// Nodes is how many nodes to start.
	Nodes int
	// Port is every node's SSH port (0: DefaultPort).
	Port int
	// User is the only user accepted.
	User string
	// AuthorizedKey is the only key accepted for User.
	AuthorizedKey ssh.PublicKey
	// DockerSocket is the socket path forwarded to the Engine
	// ("": DefaultDockerSocket).
	DockerSocket string
}

// Cluster is a set of running simulated nodes.
type Cluster struct {
	Nodes []*Node
}

// Node is one simulated node: an SSH server and its Docker engine.
type Node struct {
	// Address is the node's loopback IP, as cluster.yml's address.
	Address string
	// Port is its SSH port.
	Port int
	// HostKey is its SSH host key.
	HostKey ssh.PublicKey
	// Engine is its Docker engine.
	Engine *Engine

	cfg    *ssh.ServerConfig
	socket string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// Address returns the loopback address of node i (from 0): 127.0.x.y with
// x from 1 and y from 1 to 250, so never 127.0.0.1.
func Address(i int) string {
	return fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
}

// Start starts opts.Nodes nodes. On error, the nodes started are closed.
// Each node needs a listening socket, and each connection to it two file
// descriptors in this process (its two ends): see RaiseFileLimit.
func Start(opts Options) (*Cluster, error) {
	if opts.AuthorizedKey == nil || opts.User == "" {
		return nil, errors.New("start simulated nodes: a user and an authorized key are needed")
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	if opts.DockerSocket == "" {
		opts.DockerSocket = DefaultDockerSocket
	}
	c := &Cluster{Nodes: make([]*Node, 0, opts.Nodes)}
	for i := range opts.Nodes {
		n, err := startNode(Address(i), opts)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("start simulated node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

// Connections is how many SSH connections the nodes hold open.
func (c *Cluster) Connections() int {
	total := 0
	for _, n := range c.Nodes {
		n.mu.Lock()
		total += len(n.conns)
		n.mu.Unlock()
	}
	return total
}

// KnownHosts is the content of a known_hosts file that lists every node's
// host key, as ssh-keyscan would write it.
func (c *Cluster) KnownHosts() []byte {
	var b strings.Builder
	for _, n := range c.Nodes {
		b.WriteString(knownhosts.Line([]string{net.JoinHostPort(n.Address, strconv.Itoa(n.Port))}, n.HostKey))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// Close stops every node and closes its connections.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}

func startNode(addr string, opts Options) (*Node, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, err
	}
	want := string(opts.AuthorizedKey.Marshal())
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if meta.User() != opts.User || string(key.Marshal()) != want {
				return nil, fmt.Errorf("key not authorized for %s", meta.User())
			}
			return &ssh.Permissions{}, nil
		},
	}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(opts.Port)))
	if err != nil {
		return nil, err
	}
	n := &Node{Address: addr, Port: opts.Port, HostKey: signer.PublicKey(), Engine: NewEngine(),
		cfg: cfg, socket: opts.DockerSocket, ln: ln, conns: map[net.Conn]bool{}}
	n.wg.Add(1)
	go n.serve()
	return n, nil
}

// Close stops the node's SSH server and its engine's API, and closes
// their connections.
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.ln.Close()
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
	n.Engine.Close()
}

func (n *Node) serve() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			c.Close()
			return
		}
		n.conns[c] = true
		n.wg.Add(1)
		n.mu.Unlock()
		go func() {
			defer n.wg.Done()
			n.handle(c)
			c.Close()
			n.mu.Lock()
			delete(n.conns, c)
			n.mu.Unlock()
		}()
	}
}

// copyBuffer is the size of the buffers that copy between a channel and
// the engine's end of its pipe.
const copyBuffer = 4 << 10

// handshakeTimeout bounds a client's SSH handshake.
const handshakeTimeout = 30 * time.Second

func (n *Node) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(c, n.cfg)
	if err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	defer conn.Close()
	// keepalive@openssh.com and the like: answered "no", as sshd answers
	// requests it does not know.
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		n.channel(nc)
	}
}

// channel answers one channel request as OpenSSH's sshd would on a node
// where only the Docker socket and the ports of localPorts are there to
// reach.
func (n *Node) channel(nc ssh.NewChannel) {
	switch nc.ChannelType() {
	case "direct-streamlocal@openssh.com":
		var msg struct {
			Path      string
			Reserved0 string
			Reserved1 uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, "bad request")
			return
		}
		if msg.Path != n.socket {
			_ = nc.Reject(ssh.ConnectionFailed, "open failed")
			return
		}
		ch, reqs, err := nc.Accept()
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		// The HTTP server needs read deadlines (it aborts its background
		// read with one after each request), which a channel has not: it
		// gets one end of a pipe, copied to and from the channel.
		srvEnd, chEnd := net.Pipe()
		if !n.Engine.serveConn(srvEnd) {
			ch.Close()
			chEnd.Close()
			return
		}
		// Small buffers: a node keeps its idle channels open, and 32 KiB
		// each way (io.Copy's) made most of a thousand nodes' memory.
		go func() {
			_, _ = io.CopyBuffer(chEnd, ch, make([]byte, copyBuffer))
			chEnd.Close()
		}()
		go func() {
			_, _ = io.CopyBuffer(ch, chEnd, make([]byte, copyBuffer))
			ch.Close()
		}()
	case "direct-tcpip":
		n.localTCP(nc)
	default:
		_ = nc.Reject(ssh.UnknownChannelType, "unknown channel type")
	}
}

// connListener is a net.Listener fed with connections by serveConn.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func newConnListener() *connListener {
	return &connListener{conns: make(chan net.Conn), done: make(chan struct{}),
		addr: &net.UnixAddr{Name: DefaultDockerSocket, Net: "unix"}}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// put hands c to the listener's Accept; false when it is closed.
func (l *connListener) put(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

var _ net.Listener = (*connListener)(nil)
