package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestNetworkArgs(t *testing.T) {
	n := layout("rigger", 0, 1).Nodes[0]
	want := [][]string{
		{"link", "add", "rigsb0n1", "type", "veth", "peer", "name", "eth0", "netns", "rigger-sandbox-rigger-node1"},
		{"link", "set", "rigsb0n1", "master", "rigsb0"},
		{"link", "set", "rigsb0n1", "up"},
		{"-n", "rigger-sandbox-rigger-node1", "link", "set", "lo", "up"},
		{"-n", "rigger-sandbox-rigger-node1", "addr", "replace", "10.231.0.11/24", "dev", "eth0"},
		{"-n", "rigger-sandbox-rigger-node1", "link", "set", "eth0", "up"},
		{"-n", "rigger-sandbox-rigger-node1", "route", "replace", "default", "via", "10.231.0.1", "dev", "eth0"},
	}
	if diff := cmp.Diff(want, nodeNetArgs(n, "rigsb0", "10.231.0.1")); diff != "" {
		t.Errorf("nodeNetArgs (-want +got):\n%s", diff)
	}
	if got := bridgeArgs("rigsb0", "10.231.0.1")[1]; !cmp.Equal(got, []string{"addr", "replace", "10.231.0.1/24", "dev", "rigsb0"}) {
		t.Errorf("bridge address args = %v", got)
	}
	if got := ruleArgs("add", "rigsb0"); !cmp.Equal(got, []string{"rule", "add", "iif", "rigsb0", "unreachable"}) {
		t.Errorf("ruleArgs = %v", got)
	}
}

func TestMountSetupArgs(t *testing.T) {
	s := layout("rigger", 0, 1)
	n := s.Nodes[0]
	args := s.mountSetupArgs(n)
	// The cgroup directories depend on the machine's hierarchies.
	head := append([]string{"--net=/run/netns/rigger-sandbox-rigger-node1", "--", "sh", "-c", joinCgroupScript, "sh"},
		cgroupDirs("/rigger-sandbox/rigger/node1")...)
	head = append(head,
		"--",
		"unshare", "--mount=/run/rigger-sandbox/rigger/node1.mnt", "--uts=/run/rigger-sandbox/rigger/node1.uts",
		"--cgroup=/run/rigger-sandbox/rigger/node1.cgroup", "--propagation", "private", "--",
		"sh", "-c", mountSetupScript, "sh", "rigger-node1",
	)
	if diff := cmp.Diff(head, args[:len(head)]); diff != "" {
		t.Fatalf("mountSetupArgs head (-want +got):\n%s", diff)
	}
	ops := args[len(head):]
	var binds [][2]string
	var shared []string
	for len(ops) > 0 {
		switch {
		case ops[0] == "bind" && len(ops) >= 3:
			binds = append(binds, [2]string{ops[1], ops[2]})
			ops = ops[3:]
		case ops[0] == "shared" && len(ops) >= 2:
			shared = append(shared, ops[1])
			ops = ops[2:]
		default:
			t.Fatalf("mountSetupArgs: bad operation at %q", ops)
		}
	}
	if len(binds) != len(nodeMounts()) {
		t.Fatalf("mountSetupArgs has %d binds, want %d", len(binds), len(nodeMounts()))
	}
	for i, p := range nodeMounts() {
		if want := [2]string{filepath.Join(n.Dir, mountDirName(p)), p}; binds[i] != want {
			t.Errorf("bind %d = %v, want %v", i, binds[i], want)
		}
	}
	// The node's CNI directories are its own (writable, as a real
	// machine's), not the machine's plugins.
	for _, p := range []string{"/opt/cni", "/etc/cni"} {
		if !slices.Contains(binds, [2]string{n.mountDir(p), p}) {
			t.Errorf("%s is not the node's own: binds %v", p, binds)
		}
	}
	for _, b := range binds {
		if !strings.HasPrefix(b[0], n.Dir+"/") {
			t.Errorf("bind %v: the source is not the node's own directory", b)
		}
	}
	if diff := cmp.Diff([]string{"/var/lib/docker", "/var/lib/kubelet", "/var/lib/rancher"}, shared); diff != "" {
		t.Errorf("shared mounts (-want +got):\n%s", diff)
	}
	if binds[len(nodeMounts())-1][1] != "/run" {
		t.Errorf("/run is not mounted last of the node's directories: %v", binds)
	}
}

// The mount script runs under sh -eu: check its syntax here.
func TestScriptsParse(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	s := layout("rigger", 0, 1)
	scripts := map[string]string{
		"mount":      mountSetupScript,
		"init":       initScript,
		"runc":       runcWrapper,
		"docker":     s.serviceScript(s.Nodes[0], ServiceDocker),
		"sshd":       s.serviceScript(s.Nodes[0], ServiceSSHD),
		"containerd": s.serviceScript(s.Nodes[0], ServiceContainerd),
		"cgroup":     joinCgroupScript,
	}
	for name, script := range scripts {
		if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("%s script: %v: %s", name, err, out)
		}
	}
}

