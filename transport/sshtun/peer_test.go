package sshtun

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/internal/testnode"
)

func TestUnreachable(t *testing.T) {
	n := startNode(t, nodeOptions{})
	cfg := n.config()
	cfg.Nodes[0].Port = port(testnode.ClosedAddr(t))
	_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
	var unreachable *transport.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Op != transport.OpConnect || unreachable.Node != "n1" {
		t.Fatalf("Dial: %v (%T), want *transport.UnreachableError at connect for n1", err, err)
	}
	if !strings.Contains(err.Error(), "check the node's address and port") {
		t.Errorf("error %q does not say what to check", err)
	}
}

func TestSlowHandshakeTimesOut(t *testing.T) {
	n := startNode(t, nodeOptions{server: testnode.Options{HandshakeDelay: 10 * time.Second}})
	cfg := n.config()
	cfg.HandshakeTimeout = 200 * time.Millisecond
	start := time.Now()
	_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
	took := time.Since(start)
	var unreachable *transport.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Op != transport.OpHandshake || unreachable.Timeout != 200*time.Millisecond {
		t.Fatalf("Dial: %v, want *transport.UnreachableError for a handshake timeout of 200ms", err)
	}
	if took > 3*time.Second {
		t.Errorf("Dial took %s with a 200ms handshake timeout", took)
	}
	if !strings.Contains(err.Error(), "rigger.ssh.connect_timeout") {
		t.Errorf("error %q does not name the setting", err)
	}
}

// TestDockerDuringHandshake: a caller whose time runs out while the node
// has not completed its SSH handshake is told so (a *transport.UnreachableError
// at the handshake), not that the Docker engine did not answer: rigger
// doctor places the error by its type.
func TestDockerDuringHandshake(t *testing.T) {
	n := startNode(t, nodeOptions{server: testnode.Options{HandshakeDelay: time.Minute}})
	tr := newT(t, n.config())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := tr.Docker(ctx, "n1")
	var unreachable *transport.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Op != transport.OpHandshake || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Docker: %v (%T), want a *transport.UnreachableError at the handshake", err, err)
	}
	if !strings.Contains(err.Error(), "did not complete the SSH handshake") {
		t.Errorf("error %q does not say the handshake did not complete", err)
	}
}

func TestCancelDuringHandshake(t *testing.T) {
	n := startNode(t, nodeOptions{server: testnode.Options{HandshakeDelay: 10 * time.Second}})
	tr := newT(t, n.config())
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tr.Dial(ctx, "n1", "tcp", n.echo)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Dial returned %s after its context ended", took)
	}
	// Nobody waits for the dial any more: it is abandoned at once, not
	// left to run into the handshake timeout (5s here).
	testwait.For(t, time.Second, "the abandoned connection to close", func() bool { return n.server.Open() == 0 })
}

func TestConcurrentFirstUseDialsOnce(t *testing.T) {
	n := startNode(t, nodeOptions{server: testnode.Options{HandshakeDelay: 100 * time.Millisecond}})
	tr := newT(t, n.config())
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			roundTrip(t, tr, "n1", n.echo)
		}()
	}
	wg.Wait()
	if got := n.server.Accepted(); got != 1 {
		t.Errorf("server accepted %d connections for 20 concurrent first uses, want 1", got)
	}
	if got := n.server.Channels("direct-tcpip"); got != 20 {
		t.Errorf("server opened %d channels, want 20", got)
	}
}

// A waiter that gives up does not fail the others sharing its dial.
func TestOneCancelDoesNotFailSharedDial(t *testing.T) {
	n := startNode(t, nodeOptions{server: testnode.Options{HandshakeDelay: time.Second}})
	tr := newT(t, n.config())
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := tr.Dial(ctx, "n1", "tcp", n.echo)
		first <- err
	}()
	testwait.For(t, 10*time.Second, "the first dial to start", func() bool { return n.server.Accepted() == 1 })
	second := make(chan error, 1)
	go func() {
		conn, err := tr.Dial(testCtx(t), "n1", "tcp", n.echo)
		if err == nil {
			conn.Close()
		}
		second <- err
	}()
	p := tr.nodes["n1"]
	testwait.For(t, 10*time.Second, "the second caller to join the dial", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.call != nil && p.call.waiters == 2
	})
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("first Dial: %v, want context.Canceled", err)
	}
	if err := <-second; err != nil {
		t.Errorf("second Dial failed with the first one's cancellation: %v", err)
	}
	if got := n.server.Accepted(); got != 1 {
		t.Errorf("server accepted %d connections, want 1 shared", got)
	}
}

