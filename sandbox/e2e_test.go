package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// subnet is this package's sandbox subnet (see sandboxtest).
const subnet = 1

// TestSandbox brings up three real nodes with the cluster images and checks
// what rigger relies on: SSH with the generated key and known_hosts, each
// node's own engine through a Docker socket tunnelled over SSH, the images
// on every engine, privileged containers, per-node bind mounts, fault
// injection, an idempotent Up, and a Down that leaves nothing behind.
func TestSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Images: true, ContainerdImages: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if len(s.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(s.Nodes))
	}
	for _, key := range []string{"etcd", "kubernetes", "alpine", "nginx_proxy", "cert_downloader", "kubernetes_services_sidecar", "pod_infra_container"} {
		if s.SystemImages[key] == "" {
			t.Errorf("SystemImages has no %s: %v", key, s.SystemImages)
		}
	}
	t.Run("the example sandbox cluster uses these images", func(t *testing.T) {
		c, _, err := spec.Load("../examples/clusters/sandbox/cluster.yml")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"etcd": c.SystemImages.Etcd, "kubernetes": c.SystemImages.Kubernetes, "alpine": c.SystemImages.Alpine,
			"nginx_proxy": c.SystemImages.NginxProxy, "cert_downloader": c.SystemImages.CertDownloader,
			"kubernetes_services_sidecar": c.SystemImages.KubernetesServicesSidecar, "pod_infra_container": c.SystemImages.PodInfraContainer,
		}
		for key, ref := range want {
			if s.SystemImages[key] != ref {
				t.Errorf("examples/clusters/sandbox/cluster.yml has system_images.%s: %s, the sandbox loads %s", key, ref, s.SystemImages[key])
			}
		}
	})

	t.Run("nodes", func(t *testing.T) {
		for _, n := range s.Nodes {
			t.Run(n.Name, func(t *testing.T) { checkNode(ctx, t, s, n) })
		}
	})
	t.Run("new nodes' engines are seeded from one store, each its own copy", func(t *testing.T) {
		// Imported one by one, a node's images would have IDs of their
		// own (the import time is in the image's configuration).
		ids := map[string]string{}
		for _, n := range s.Nodes {
			dc, err := client.NewClientWithOpts(client.WithHost("unix://"+n.DockerSocket), client.WithAPIVersionNegotiation())
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			insp, err := dc.ImageInspect(ctx, sandbox.HyperkubeImage)
			if err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			ids[insp.ID] = n.Name
			if n.Name == "node1" {
				// A container that writes over an image file changes its
				// own copy: not the other nodes' (whose layers are the same
				// files), not the store.
				runContainer(ctx, t, dc, &container.Config{Image: s.SystemImages["flannel_cni"], Entrypoint: []string{"/bin/sh", "-c", "echo overwritten > /install-cni.sh"}}, &container.HostConfig{NetworkMode: "host"})
				continue
			}
			logs := runContainer(ctx, t, dc, &container.Config{Image: s.SystemImages["flannel_cni"], Entrypoint: []string{"/bin/sh", "-c", "head -c 9 /install-cni.sh"}}, &container.HostConfig{NetworkMode: "host"})
			if logs != "#!/bin/sh" {
				t.Errorf("%s: /install-cni.sh of the flannel-cni image starts %q after node1 wrote over its own", n.Name, logs)
			}
		}
		if len(ids) != 1 {
			t.Errorf("%s has a different ID on each node (%v): the nodes' engines imported it each, not seeded from the engine store", sandbox.HyperkubeImage, ids)
		}
	})
	t.Run("containerd", func(t *testing.T) {
		for _, n := range s.Nodes {
			t.Run(n.Name, func(t *testing.T) { checkContainerd(ctx, t, s, n) })
		}
	})
	t.Run("bind mounts land in the node's own directory", func(t *testing.T) {
		for _, n := range s.Nodes {
			path := filepath.Join(n.Dir, "etc-kubernetes", "written-by-test")
			want := "from " + n.Name
			b, err := os.ReadFile(path)
			if err != nil || string(b) != want {
				t.Errorf("%s: %s = %q, %v; want %q", n.Name, path, b, err, want)
			}
			for _, other := range s.Nodes {
				if other.Name == n.Name {
					continue
				}
				b, _ := os.ReadFile(filepath.Join(other.Dir, "etc-kubernetes", "written-by-test"))
				if string(b) == want {
					t.Errorf("%s's file is in %s's directory", n.Name, other.Name)
				}
			}
		}
	})
	t.Run("partition and heal", func(t *testing.T) {
		victim := s.Nodes[1]
		if err := s.Partition(ctx, victim.Name); err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				_ = s.Heal(ctx, victim.Name)
			}
		}()
		if _, err := dialSSH(ctx, s, victim, 2*time.Second); err == nil {
			t.Errorf("%s answers SSH while partitioned", victim.Name)
		}
		for _, n := range []sandbox.Node{s.Nodes[0], s.Nodes[2]} {
			c, err := dialSSH(ctx, s, n, 5*time.Second)
			if err != nil {
				t.Errorf("%s does not answer while %s is partitioned: %v", n.Name, victim.Name, err)
				continue
			}
			c.Close()
		}
		if st := statusOf(ctx, s, victim.Name); !st.Partitioned || st.SSH == nil {
			t.Errorf("status of partitioned %s: partitioned %v, ssh %v", victim.Name, st.Partitioned, st.SSH)
		}
		if err := s.Heal(ctx, victim.Name); err != nil {
			t.Fatal(err)
		}
		healed = true
		c, err := dialSSH(ctx, s, victim, 5*time.Second)
		if err != nil {
			t.Fatalf("%s does not answer after heal: %v", victim.Name, err)
		}
		c.Close()
	})
	t.Run("stop and start services", func(t *testing.T) {
		n := s.Nodes[2]
		if err := s.StopService(ctx, n.Name, sandbox.ServiceDocker); err != nil {
			t.Fatal(err)
		}
		if st := statusOf(ctx, s, n.Name); st.Docker == nil || st.SSH != nil {
			t.Errorf("after stopping docker on %s: docker %v, ssh %v", n.Name, st.Docker, st.SSH)
		}
		if err := s.StopService(ctx, n.Name, sandbox.ServiceSSHD); err != nil {
			t.Fatal(err)
		}
		if err := s.StopService(ctx, n.Name, sandbox.ServiceContainerd); err != nil {
			t.Fatal(err)
		}
		if st := statusOf(ctx, s, n.Name); st.Containerd == nil {
			t.Errorf("containerd of %s answers after it was stopped", n.Name)
		}
		if c, err := dialSSH(ctx, s, n, 2*time.Second); err == nil {
			c.Close()
			t.Errorf("%s answers SSH with sshd stopped", n.Name)
		}
		for _, svc := range sandbox.Services() {
			if err := s.StartService(ctx, n.Name, svc); err != nil {
				t.Fatal(err)
			}
		}
		checkEngineOverSSH(ctx, t, s, n)
		if st := statusOf(ctx, s, n.Name); st.Containerd != nil {
			t.Errorf("containerd of %s after start: %v", n.Name, st.Containerd)
		}
		if err := s.StopService(ctx, n.Name, "etcd"); err == nil {
			t.Error("StopService of an unknown service: want an error")
		}
	})
	t.Run("up again is idempotent", func(t *testing.T) {
		start := time.Now()
		again, err := sandbox.Up(ctx, sandbox.Options{Name: s.Name, Subnet: subnet, Images: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("second up took %s", time.Since(start))
		if again.KeyPath != s.KeyPath || !slices.Equal(again.Nodes, s.Nodes) {
			t.Errorf("second up changed the sandbox: %+v", again)
		}
		checkEngineOverSSH(ctx, t, again, again.Nodes[0])
		if _, err := sandbox.Up(ctx, sandbox.Options{Name: s.Name, Subnet: subnet, Nodes: 4}, nil); err == nil || !strings.Contains(err.Error(), "down --name") {
			t.Errorf("up with another node count = %v, want a refusal saying to take it down", err)
		}
		if _, err := sandbox.Up(ctx, sandbox.Options{Name: "other" + strconv.Itoa(subnet), Subnet: subnet}, nil); err == nil || !strings.Contains(err.Error(), "already used by sandbox "+s.Name) {
			t.Errorf("a second sandbox on the same subnet = %v, want a refusal", err)
			_ = sandbox.Down(ctx, "other"+strconv.Itoa(subnet))
		}
	})
	t.Run("down leaves nothing", func(t *testing.T) {
		var pids []int
		for _, st := range s.Status(ctx) {
			for _, pid := range st.Pids {
				pids = append(pids, pid)
			}
		}
		if want := len(sandbox.Services()) * len(s.Nodes); len(pids) != want {
			t.Errorf("%d service pids before down, want %d: %v", len(pids), want, pids)
		}
		pids = append(pids, initPids(t, s)...)
		if err := sandbox.Down(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
		left, err := s.Leftovers(ctx, pids)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("left after down:\n%s", strings.Join(left, "\n"))
		}
		if _, err := sandbox.Load(s.Name); err == nil {
			t.Error("Load finds the sandbox after down")
		}
		if err := sandbox.Down(ctx, s.Name); err != nil {
			t.Errorf("down of a sandbox that is gone: %v", err)
		}
	})
}

// TestDownHalfMade takes down sandboxes whose Up was cut short at
// different points: with the network half-made, and with the services
// started but not yet answering.
func TestDownHalfMade(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Nodes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, cut := range []string{"bridge ", "Start containerd, Docker and sshd"} {
		t.Run("cut at "+cut, func(t *testing.T) {
			if err := sandbox.Down(ctx, s.Name); err != nil {
				t.Fatal(err)
			}
			upCtx, cancelUp := context.WithCancel(ctx)
			w := &cancelOnWrite{after: cut, cancel: cancelUp}
			_, err := sandbox.Up(upCtx, sandbox.Options{Name: s.Name, Subnet: subnet, Nodes: 2}, w)
			cancelUp()
			if err == nil {
				t.Fatalf("up was not cut short:\n%s", w.buf.String())
			}
			half, err := sandbox.Load(s.Name)
			if err != nil {
				t.Fatalf("no state after a cut-short up: %v", err)
			}
			if half.Ready {
				t.Error("a cut-short sandbox says it is ready")
			}
			var pids []int
			for _, st := range half.Status(ctx) {
				for _, pid := range st.Pids {
					pids = append(pids, pid)
				}
			}
			if err := sandbox.Down(ctx, s.Name); err != nil {
				t.Fatal(err)
			}
			left, err := half.Leftovers(ctx, pids)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("left after down of a half-made sandbox:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// cancelOnWrite cancels when the progress output first contains after.
type cancelOnWrite struct {
	buf    bytes.Buffer
	after  string
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.after) {
		w.cancel()
	}
	return len(p), nil
}

// checkContainerd checks what a real kubelet needs of node n: its
// containerd answers CRI calls on the node's socket and holds the pause
// image under the name the CRI plugin uses as its sandbox image; the CNI
// directories, where the kubelet's binds and containerd find them, are the
// node's own, writable and empty (a network plugin fills them, as on a real
// machine); /var/lib/kubelet is a shared mount; and the node's
// processes are in a cgroup namespace of their own (their cgroup is "/"),
// so that the kubelets of several nodes do not share /kubepods.
func checkContainerd(ctx context.Context, t *testing.T, s *sandbox.Sandbox, n sandbox.Node) {
	v, err := sandbox.CRIVersion(ctx, n.ContainerdSocket)
	if err != nil {
		t.Fatalf("CRI Version on %s: %v", n.ContainerdSocket, err)
	}
	if v.RuntimeName != "containerd" || v.RuntimeAPIVersion != "v1" {
		t.Errorf("CRI runtime of %s = %+v, want containerd speaking v1", n.Name, v)
	}
	img, err := sandbox.CRIImageStatus(ctx, n.ContainerdSocket, sandbox.PauseImage)
	if err != nil {
		t.Fatal(err)
	}
	if img == nil || !slices.Contains(img.RepoTags, "docker.io/"+sandbox.PauseImage) {
		t.Errorf("%s's containerd has pause image %+v, want it tagged docker.io/%s", n.Name, img, sandbox.PauseImage)
	}
	// ContainerdImages: the add-ons' pod images too.
	if img, err := sandbox.CRIImageStatus(ctx, n.ContainerdSocket, sandbox.MetricsServerImage); err != nil || img == nil {
		t.Errorf("%s's containerd has no %s (ContainerdImages): %+v, %v", n.Name, sandbox.MetricsServerImage, img, err)
	}
	if img, err := sandbox.CRIImageStatus(ctx, n.ContainerdSocket, "rigger-sandbox/not-there:1"); err != nil || img != nil {
		t.Errorf("CRI ImageStatus of an image that is not there = %+v, %v; want none", img, err)
	}

	c, err := dialSSH(ctx, s, n, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sh := func(cmd string) string {
		t.Helper()
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		out, err := sess.CombinedOutput(cmd)
		if err != nil {
			t.Errorf("%s: %s: %v: %s", n.Name, cmd, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := sh("findmnt -n -o PROPAGATION /var/lib/kubelet"); got != "shared" {
		t.Errorf("%s's /var/lib/kubelet propagation = %q, want shared", n.Name, got)
	}
	for _, dir := range []string{"/opt/cni/bin", "/etc/cni/net.d"} {
		if got := sh("ls -A " + dir); got != "" {
			t.Errorf("%s's %s holds %q, want nothing: the sandbox installs no network", n.Name, dir, got)
		}
		sh("touch " + dir + "/probe && rm " + dir + "/probe")
	}
	if mine, other := sh("findmnt -n -o SOURCE /opt/cni"), sh("findmnt -n -o SOURCE /etc/cni"); !strings.Contains(mine, n.Dir) || !strings.Contains(other, n.Dir) {
		t.Errorf("%s's /opt/cni (%s) and /etc/cni (%s) are not the node's own directories under %s", n.Name, mine, other, n.Dir)
	}
	for _, line := range strings.Split(sh("cat /proc/self/cgroup"), "\n") {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("%s: a process of the node is in cgroup %q, want the root of the node's cgroup namespace", n.Name, line)
		}
	}
}

// checkNode checks one node over SSH: its host key, its hostname, and its
// own engine through the tunnelled Docker socket; and writes a file into
// its /etc/kubernetes through a container's bind mount.
func checkNode(ctx context.Context, t *testing.T, s *sandbox.Sandbox, n sandbox.Node) {
	c, err := dialSSH(ctx, s, n, 10*time.Second)
	if err != nil {
		t.Fatalf("ssh %s@%s with the sandbox's key and known_hosts: %v", n.User, n.Address, err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Output("hostname")
	sess.Close()
	if err != nil || strings.TrimSpace(string(out)) != n.Hostname {
		t.Errorf("hostname over ssh = %q, %v; want %s", out, err, n.Hostname)
	}

	dc := dockerOverSSH(t, c)
	info, err := dc.Info(ctx)
	if err != nil {
		t.Fatalf("docker info through the SSH tunnel: %v", err)
	}
	if info.Name != n.Hostname {
		t.Errorf("the engine behind %s's socket is on host %q", n.Name, info.Name)
	}
	imgs, err := dc.ImageList(ctx, image.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, img := range imgs {
		tags = append(tags, img.RepoTags...)
	}
	for key, ref := range s.SystemImages {
		if !slices.Contains(tags, ref) {
			t.Errorf("%s's engine lacks %s (%s); it has %v", n.Name, ref, key, tags)
		}
	}

	// A privileged container of rigger's image runs to its end.
	logs := runContainer(ctx, t, dc, &container.Config{Image: s.SystemImages["nginx_proxy"], Cmd: []string{"version"}},
		&container.HostConfig{Privileged: true, NetworkMode: "host"})
	if !strings.Contains(logs, "rigger ") {
		t.Errorf("rigger version in a privileged container said %q", logs)
	}
	// The etcd image runs etcd, etcdctl and etcdutl of its version.
	for _, cmd := range [][]string{{"etcd", "--version"}, {"etcdctl", "version"}, {"etcdutl", "version"}} {
		logs = runContainer(ctx, t, dc, &container.Config{Image: s.SystemImages["etcd"], Cmd: cmd}, &container.HostConfig{NetworkMode: "host"})
		if want := cmd[0] + " version: " + strings.TrimPrefix(sandbox.EtcdVersion, "v"); !strings.Contains(strings.ToLower(logs), want) {
			t.Errorf("%s in %s said %q, want %q", strings.Join(cmd, " "), s.SystemImages["etcd"], logs, want)
		}
	}

	// A file written through a bind mount of /etc/kubernetes (the archive
	// API, as rigger writes certificates) lands in the node's directory.
	cr, err := dc.ContainerCreate(ctx, &container.Config{Image: s.SystemImages["nginx_proxy"], Cmd: []string{"version"}},
		&container.HostConfig{Binds: []string{"/etc/kubernetes:/etc/kubernetes"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer dc.ContainerRemove(ctx, cr.ID, container.RemoveOptions{Force: true})
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	body := "from " + n.Name
	_ = tw.WriteHeader(&tar.Header{Name: "written-by-test", Mode: 0o644, Size: int64(len(body))})
	_, _ = tw.Write([]byte(body))
	_ = tw.Close()
	if err := dc.CopyToContainer(ctx, cr.ID, "/etc/kubernetes", &tb, container.CopyToContainerOptions{}); err != nil {
		t.Fatalf("write into /etc/kubernetes through the bind mount: %v", err)
	}
}

// checkEngineOverSSH checks that node n's engine answers through SSH.
func checkEngineOverSSH(ctx context.Context, t *testing.T, s *sandbox.Sandbox, n sandbox.Node) {
	t.Helper()
	c, err := dialSSH(ctx, s, n, 10*time.Second)
	if err != nil {
		t.Fatalf("ssh to %s: %v", n.Name, err)
	}
	defer c.Close()
	if _, err := dockerOverSSH(t, c).Ping(ctx); err != nil {
		t.Fatalf("docker on %s through SSH: %v", n.Name, err)
	}
}

func runContainer(ctx context.Context, t *testing.T, dc *client.Client, cfg *container.Config, hc *container.HostConfig) string {
	t.Helper()
	cr, err := dc.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	defer dc.ContainerRemove(ctx, cr.ID, container.RemoveOptions{Force: true})
	waitC, errC := dc.ContainerWait(ctx, cr.ID, container.WaitConditionNextExit)
	if err := dc.ContainerStart(ctx, cr.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start container (%s): %v", cfg.Image, err)
	}
	select {
	case res := <-waitC:
		if res.StatusCode != 0 {
			t.Errorf("container %v exited %d", cfg.Cmd, res.StatusCode)
		}
	case err := <-errC:
		t.Fatalf("wait for container: %v", err)
	}
	rc, err := dc.ContainerLogs(ctx, cr.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, rc); err != nil {
		t.Fatal(err)
	}
	return stdout.String() + stderr.String()
}

// dialSSH connects as the node's user with the sandbox's key, verifying
// the host key against the sandbox's known_hosts.
func dialSSH(ctx context.Context, s *sandbox.Sandbox, n sandbox.Node, timeout time.Duration) (*ssh.Client, error) {
	keyPEM, err := os.ReadFile(s.KeyPath)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, err
	}
	hostKeys, err := knownhosts.New(s.KnownHostsPath)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(n.Address, strconv.Itoa(n.Port))
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User:            n.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hostKeys,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// dockerOverSSH is a Docker client whose every connection is the node's
// /var/run/docker.sock tunnelled over SSH (direct-streamlocal).
func dockerOverSSH(t *testing.T, c *ssh.Client) *client.Client {
	t.Helper()
	dc, err := client.NewClientWithOpts(
		client.WithHost("unix://"+sandbox.DockerSocket),
		client.WithDialContext(func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.DialContext(ctx, "unix", sandbox.DockerSocket)
		}),
		client.WithAPIVersionNegotiation(),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	return dc
}

func statusOf(ctx context.Context, s *sandbox.Sandbox, node string) sandbox.NodeStatus {
	for _, st := range s.Status(ctx) {
		if st.Name == node {
			return st
		}
	}
	panic(fmt.Sprintf("no node %s", node))
}

// initPids reads the pids of the sandbox init, to check they end.
func initPids(t *testing.T, s *sandbox.Sandbox) []int {
	var pids []int
	for _, f := range []string{"init.pid", "sh.pid"} {
		b, err := os.ReadFile(filepath.Join(s.Dir, "init", f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("init pid file %s: %v", f, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Errorf("init pids = %v, want tini and its shell", pids)
	}
	return pids
}
