package sshtun

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/internal/testnode"
	"github.com/rigger/rigger/transport/transporttest"
)

// The end-to-end tests run against OpenSSH's sshd and Docker Engine 20.10
// on sandbox nodes (RIGGER_E2E=1, as root). sshtun's sandbox uses subnet 2:
// nodes 10.231.2.11, .12, .13.
const (
	e2eSubnet    = 2
	echoImage    = "rigger-test/echo:1"
	echoName     = "rigger-echo"
	echoAddr     = "127.0.0.1:17777" // node-local: the echo container uses host networking
	closedAddr   = "127.0.0.1:17778"
	e2eTimeout   = 2 * time.Minute
	e2eKeepalive = 200 * time.Millisecond
)

func startSandbox(t testing.TB) *sandbox.Sandbox {
	return sandboxtest.Start(t, sandbox.Options{Nodes: 3, Subnet: e2eSubnet, Images: false})
}

// sbHost is the Host that logs in to a sandbox node.
func sbHost(sb *sandbox.Sandbox, n sandbox.Node) Host {
	return Host{Address: n.Address, Port: n.Port, User: n.User, KeyPath: sb.KeyPath}
}

// sbConfig reaches the given sandbox nodes directly.
func sbConfig(sb *sandbox.Sandbox, nodes ...sandbox.Node) Config {
	cfg := Config{KnownHostsFiles: []string{sb.KnownHostsPath}, ConnectTimeout: 5 * time.Second, KeepaliveInterval: e2eKeepalive}
	for _, n := range nodes {
		cfg.Nodes = append(cfg.Nodes, Node{Name: n.Name, Host: sbHost(sb, n)})
	}
	return cfg
}