func TestReconnectAfterDrop(t *testing.T) {
	n := startNode(t, nodeOptions{})
	tr := newT(t, n.config())
	cli, err := tr.Docker(testCtx(t), "n1")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, tr, "n1", n.echo)
	n.server.DropAll()
	// The very next use reconnects: no error surfaces to the caller.
	roundTrip(t, tr, "n1", n.echo)
	if _, err := cli.Ping(testCtx(t)); err != nil {
		t.Errorf("Ping through the Docker client after a reconnect: %v", err)
	}
	if got := n.server.Accepted(); got != 2 {
		t.Errorf("server accepted %d connections, want 2 (one reconnect)", got)
	}
}

func TestKeepaliveDetectsSilentPeer(t *testing.T) {
	n := startNode(t, nodeOptions{})
	proxy := testnode.StartProxy(t, n.server.Addr)
	cfg := n.config()
	cfg.Nodes[0].Port = port(proxy.Addr)
	// known_hosts names the server's address; the proxy has another port.
	writeFile(t, n.knownHosts, []byte("[127.0.0.1]:"+itoa(port(proxy.Addr))+" "+string(ssh.MarshalAuthorizedKey(n.server.HostKeys[0].PublicKey()))))
	cfg.KeepaliveInterval = 50 * time.Millisecond
	var logs logBuffer
	cfg.Logger = logs.logger()
	tr := newT(t, cfg)
	roundTrip(t, tr, "n1", n.echo)

	proxy.Silence() // no reset, no FIN: only keepalives can tell
	start := time.Now()
	roundTrip(t, tr, "n1", n.echo)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("recovering from a silent connection took %s", took)
	}
	if got := n.server.Accepted(); got != 2 {
		t.Errorf("server accepted %d connections, want 2", got)
	}
	if !strings.Contains(logs.String(), "does not answer keepalives") {
		t.Errorf("the dead connection was not logged:\n%s", logs.String())
	}
}

func TestBackoffAfterFailedDial(t *testing.T) {
	// A listener that accepts and hangs up at once: every dial fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	n := startNode(t, nodeOptions{})
	cfg := n.config()
	cfg.Nodes[0].Port = port(ln.Addr().String())
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	tr, err := newTransport(cfg, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	dial := func() error {
		_, err := tr.Dial(testCtx(t), "n1", "tcp", n.echo)
		return err
	}
	first := dial()
	var unreachable *transport.UnreachableError
	if !errors.As(first, &unreachable) || unreachable.Op != transport.OpHandshake {
		t.Fatalf("first Dial: %v, want *transport.UnreachableError at handshake", first)
	}
	if err := dial(); err == nil || err.Error() != first.Error() || accepted.Load() != 1 {
		t.Fatalf("Dial within the backoff: %v after %d connections, want the last error and no new connection", err, accepted.Load())
	}
	advance(tr.backoff.after(1))
	if err := dial(); err == nil || accepted.Load() != 2 {
		t.Fatalf("Dial after the backoff: %v after %d connections, want a new attempt", err, accepted.Load())
	}
	// The second failure in a row waits longer.
	advance(tr.backoff.after(1))
	if dial(); accepted.Load() != 2 {
		t.Errorf("Dial retried after %s following 2 failures, want %s", tr.backoff.after(1), tr.backoff.after(2))
	}
	advance(tr.backoff.after(2))
	if dial(); accepted.Load() != 3 {
		t.Errorf("Dial after the second backoff did not retry")
	}
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := backoff{base: time.Second, max: 10 * time.Second}
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		if got := b.after(failures); got != want {
			t.Errorf("after(%d) = %s, want %s", failures, got, want)
		}
	}
}

func TestMaxParallelDials(t *testing.T) {
	for _, limit := range []int{2, 10} {
		t.Run(itoa(limit), func(t *testing.T) {
			n := startNode(t, nodeOptions{server: testnode.Options{HandshakeDelay: 300 * time.Millisecond}})
			cfg := n.config()
			cfg.MaxParallelDials = limit
			cfg.Nodes = nil
			const nodes = 5
			for i := range nodes {
				cfg.Nodes = append(cfg.Nodes, Node{Name: "n" + itoa(i), Host: n.host()})
			}
			tr := newT(t, cfg)
			var wg sync.WaitGroup
			for i := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					roundTrip(t, tr, "n"+itoa(i), n.echo)
				}()
			}
			wg.Wait()
			if got, want := n.server.MaxConcurrentHandshakes(), min(limit, nodes); got != want {
				t.Errorf("at most %d handshakes ran at once with max_parallel %d, want %d", got, limit, want)
			}
			if got := n.server.Accepted(); got != nodes {
				t.Errorf("server accepted %d connections, want %d", got, nodes)
			}
		})
	}
}

