package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/desired"
)

// The rke-tools stand-in has what rigger's kubelet and service-sidekick
// containers use: the entrypoint the kubelet runs from the sidekick's
// volume, cri-dockerd and the entrypoint's shell in that volume, and
// /bin/true, the sidekick's own command.
func TestRKEToolsImage(t *testing.T) {
	s := rkeToolsImageSpec(fakePrograms(t))
	have := imagePaths(s)
	for _, p := range []string{desired.RKEToolsEntrypoint, rkeToolsCRIDockerd, rkeToolsBusybox, "/bin/true", "/bin/sh"} {
		if !have[p] {
			t.Errorf("%s lacks %s", s.ref, p)
		}
	}
	if !slices.Contains(s.changes, "VOLUME "+rkeToolsDir) {
		t.Errorf("%s declares no VOLUME %s: %q", s.ref, rkeToolsDir, s.changes)
	}
	if !strings.HasPrefix(desired.RKEToolsEntrypoint, rkeToolsDir+"/") {
		t.Errorf("the kubelet's entrypoint %s is outside the volume %s", desired.RKEToolsEntrypoint, rkeToolsDir)
	}
	if !slices.Equal(s.systemImages, []string{"kubernetes_services_sidecar"}) {
		t.Errorf("%s serves %v, want kubernetes_services_sidecar", s.ref, s.systemImages)
	}
	// The script's interpreter is in the volume: the kubelet's image has no shell.
	shebang := strings.SplitN(rkeToolsEntrypointScript, "\n", 2)[0]
	if interp := strings.Fields(strings.TrimPrefix(shebang, "#!"))[0]; !have[interp] || !strings.HasPrefix(interp, rkeToolsDir+"/") {
		t.Errorf("entrypoint interpreter %s is not in the volume %s", interp, rkeToolsDir)
	}
}

// The entrypoint starts cri-dockerd as rke-tools' does for the kubelet, and
// the kubelet with the CRI endpoint rigger gives it.
func TestRKEToolsEntrypointCRIDockerd(t *testing.T) {
	for _, want := range []string{
		rkeToolsCRIDockerd + " --network-plugin=cni --cni-conf-dir=/etc/cni/net.d --cni-bin-dir=/opt/cni/bin $PAUSE",
		`--container-runtime-endpoint="$ENDPOINT"`,
		`--pod-infra-container-image=*) PAUSE=$a`,
		`--streaming-bind-addr=${CRIDOCKERD_STREAM_SERVER_ADDRESS:-127.0.0.1}:${CRIDOCKERD_STREAM_SERVER_PORT:-10010} $EXTRA &`,
		`set -- "$@" --cgroup-driver="$CGROUPDRIVER"`,
		`"$@" &`,
		`if [ "${RKE_KUBELET_CRIDOCKERD:-}" != true ]; then`,
	} {
		if !strings.Contains(rkeToolsEntrypointScript, want) {
			t.Errorf("entrypoint lacks %s", want)
		}
	}
	if !strings.HasPrefix(desired.CRIDockerdSocket, "unix://") {
		t.Errorf("rigger's kubelet endpoint %s: the entrypoint waits for a unix:// socket", desired.CRIDockerdSocket)
	}
}

// From Kubernetes 1.35 rigger gives cri-dockerd the pause image after the
// streaming port (desired: the kubelet has no --pod-infra-container-image
// any more), which the entrypoint expands unquoted, as rke-tools' does:
// cri-dockerd gets it as a flag of its own.
func TestRKEToolsEntrypointPauseAfterPort(t *testing.T) {
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("no %s here", busybox)
	}
	start := strings.Index(rkeToolsEntrypointScript, rkeToolsCRIDockerd+" --network-plugin")
	end := strings.Index(rkeToolsEntrypointScript, "$EXTRA &")
	if start < 0 || end < start {
		t.Fatal("entrypoint: no cri-dockerd command line")
	}
	line := strings.Replace(rkeToolsEntrypointScript[start:end], rkeToolsCRIDockerd, "args", 1) + "$EXTRA\n"
	script := `args() { for a in "$@"; do echo "$a"; done; }` + "\nPAUSE= ENDPOINT=unix:///var/run/cri-dockerd.sock EXTRA=\n" +
		"CRIDOCKERD_STREAM_SERVER_PORT='10010 --pod-infra-container-image=registry.example.com/pause:3.10.1'\n" + line
	out, err := runScript(t, script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if !slices.Contains(got, "--streaming-bind-addr=127.0.0.1:10010") || got[len(got)-1] != "--pod-infra-container-image=registry.example.com/pause:3.10.1" {
		t.Errorf("cri-dockerd's arguments:\n%s", out)
	}
}

// The engine's answer to GET /info gives the entrypoint Docker's cgroup
// driver, cgroup version and root directory.
func TestRKEToolsEntrypointReadsDockerInfo(t *testing.T) {
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("no %s here", busybox)
	}
	// The lines of the script that read the engine's answer, with the
	// answer given.
	start := strings.Index(rkeToolsEntrypointScript, "field() {")
	end := strings.Index(rkeToolsEntrypointScript, "if [ -z \"$CGROUPDRIVER\" ]")
	if start < 0 || end < start {
		t.Fatal("entrypoint: no field() and cgroup lines")
	}
	script := "bb=" + busybox + "\ninfo='" + `{"ID":"x","Driver":"overlay2","CgroupDriver":"cgroupfs","CgroupVersion":"1","DockerRootDir":"/var/lib/docker","Labels":["a=b"]}` + "'\n" +
		rkeToolsEntrypointScript[start:end] + `echo "$CGROUPDRIVER|$CGROUPVERSION|$DOCKER_ROOT"` + "\n"
	out, err := runScript(t, script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(out); got != "cgroupfs|1|/var/lib/docker" {
		t.Errorf("driver|version|root = %q, want cgroupfs|1|/var/lib/docker", got)
	}
}

// The kubelet's image has what the kubelet and cri-dockerd run in it.
func TestHyperkubeHasCRIDockerdTools(t *testing.T) {
	needIPTables(t)
	kubeDir := t.TempDir()
	for _, c := range kubeCommands() {
		if err := os.WriteFile(filepath.Join(kubeDir, c), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range kubeletTools() {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s here (make prereqs installs it)", p)
		}
	}
	s, err := hyperkubeSpec(context.Background(), kubeDir, KubernetesVersion, false)
	if err != nil {
		t.Fatal(err)
	}
	have := imagePaths(s)
	for _, p := range []string{"/usr/bin/mount", "/usr/bin/umount", "/usr/bin/nsenter", "/usr/bin/ip", "/usr/bin/socat", "/usr/sbin/conntrack", "/usr/sbin/iptables", "/usr/local/bin/kubelet"} {
		if !have[p] {
			t.Errorf("%s lacks %s", s.ref, p)
		}
	}
	seen := map[string]bool{}
	for _, f := range s.files {
		if seen[f.dst] {
			t.Errorf("%s has %s twice", s.ref, f.dst)
		}
		seen[f.dst] = true
	}
}