func e2eCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestE2E(t *testing.T) {
	sb := startSandbox(t)
	n1, n2, n3 := sb.Nodes[0], sb.Nodes[1], sb.Nodes[2]
	echoBin := buildEcho(t)

	// The image and the echo container are made through the tunnel: this
	// is the "containers run on a node" path.
	setup := newT(t, sbConfig(sb, n1, n2))
	for _, n := range []sandbox.Node{n1, n2} {
		cli, err := setup.Docker(e2eCtx(t), n.Name)
		if err != nil {
			t.Fatalf("Docker on %s: %v", n.Name, err)
		}
		importEcho(t, cli, echoBin)
		runEcho(t, setup, cli, n.Name)
	}
	setup.Close() // the bastion test counts this machine's connections

	t.Run("Conformance", func(t *testing.T) {
		transporttest.TestConformance(t, func(t *testing.T) transporttest.Target {
			tr, err := New(sbConfig(sb, n1))
			if err != nil {
				t.Fatal(err)
			}
			return transporttest.Target{Transport: tr, Node: n1.Name, EchoAddr: echoAddr, ClosedAddr: closedAddr, Container: echoName}
		})
	})

	t.Run("RunContainerToCompletion", func(t *testing.T) {
		tr := newT(t, sbConfig(sb, n2))
		cli, err := tr.Docker(e2eCtx(t), n2.Name)
		if err != nil {
			t.Fatal(err)
		}
		out := runOnce(t, cli, "hello from", n2.Name)
		if want := "hello from " + n2.Name; strings.TrimSpace(out) != want {
			t.Errorf("container printed %q, want %q", out, want)
		}
	})

	t.Run("Bastion", func(t *testing.T) {
		// node1 is the jump host to node2.
		cfg := sbConfig(sb, n2)
		b := sbHost(sb, n1)
		cfg.Bastion = &b
		tr := newT(t, cfg)
		cli, err := tr.Docker(e2eCtx(t), n2.Name)
		if err != nil {
			t.Fatalf("Docker on %s via %s: %v", n2.Name, n1.Name, err)
		}
		info, err := cli.Info(e2eCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := sb.Name + "-" + n2.Name; info.Name != n2.Hostname && info.Name != want {
			t.Errorf("engine reached via the bastion is %q, want %s's (%s)", info.Name, n2.Name, n2.Hostname)
		}
		roundTrip(t, tr, n2.Name, echoAddr)
		// This machine holds an SSH connection to node1 and none to
		// node2: node2's went through node1.
		if got := established(t, n1.Address, n1.Port); got != 1 {
			t.Errorf("%d established connections to the bastion %s, want 1", got, n1.Address)
		}
		if got := established(t, n2.Address, n2.Port); got != 0 {
			t.Errorf("%d established connections straight to %s, want 0 (through the bastion only)", got, n2.Address)
		}
	})

	t.Run("AcceptNewRecordsKey", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "ssh", "known_hosts")
		cfg := sbConfig(sb, n1)
		cfg.KnownHostsFiles = []string{file}
		cfg.HostKeyPolicy = HostKeyPolicyAcceptNew
		roundTrip(t, newT(t, cfg), n1.Name, echoAddr)
		data := readFile(t, file)
		if !strings.HasPrefix(data, n1.Address+" ") {
			t.Fatalf("known_hosts after accept-new = %q, want a line for %s", data, n1.Address)
		}
		// The recorded key is the one the sandbox's known_hosts lists.
		_, _, recorded, _, _, err := ssh.ParseKnownHosts([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		check, err := knownhosts.New(sb.KnownHostsPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(net.JoinHostPort(n1.Address, "22"), &net.TCPAddr{IP: net.ParseIP(n1.Address), Port: 22}, recorded); err != nil {
			t.Errorf("accept-new recorded %s, which the sandbox's known_hosts does not list: %v", ssh.FingerprintSHA256(recorded), err)
		}
		cfg.HostKeyPolicy = HostKeyPolicyStrict
		roundTrip(t, newT(t, cfg), n1.Name, echoAddr)
	})

	t.Run("UnknownHostKeyRefused", func(t *testing.T) {
		cfg := sbConfig(sb, n1)
		cfg.KnownHostsFiles = []string{filepath.Join(t.TempDir(), "known_hosts")}
		_, err := newT(t, cfg).Dial(e2eCtx(t), n1.Name, "tcp", echoAddr)
		var unknown *HostKeyUnknownError
		if !errors.As(err, &unknown) {
			t.Fatalf("Dial: %v, want *HostKeyUnknownError", err)
		}
	})

	t.Run("ChangedHostKeyRefused", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "known_hosts")
		impostor := testnode.NewKey(t).PublicKey()
		writeFile(t, file, []byte(knownhosts.Line([]string{n1.Address}, impostor)+"\n"))
		cfg := sbConfig(sb, n1)
		cfg.KnownHostsFiles = []string{file}
		cfg.HostKeyPolicy = HostKeyPolicyAcceptNew // not even accept-new takes a changed key
		_, err := newT(t, cfg).Dial(e2eCtx(t), n1.Name, "tcp", echoAddr)
		var changed *HostKeyChangedError
		if !errors.As(err, &changed) {
			t.Fatalf("Dial: %v, want *HostKeyChangedError", err)
		}
		if changed.Want != ssh.FingerprintSHA256(impostor) || changed.File != file || changed.Line != 1 {
			t.Errorf("error = %+v", changed)
		}
		t.Logf("message: %v", err)
	})

	t.Run("AuthRefused", func(t *testing.T) {
		cfg := sbConfig(sb, n1)
		cfg.Nodes[0].User = "rigger-no-such-user"
		_, err := newT(t, cfg).Dial(e2eCtx(t), n1.Name, "tcp", echoAddr)
		var auth *AuthError
		if !errors.As(err, &auth) {
			t.Fatalf("Dial: %v, want *AuthError", err)
		}
		t.Logf("message: %v", err)
	})

	t.Run("DockerStopped", func(t *testing.T) {
		ctx := e2eCtx(t)
		if err := sb.StopService(ctx, n3.Name, "docker"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.StartService(context.Background(), n3.Name, "docker") })
		tr := newT(t, sbConfig(sb, n3))
		_, err := tr.Docker(ctx, n3.Name)
		var sock *transport.DockerSocketError
		if !errors.As(err, &sock) {
			t.Fatalf("Docker with dockerd stopped: %v (%T), want *transport.DockerSocketError", err, err)
		}
		// sshd alone cannot say why; the node's SFTP server can.
		if sock.Problem != transport.SocketMissing {
			t.Errorf("Problem = %d, want SocketMissing (dockerd removes its socket when it stops)", sock.Problem)
		}
		t.Logf("message: %v", err)
		if err := sb.StartService(ctx, n3.Name, "docker"); err != nil {
			t.Fatal(err)
		}
		// The same transport gets the engine once it is back.
		testwait.For(t, time.Minute, "dockerd on "+n3.Name, func() error {
			_, err := tr.Docker(ctx, n3.Name)
			return err
		})
	})

	t.Run("SSHDStopped", func(t *testing.T) {
		ctx := e2eCtx(t)
		if err := sb.StopService(ctx, n3.Name, "sshd"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.StartService(context.Background(), n3.Name, "sshd") })
		_, err := newT(t, sbConfig(sb, n3)).Dial(ctx, n3.Name, "tcp", closedAddr)
		var unreachable *transport.UnreachableError
		if !errors.As(err, &unreachable) || unreachable.Op != transport.OpConnect {
			t.Fatalf("Dial with sshd stopped: %v, want *transport.UnreachableError at connect", err)
		}
		if err := sb.StartService(ctx, n3.Name, "sshd"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PartitionThenHeal", func(t *testing.T) {
		ctx := e2eCtx(t)
		cfg := sbConfig(sb, n1)
		cfg.ConnectTimeout = 2 * time.Second
		tr := newT(t, cfg)
		roundTrip(t, tr, n1.Name, echoAddr)
		sandboxtest.Partition(ctx, t, sb, n1.Name)
		// The live connection goes silent; keepalives find it dead, and
		// the reconnection cannot get through.
		start := time.Now()
		_, err := tr.Dial(ctx, n1.Name, "tcp", echoAddr)
		var unreachable *transport.UnreachableError
		if !errors.As(err, &unreachable) {
			t.Fatalf("Dial to a partitioned node: %v, want *transport.UnreachableError", err)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("noticing the partition took %s", took)
		}
		if err := sb.Heal(ctx, n1.Name); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, time.Minute, n1.Name+" after healing", func() error {
			conn, err := tr.Dial(ctx, n1.Name, "tcp", echoAddr)
			if err == nil {
				conn.Close()
			}
			return err
		})
	})
}