func TestDockerSocketMissing(t *testing.T) {
	n := startNode(t, nodeOptions{})
	cfg := n.config()
	cfg.Nodes[0].DockerSocket = "/run/nope/docker.sock"
	_, err := newT(t, cfg).Docker(testCtx(t), "n1")
	var sock *transport.DockerSocketError
	if !errors.As(err, &sock) {
		t.Fatalf("Docker: %v (%T), want *transport.DockerSocketError", err, err)
	}
	// OpenSSH does not say why; neither does testnode, which copies it.
	if sock.Problem != transport.SocketUnavailable || sock.Path != "/run/nope/docker.sock" || sock.User != testUser {
		t.Errorf("error = %+v", sock)
	}
	for _, want := range []string{"/run/nope/docker.sock", "usermod -aG docker " + testUser, "dockerd is not running"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestSocketErrorProblems(t *testing.T) {
	tests := []struct {
		reason  ssh.RejectionReason
		message string
		want    transport.SocketProblem
	}{
		{ssh.ConnectionFailed, "open failed", transport.SocketUnavailable},
		{ssh.ConnectionFailed, "connect: No such file or directory", transport.SocketMissing},
		{ssh.ConnectionFailed, "connect: Permission denied", transport.SocketPermissionDenied},
		{ssh.Prohibited, "administratively prohibited", transport.SocketForwardingRefused},
	}
	for _, tt := range tests {
		err := socketError("n1", "rke", "/var/run/docker.sock", &transport.DialError{Err: &ssh.OpenChannelError{Reason: tt.reason, Message: tt.message}})
		var sock *transport.DockerSocketError
		if !errors.As(err, &sock) || sock.Problem != tt.want {
			t.Errorf("socketError(%v, %q) = %v, want problem %d", tt.reason, tt.message, err, tt.want)
		}
	}
}

func TestDockerTooOld(t *testing.T) {
	n := startNode(t, nodeOptions{apiVersion: "1.40"})
	_, err := newT(t, n.config()).Docker(testCtx(t), "n1")
	var old *transport.DockerVersionError
	if !errors.As(err, &old) {
		t.Fatalf("Docker: %v, want *transport.DockerVersionError", err)
	}
	if old.APIVersion != "1.40" || old.EngineVersion != "20.10.24-testnode" || old.MinAPIVersion != transport.MinDockerAPIVersion {
		t.Errorf("error = %+v", old)
	}
	if !strings.Contains(err.Error(), "upgrade Docker") {
		t.Errorf("error %q does not say what to do", err)
	}
}

func TestDockerNegotiatesDown(t *testing.T) {
	n := startNode(t, nodeOptions{apiVersion: "1.43"})
	cli, err := newT(t, n.config()).Docker(testCtx(t), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if cli.ClientVersion() != "1.43" {
		t.Errorf("client speaks API %s to an engine at 1.43", cli.ClientVersion())
	}
}

func TestBastion(t *testing.T) {
	jumpKey, jumpPEM := testnode.NewKeyPEM(t, nil)
	bastion := testnode.Start(t, testnode.Options{Users: map[string][]ssh.PublicKey{"jump": {jumpKey.PublicKey()}}})
	n1 := startNode(t, nodeOptions{})
	n2 := startNode(t, nodeOptions{})
	// One known_hosts for all three hosts.
	known := n1.knownHosts
	appendKnown(t, known, n2.server)
	appendKnown(t, known, bastion)

	h2 := n2.host()
	h2.KeyPath = n2.keyPath
	cfg := Config{
		Nodes:           []Node{{Name: "n1", Host: n1.host()}, {Name: "n2", Host: h2}},
		Bastion:         &Host{Address: "127.0.0.1", Port: bastion.Port(), User: "jump", Key: jumpPEM},
		KnownHostsFiles: []string{known},
	}
	tr := newT(t, cfg)

	var wg sync.WaitGroup
	for range 5 {
		for _, n := range []struct {
			name string
			node *node
		}{{"n1", n1}, {"n2", n2}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				roundTrip(t, tr, n.name, n.node.echo)
				cli, err := tr.Docker(testCtx(t), n.name)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := cli.Ping(testCtx(t)); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if got := bastion.Accepted(); got != 1 {
		t.Errorf("bastion accepted %d connections, want 1 shared by both nodes", got)
	}
	if got := bastion.Channels("direct-tcpip"); got != 2 {
		t.Errorf("bastion forwarded %d channels, want 2: one SSH connection per node", got)
	}
	if a, b := n1.server.Accepted(), n2.server.Accepted(); a != 1 || b != 1 {
		t.Errorf("nodes accepted %d and %d connections, want 1 each, through the bastion", a, b)
	}

	// The bastion drops: both nodes come back through a new one.
	bastion.DropAll()
	roundTrip(t, tr, "n1", n1.echo)
	roundTrip(t, tr, "n2", n2.echo)
	if got := bastion.Accepted(); got != 2 {
		t.Errorf("after a drop the bastion accepted %d connections in all, want 2", got)
	}
}

func TestBastionErrorsNameTheBastion(t *testing.T) {
	bastion := testnode.Start(t, testnode.Options{Users: map[string][]ssh.PublicKey{}})
	n := startNode(t, nodeOptions{})
	appendKnown(t, n.knownHosts, bastion)
	cfg := n.config()
	cfg.Bastion = &Host{Address: "127.0.0.1", Port: bastion.Port(), User: "jump", KeyPath: n.keyPath}
	_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
	var auth *AuthError
	if !errors.As(err, &auth) || auth.Node != "bastion_host" || auth.User != "jump" {
		t.Fatalf("Dial: %v, want the bastion's *AuthError", err)
	}
	if !strings.HasPrefix(err.Error(), "node n1: reach bastion_host: ") {
		t.Errorf("error %q does not say which node needed the bastion", err)
	}

	// A node the bastion cannot reach.
	jumpKey, jumpPEM := testnode.NewKeyPEM(t, nil)
	bastion2 := testnode.Start(t, testnode.Options{Users: map[string][]ssh.PublicKey{"jump": {jumpKey.PublicKey()}}})
	appendKnown(t, n.knownHosts, bastion2)
	cfg.Bastion = &Host{Address: "127.0.0.1", Port: bastion2.Port(), User: "jump", Key: jumpPEM}
	cfg.Nodes[0].Port = port(testnode.ClosedAddr(t))
	_, err = newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
	var unreachable *transport.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Via == "" || unreachable.Node != "n1" {
		t.Fatalf("Dial: %v, want n1's *transport.UnreachableError via the bastion", err)
	}
}

func appendKnown(t *testing.T, file string, s *testnode.Server) {
	t.Helper()
	data := readFile(t, file)
	for _, k := range s.HostKeys {
		data += "[127.0.0.1]:" + itoa(s.Port()) + " " + string(ssh.MarshalAuthorizedKey(k.PublicKey()))
	}
	writeFile(t, file, []byte(data))
}

// TestHandshakeTimeoutDefault: the handshake gets connect_timeout, and at
// least MinHandshakeTimeout: a short connect_timeout (to give up on
// unreachable nodes quickly) does not fail a loaded sshd's login.
func TestHandshakeTimeoutDefault(t *testing.T) {
	for _, tc := range []struct {
		connect, handshake, want time.Duration
	}{
		{connect: 3 * time.Second, want: MinHandshakeTimeout},
		{connect: 0, want: MinHandshakeTimeout},
		{connect: time.Minute, want: time.Minute},
		{connect: 3 * time.Second, handshake: time.Second, want: time.Second},
	} {
		// The nodes' own checks (no credentials here) are not this test's.
		c, _ := Config{ConnectTimeout: tc.connect, HandshakeTimeout: tc.handshake}.withDefaults()
		if c.HandshakeTimeout != tc.want {
			t.Errorf("connect %s, handshake %s: handshake timeout %s, want %s", tc.connect, tc.handshake, c.HandshakeTimeout, tc.want)
		}
	}
}

// TestRefusedPortNotReportedAsDocker: the Docker client of a node whose
// SSH port refuses connections says that the port refused, naming the
// node and what to check; Docker's client turned any error that read
// "connection refused" into "Cannot connect to the Docker daemon".
func TestRefusedPortNotReportedAsDocker(t *testing.T) {
	n := startNode(t, nodeOptions{})
	cfg := n.config()
	cfg.Nodes[0].Port = port(testnode.ClosedAddr(t))
	_, err := newT(t, cfg).Docker(testCtx(t), "n1")
	var unreachable *transport.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Node != "n1" {
		t.Fatalf("Docker: %v (%T), want *transport.UnreachableError for n1", err, err)
	}
	if strings.Contains(err.Error(), "Cannot connect to the Docker daemon") || !strings.Contains(err.Error(), "refused the connection") {
		t.Errorf("error %q does not say that the SSH port refused the connection", err)
	}
}