func TestServiceScript(t *testing.T) {
	s := layout("rigger", 0, 2)
	n := s.Nodes[1]
	got := s.serviceScript(n, ServiceDocker)
	for _, want := range []string{
		`echo "$$" > /var/lib/rigger-sandbox/rigger/node2/pids/docker.pid`,
		"exec nsenter --net=/run/netns/rigger-sandbox-rigger-node2 --mount=/run/rigger-sandbox/rigger/node2.mnt --uts=/run/rigger-sandbox/rigger/node2.uts --cgroup=/run/rigger-sandbox/rigger/node2.cgroup --wd=/ -- dockerd ",
		"--containerd=/run/containerd/containerd.sock",
		"--label=io.rigger.sandbox.node=rigger/node2",
		"--add-runtime=sandbox-runc=/var/lib/rigger-sandbox/rigger/bin/runc-sandbox",
		"--default-runtime=sandbox-runc",
		"--bridge=none", "--iptables=false", "--ip-forward=false",
		">>/var/lib/rigger-sandbox/rigger/node2/log/docker.log 2>&1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("docker script lacks %q:\n%s", want, got)
		}
	}
	got = s.serviceScript(n, ServiceSSHD)
	if !strings.Contains(got, "-- /usr/sbin/sshd -D -e -f /var/lib/rigger-sandbox/rigger/node2/ssh/sshd_config >>") {
		t.Errorf("sshd script:\n%s", got)
	}
	got = s.serviceScript(n, ServiceContainerd)
	if !strings.Contains(got, "--cgroup=/run/rigger-sandbox/rigger/node2.cgroup --wd=/ -- containerd --config /var/lib/rigger-sandbox/rigger/node2/containerd/config.toml >>/var/lib/rigger-sandbox/rigger/node2/log/containerd.log 2>&1") {
		t.Errorf("containerd script:\n%s", got)
	}
	// Every service moves into the node's cgroup before it enters the
	// node's cgroup namespace.
	for _, dir := range cgroupDirs("/rigger-sandbox/rigger/node2") {
		line := `echo "$$" > ` + dir + "/cgroup.procs\n"
		if i, j := strings.Index(got, line), strings.Index(got, "exec nsenter"); i < 0 || i > j {
			t.Errorf("containerd script does not join %s before it starts:\n%s", dir, got)
		}
	}
	cfg := s.sshdConfig(n)
	for _, want := range []string{"ListenAddress 10.231.0.12:22", "AllowStreamLocalForwarding yes", "PasswordAuthentication no",
		"AuthorizedKeysFile /var/lib/rigger-sandbox/rigger/ssh/authorized_keys", "HostKey /var/lib/rigger-sandbox/rigger/node2/ssh/ssh_host_ed25519_key"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("sshd_config lacks %q:\n%s", want, cfg)
		}
	}
}

func TestCheckService(t *testing.T) {
	for _, ok := range []string{"sshd", "docker", "containerd"} {
		if err := checkService(ok); err != nil {
			t.Errorf("checkService(%s): %v", ok, err)
		}
	}
	if err := checkService("etcd"); err == nil || !strings.Contains(err.Error(), "containerd, docker, sshd") {
		t.Errorf("checkService(etcd) = %v", err)
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f78)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f78)\n\tlibgone.so => not found\n"
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if diff := cmp.Diff(want, parseLdd(out)); diff != "" {
		t.Errorf("parseLdd (-want +got):\n%s", diff)
	}
}

func TestKubeBuildArgs(t *testing.T) {
	args := kubeBuildArgs("/c/kube/v1.33.13.tmp", "v1.33.13")
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-o /c/kube/v1.33.13.tmp/",
		"k8s.io/component-base/version.gitVersion=v1.33.13",
		"k8s.io/component-base/version.gitMajor=1",
		"k8s.io/component-base/version.gitMinor=33",
		"k8s.io/client-go/pkg/version.gitVersion=v1.33.13",
		"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-proxy",
		"k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes/cmd/kube-scheduler",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("kube build args lack %q: %s", want, joined)
		}
	}
}

// stagingExceptions are the staging replace lines of a kube-build module
// that name another version than the staging modules' v0.Y.Z of its
// Kubernetes, because the module proxy does not serve that one.
var stagingExceptions = map[string]string{
	"v1.32.13 k8s.io/endpointslice": "v0.32.12",
}