func BenchmarkE2E(b *testing.B) {
	sb := startSandbox(b)
	n1 := sb.Nodes[0]
	tr := newT(b, sbConfig(sb, n1))
	cli, err := tr.Docker(e2eCtx(b), n1.Name)
	if err != nil {
		b.Fatal(err)
	}
	importEcho(b, cli, buildEcho(b))
	runEcho(b, tr, cli, n1.Name)
	runBenchmarks(b, benchTarget{cfg: sbConfig(sb, n1), node: n1.Name, echo: echoAddr})
}

// buildEcho compiles testdata/echo statically, for a FROM-scratch image.
func buildEcho(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "echo")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/echo")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build echo: %v\n%s", err, msg)
	}
	return out
}

// importEcho makes the echo image on the node from a one-file rootfs.
func importEcho(t testing.TB, cli *client.Client, bin string) {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "echo", Mode: 0o755, Size: int64(len(data)), ModTime: time.Now()})
	tw.Write(data)
	tw.Close()
	rc, err := cli.ImageImport(e2eCtx(t), image.ImportSource{Source: &buf, SourceName: "-"}, echoImage, image.ImportOptions{})
	if err != nil {
		t.Fatalf("import echo image: %v", err)
	}
	defer rc.Close()
	msg, _ := io.ReadAll(rc)
	if bytes.Contains(msg, []byte(`"error"`)) {
		t.Fatalf("import echo image: %s", msg)
	}
}

// runEcho starts the echo container on the node and waits until its port
// answers through the tunnel.
func runEcho(t testing.TB, tr *Transport, cli *client.Client, nodeName string) {
	t.Helper()
	ctx := e2eCtx(t)
	cli.ContainerRemove(ctx, echoName, container.RemoveOptions{Force: true})
	created, err := cli.ContainerCreate(ctx,
		&container.Config{Image: echoImage, Cmd: []string{"/echo", "-listen", echoAddr}},
		&container.HostConfig{NetworkMode: "host"}, nil, nil, echoName)
	if err != nil {
		t.Fatalf("create echo container on %s: %v", nodeName, err)
	}
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start echo container on %s: %v", nodeName, err)
	}
	testwait.For(t, time.Minute, "the echo container on "+nodeName, func() error {
		conn, err := tr.Dial(ctx, nodeName, "tcp", echoAddr)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

// runOnce runs a container that prints its arguments, waits for it, and
// returns what it printed.
func runOnce(t testing.TB, cli *client.Client, args ...string) string {
	t.Helper()
	ctx := e2eCtx(t)
	created, err := cli.ContainerCreate(ctx,
		&container.Config{Image: echoImage, Cmd: append([]string{"/echo", "-print"}, args...)},
		&container.HostConfig{NetworkMode: "host"}, nil, nil, "")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	select {
	case res := <-waitC:
		if res.StatusCode != 0 {
			t.Fatalf("container exited with %d", res.StatusCode)
		}
	case err := <-errC:
		t.Fatalf("wait: %v", err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	defer logs.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, logs); err != nil {
		t.Fatalf("read logs: %v", err)
	}
	return stdout.String()
}

// established counts this network namespace's established TCP connections
// to addr:port, from /proc/net/tcp.
func established(t testing.TB, addr string, port int) int {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ip := net.ParseIP(addr).To4()
	// Addresses are the IPv4 bytes as a little-endian word, then the port.
	want := strings.ToUpper(hex.EncodeToString([]byte{ip[3], ip[2], ip[1], ip[0]})) + fmt.Sprintf(":%04X", port)
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 3 && f[2] == want && f[3] == "01" { // 01: ESTABLISHED
			n++
		}
	}
	return n
}
