package simnode_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/simnode"
	"github.com/rigger/rigger/transport/sshtun"
)

// testPort keeps these tests' nodes apart from the benchmark's.
const testPort = 22122

// newKey returns a fresh ed25519 signer and its private key as an OpenSSH
// PEM file.
func newKey(t testing.TB) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return s, pem.EncodeToMemory(blk)
}

// start starts n nodes accepting user root with a fresh key, and returns
// them with the key's PEM and a known_hosts file for them.
func start(t *testing.T, n int) (*simnode.Cluster, []byte, string) {
	t.Helper()
	key, keyPEM := newKey(t)
	c, err := simnode.Start(simnode.Options{Nodes: n, Port: testPort, User: "root", AuthorizedKey: key.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, c.KnownHosts(), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, keyPEM, kh
}

// transportTo is rigger's SSH transport to the nodes, as user with key.
func transportTo(t *testing.T, c *simnode.Cluster, user string, key []byte, knownHosts string) *sshtun.Transport {
	t.Helper()
	cfg := sshtun.Config{KnownHostsFiles: []string{knownHosts}}
	for _, n := range c.Nodes {
		cfg.Nodes = append(cfg.Nodes, sshtun.Node{Host: sshtun.Host{Address: n.Address, Port: n.Port, User: user, Key: key}})
	}
	tr, err := sshtun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func TestEngineThroughSSH(t *testing.T) {
	c, key, kh := start(t, 2)
	n := c.Nodes[1]
	if n.Address != "127.0.1.2" {
		t.Errorf("second node's address = %s, want 127.0.1.2", n.Address)
	}
	n.Engine.Add(simnode.Container{Name: "kubelet", Image: "hyperkube:v1", Labels: map[string]string{"io.rigger.cluster": "sim"},
		Binds: []string{"/etc/kubernetes:/etc/kubernetes:z"}})
	n.Engine.Add(simnode.Container{Name: "old", Image: "busybox", State: container.StateExited})
	n.Engine.WriteFile("/etc/kubernetes/ssl/kube-ca.pem", []byte("ca"))
	n.Engine.WriteFile("/etc/kubernetes/kubeconfig.yaml", []byte("kc"))
	n.Engine.WriteFile("/etc/other", []byte("not under the bind"))

	ctx := context.Background()
	tr := transportTo(t, c, "root", key, kh)
	cli, err := tr.Docker(ctx, n.Address) // reads the version, settles the API version
	if err != nil {
		t.Fatal(err)
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil || v.Version != simnode.EngineVersion {
		t.Fatalf("version = %q, %v; want %s", v.Version, err, simnode.EngineVersion)
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Names[0] != "/kubelet" || list[0].State != container.StateRunning ||
		!strings.HasPrefix(list[0].Status, "Up ") || len(list[0].Mounts) != 1 || list[0].Mounts[0].Destination != "/etc/kubernetes" {
		t.Fatalf("list = %+v", list)
	}
	running, err := cli.ContainerList(ctx, container.ListOptions{})
	if err != nil || len(running) != 1 {
		t.Fatalf("running containers = %d, %v; want 1", len(running), err)
	}

	files, err := dockerop.ReadDirVia(ctx, cli, n.Address, list[0].ID, "/etc/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || string(files["/etc/kubernetes/ssl/kube-ca.pem"]) != "ca" || string(files["/etc/kubernetes/kubeconfig.yaml"]) != "kc" {
		t.Errorf("files read through kubelet = %q", files)
	}

	// A helper container: what rigger writes files with.
	if _, err := cli.ImageInspect(ctx, "tools"); !errdefs.IsNotFound(err) {
		t.Errorf("inspect of a missing image: %v, want not found", err)
	}
	if err := dockerop.WriteFiles(ctx, cli, n.Address, "busybox", "/etc/kubernetes", map[string][]byte{"/etc/kubernetes/new.yaml": []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if got := string(n.Engine.Files()["/etc/kubernetes/new.yaml"]); got != "new" {
		t.Errorf("file written through a helper = %q, want new", got)
	}
	if st := n.Engine.ContainerStates(); len(st) != 2 {
		t.Errorf("containers after the helper = %v, want the helper removed", st)
	}
	if err := cli.ContainerRemove(ctx, "kubelet", container.RemoveOptions{}); !errdefs.IsConflict(err) {
		t.Errorf("remove of a running container without force: %v, want a conflict", err)
	}
	if _, err := cli.ContainerInspect(ctx, "nothing"); !errdefs.IsNotFound(err) {
		t.Errorf("inspect of a missing container: %v, want not found", err)
	}
	if c.Nodes[0].Engine.Requests() != 0 {
		t.Errorf("the other node answered %d requests", c.Nodes[0].Engine.Requests())
	}
}

func TestRefusesWrongKey(t *testing.T) {
	c, _, kh := start(t, 1)
	_, other := newKey(t)
	tr := transportTo(t, c, "root", other, kh)
	_, err := tr.Docker(context.Background(), c.Nodes[0].Address)
	if err == nil || !strings.Contains(err.Error(), "refused SSH login") {
		t.Fatalf("connecting with a key the node does not accept: %v, want it refused", err)
	}
	if c.Nodes[0].Engine.Requests() != 0 {
		t.Errorf("the engine answered %d requests", c.Nodes[0].Engine.Requests())
	}
}

func TestRefusesWrongUser(t *testing.T) {
	c, key, kh := start(t, 1)
	tr := transportTo(t, c, "ubuntu", key, kh)
	if _, err := tr.Docker(context.Background(), c.Nodes[0].Address); err == nil {
		t.Fatal("a user the node does not accept got in")
	}
}

func TestHostKeyChecked(t *testing.T) {
	c, key, _ := start(t, 2)
	// known_hosts gives node 0's key for node 1's address.
	line := strings.Replace(strings.SplitN(string(c.KnownHosts()), "\n", 2)[0], c.Nodes[0].Address, c.Nodes[1].Address, 1)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := transportTo(t, c, "root", key, kh)
	if _, err := tr.Docker(context.Background(), c.Nodes[1].Address); err == nil || !strings.Contains(err.Error(), "HOST KEY CHANGED") {
		t.Fatalf("a node whose host key is not the one known: %v, want a host key error", err)
	}
}

func TestChannels(t *testing.T) {
	c, keyPEM, _ := start(t, 1)
	key, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	cli, err := ssh.Dial("tcp", n.Address+":22122", &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(n.HostKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Dial("unix", "/run/other.sock"); err == nil || !strings.Contains(err.Error(), "open failed") {
		t.Errorf("another socket: %v, want open failed", err)
	}
	if _, err := cli.Dial("tcp", "127.0.0.1:10250"); err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("a node-local port: %v, want refused", err)
	}
	conn, err := cli.Dial("unix", simnode.DefaultDockerSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(b), "HTTP/1.1 200") || !strings.HasSuffix(string(b), "OK") || !strings.Contains(string(b), "Api-Version: "+simnode.APIVersion) {
		t.Errorf("ping over the socket channel:\n%s", b)
	}
}

func TestStartRefusesBusyAddress(t *testing.T) {
	start(t, 1)
	key, _ := newKey(t)
	if _, err := simnode.Start(simnode.Options{Nodes: 1, Port: testPort, User: "root", AuthorizedKey: key.PublicKey()}); err == nil {
		t.Fatal("a second node on the same address and port started")
	}
}

// TestHealthPorts checks that the kubelet's and kube-proxy's health ports
// answer rigger's health checks, through rigger's SSH transport, only
// while their containers run.
func TestHealthPorts(t *testing.T) {
	c, key, kh := start(t, 1)
	n := c.Nodes[0]
	ctx := context.Background()
	tr := transportTo(t, c, "root", key, kh)
	chk := &health.Checker{Dial: tr.Dial}
	kubelet := health.Target{Node: n.Address, Component: desired.Kubelet}
	proxy := health.Target{Node: n.Address, Component: desired.KubeProxy}
	for _, tg := range []health.Target{kubelet, proxy} {
		if err := chk.Check(ctx, tg); err == nil || !strings.Contains(err.Error(), "Connection refused") {
			t.Errorf("%s before its container exists: %v, want refused", tg, err)
		}
	}
	n.Engine.Add(simnode.Container{Name: desired.Kubelet, Image: "hyperkube:v1"})
	n.Engine.Add(simnode.Container{Name: desired.KubeProxy, Image: "hyperkube:v1"})
	for _, tg := range []health.Target{kubelet, proxy} {
		if err := chk.Check(ctx, tg); err != nil {
			t.Errorf("%s running: %v", tg, err)
		}
	}

	// A connection opened while the kubelet runs answers until it stops.
	conn, err := tr.Dial(ctx, n.Address, "tcp", "127.0.0.1:"+health.KubeletHealthzPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Errorf("kubelet /healthz = %s %q, want 200 ok", resp.Status, b)
	}

	cli, err := tr.Docker(ctx, n.Address)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStop(ctx, desired.Kubelet, container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := chk.Check(ctx, kubelet); err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("kubelet stopped: %v, want refused", err)
	}
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err == nil {
		if resp, err := http.ReadResponse(br, nil); err == nil {
			t.Errorf("a connection to the stopped kubelet answered %s", resp.Status)
		}
	}
	if err := chk.Check(ctx, proxy); err != nil {
		t.Errorf("kube-proxy, the kubelet stopped: %v", err)
	}
	if err := cli.ContainerStart(ctx, desired.Kubelet, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := chk.Check(ctx, kubelet); err != nil {
		t.Errorf("kubelet started again: %v", err)
	}
}