// Every release the sandbox builds has its kube-build and etcd-build
// modules, pinning its versions: the directory, go.mod's requires and the
// staging replaces change together.
func TestBuildModulesPinReleases(t *testing.T) {
	for _, r := range KubeReleases() {
		t.Run(r.Kubernetes, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "hack", "kube-build", r.Kubernetes, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := kubeModuleVersion(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if got != r.Kubernetes {
				t.Errorf("hack/kube-build/%s/go.mod requires k8s.io/kubernetes %s", r.Kubernetes, got)
			}
			staging := "v0" + strings.TrimPrefix(r.Kubernetes, "v1")
			replaces := 0
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) != 4 || f[1] != "=>" || !strings.HasPrefix(f[0], "k8s.io/") {
					continue
				}
				replaces++
				want := staging
				if v, ok := stagingExceptions[r.Kubernetes+" "+f[0]]; ok {
					want = v
				}
				if f[3] != want {
					t.Errorf("hack/kube-build/%s/go.mod: %s, want %s", r.Kubernetes, strings.TrimSpace(line), want)
				}
			}
			if replaces < 25 {
				t.Errorf("hack/kube-build/%s/go.mod has %d staging replace lines; k8s.io/kubernetes has about 30", r.Kubernetes, replaces)
			}
			if _, err := os.Stat(filepath.Join("..", "hack", "kube-build", r.Kubernetes, "go.sum")); err != nil {
				t.Error(err)
			}

			b, err = os.ReadFile(filepath.Join("..", "hack", "etcd-build", r.Etcd, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := etcdModuleVersion(string(b)); err != nil || got != r.Etcd {
				t.Errorf("hack/etcd-build/%s/go.mod pins etcd %q (%v)", r.Etcd, got, err)
			}
			if _, err := os.Stat(filepath.Join("..", "hack", "etcd-build", r.Etcd, "go.sum")); err != nil {
				t.Error(err)
			}
		})
	}
	if _, err := kubeModuleVersion("module x\n"); err == nil {
		t.Error("kubeModuleVersion without a require: want an error")
	}
	mixed := "module x\n\nrequire (\n\tgo.etcd.io/etcd/etcdctl/v3 v3.5.16\n\tgo.etcd.io/etcd/etcdutl/v3 v3.5.16\n\tgo.etcd.io/etcd/server/v3 v3.5.17\n)\n"
	if v, err := etcdModuleVersion(mixed); err == nil {
		t.Errorf("etcdModuleVersion of two etcd versions = %s, want an error", v)
	}
}

func TestWriteRootfs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := imageSpec{
		ref:   "x/y:1",
		files: []imageFile{{src: bin, dst: "/usr/local/bin/y", mode: 0o755}},
		dirs:  []imageDir{{"/tmp", 0o1777}},
	}
	var a, b bytes.Buffer
	if err := writeRootfs(&a, spec); err != nil {
		t.Fatal(err)
	}
	if err := writeRootfs(&b, spec); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same inputs gave two different archives")
	}
	var names []string
	tr := tar.NewReader(&a)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: uid %d gid %d mtime %v, want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	want := []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/y"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("archive entries (-want +got):\n%s", diff)
	}

	// The cache: the same inputs are not written again; changed ones are,
	// and replace the old archive.
	cache := filepath.Join(dir, "images")
	img1, made, err := buildArchive(cache, spec)
	if err != nil || !made {
		t.Fatalf("buildArchive = %v, made %v", err, made)
	}
	if _, made, _ := buildArchive(cache, spec); made {
		t.Error("buildArchive made an archive that the cache has")
	}
	if err := os.WriteFile(bin, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img2, made, err := buildArchive(cache, spec)
	if err != nil || !made || img2.Key == img1.Key {
		t.Fatalf("buildArchive after a change = %v, made %v, key changed %v", err, made, img2.Key != img1.Key)
	}
	if _, err := os.Stat(img1.Archive); err == nil {
		t.Errorf("old archive %s stayed", img1.Archive)
	}
	if got := img2.Changes[len(img2.Changes)-1]; got != "LABEL "+contentLabel+"="+img2.Key {
		t.Errorf("last change = %q, want the content label", got)
	}
}

func TestReadJSONStream(t *testing.T) {
	ok := `{"status":"sha256:abc"}` + "\n"
	if err := readJSONStream(strings.NewReader(ok)); err != nil {
		t.Errorf("readJSONStream(ok): %v", err)
	}
	bad := ok + `{"errorDetail":{"message":"no space left"},"error":"no space left"}`
	if err := readJSONStream(strings.NewReader(bad)); err == nil || err.Error() != "no space left" {
		t.Errorf("readJSONStream(bad) = %v, want no space left", err)
	}
}

func TestKeysAndKnownHosts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k", "id")
	pub, err := ensureKey(path, "c")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode = %v, %v; want 0600", st.Mode(), err)
	}
	again, err := ensureKey(path, "c")
	if err != nil || !bytes.Equal(again.Marshal(), pub.Marshal()) {
		t.Fatalf("ensureKey made a new key for an existing one (%v)", err)
	}
	n := Node{Address: "10.231.0.11", Port: 22}
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, []byte(knownHostsLine(n, pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	addr := fakeAddr("10.231.0.11:22")
	if err := cb("10.231.0.11:22", addr, pub); err != nil {
		t.Errorf("known_hosts does not accept the node's key: %v", err)
	}
	other, err := ensureKey(filepath.Join(dir, "other"), "o")
	if err != nil {
		t.Fatal(err)
	}
	if err := cb("10.231.0.11:22", addr, other); err == nil {
		t.Error("known_hosts accepts another key")
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
