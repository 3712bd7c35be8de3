package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rigger/rigger/spec"
)

// fakePrograms makes every goProgram's binaries as small files in a
// temporary cache.
func fakePrograms(t *testing.T) builtPrograms {
	t.Helper()
	cache := t.TempDir()
	progs := builtPrograms{}
	for _, g := range goPrograms() {
		dir := g.cacheDir(cache)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range g.Binaries() {
			if err := os.WriteFile(filepath.Join(dir, b), []byte(g.Name+" "+b), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		progs[g.Name] = dir
	}
	return progs
}

// imagePaths lists the files and links of an image by path.
func imagePaths(s imageSpec) map[string]bool {
	m := map[string]bool{}
	for _, f := range s.files {
		m[f.dst] = true
	}
	for _, l := range s.links {
		m[l.path] = true
	}
	return m
}

func needIPTables(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(xtables); err != nil {
		t.Skipf("no %s here (make prereqs installs iptables)", xtables)
	}
}

// Every image has what the containers of RKE's templates (flannel-v0.25.1
// and v0.26.4, canal's kube-flannel, coredns-v1.8.3-rancher3,
// metricsserver-v0.7.0) run: their commands, the files those read and the
// programs they call.
func TestAddonImagesHaveWhatTheTemplatesRun(t *testing.T) {
	needIPTables(t)
	specs, err := addonImageSpecs(context.Background(), fakePrograms(t))
	if err != nil {
		t.Fatal(err)
	}
	byRef := map[string]imageSpec{}
	for _, s := range specs {
		byRef[s.ref] = s
	}
	tests := []struct {
		ref   string
		paths []string
		// changes that the template relies on (its command or args only)
		changes []string
	}{
		{
			// command /opt/bin/flanneld --ip-masq --kube-subnet-mgr; flanneld
			// runs iptables, iptables-save and iptables-restore from PATH.
			ref:   FlannelImage,
			paths: []string{"/opt/bin/flanneld", "/usr/sbin/iptables", "/usr/sbin/iptables-save", "/usr/sbin/iptables-restore", xtables},
		},
		{
			// command /install-cni.sh: a shell script that copies
			// /opt/cni/bin/* and writes the conflist, which names the flannel
			// and portmap plugins; flannel delegates to bridge and host-local.
			ref: FlannelCNIImage,
			paths: []string{"/install-cni.sh", "/bin/sh", "/bin/cp", "/bin/mv", "/bin/rm", "/bin/cat", "/bin/ls", "/bin/tr", "/bin/sleep",
				"/opt/cni/bin/flannel", "/opt/cni/bin/portmap", "/opt/cni/bin/bridge", "/opt/cni/bin/host-local", "/opt/cni/bin/loopback", "/opt/cni/bin/bandwidth"},
		},
		{
			// args -conf /etc/coredns/Corefile, no command: the entrypoint.
			ref:     CoreDNSImage,
			paths:   []string{"/coredns"},
			changes: []string{`ENTRYPOINT ["/coredns"]`},
		},
		{
			// args --cert-dir=/tmp …, no command: the entrypoint.
			ref:     MetricsServerImage,
			paths:   []string{"/metrics-server"},
			changes: []string{`ENTRYPOINT ["/metrics-server"]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			s, ok := byRef[tt.ref]
			if !ok {
				t.Fatalf("no image %s among the add-on images", tt.ref)
			}
			have := imagePaths(s)
			for _, p := range tt.paths {
				if !have[p] {
					t.Errorf("%s lacks %s", tt.ref, p)
				}
			}
			for _, c := range tt.changes {
				if !slices.Contains(s.changes, c) {
					t.Errorf("%s lacks %s (has %q)", tt.ref, c, s.changes)
				}
			}
			// Every link points at a file of the image.
			for _, l := range s.links {
				if !have[filepath.Join(filepath.Dir(l.path), l.target)] {
					t.Errorf("%s: link %s -> %s points at nothing", tt.ref, l.path, l.target)
				}
			}
		})
	}
}

// The images serve the system_images keys of rigger's cluster.yml.
func TestAddonImagesSystemImages(t *testing.T) {
	needIPTables(t)
	specs, err := addonImageSpecs(context.Background(), fakePrograms(t))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	st := reflect.TypeOf(spec.SystemImages{})
	for i := range st.NumField() {
		keys[strings.Split(st.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	served := map[string]string{}
	for _, s := range specs {
		for _, k := range s.systemImages {
			if !keys[k] {
				t.Errorf("%s serves %q, which is no system_images key", s.ref, k)
			}
			served[k] = s.ref
		}
	}
	want := map[string]string{
		"flannel":        FlannelImage,
		"canal_flannel":  FlannelImage,
		"flannel_cni":    FlannelCNIImage,
		"coredns":        CoreDNSImage,
		"metrics_server": MetricsServerImage,
	}
	for k, ref := range want {
		if served[k] != ref {
			t.Errorf("system_images.%s = %q, want %q", k, served[k], ref)
		}
	}
}

// TestInstallCNIHasNoNetworkOfItsOwn: the flannel-cni image writes the
// network the DaemonSet gives it, under the name it gives, and no other:
// without CNI_NETWORK_CONFIG or CNI_CONF_NAME it fails, naming the one
// missing, before it writes anything.
func TestInstallCNIHasNoNetworkOfItsOwn(t *testing.T) {
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("no %s here (make prereqs installs busybox-static)", busybox)
	}
	for missing, env := range map[string][]string{
		"CNI_NETWORK_CONFIG": {"CNI_CONF_NAME=10-flannel.conflist"},
		"CNI_CONF_NAME":      {`CNI_NETWORK_CONFIG={"name":"cbr0","plugins":[{"type":"flannel"}]}`},
	} {
		cmd := exec.Command(busybox, "sh", "-c", installCNIScript)
		cmd.Env = append([]string{"PATH=/nonexistent"}, env...)
		out, err := cmd.CombinedOutput()
		if err == nil || string(out) != "install-cni: "+missing+" is not set: the network plugin's manifest gives the node's network\n" {
			t.Errorf("install-cni without %s: %v\n%s", missing, err, out)
		}
	}
}

// The scripts of the images parse in the shell that runs them.
func TestImageScriptsParse(t *testing.T) {
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("no %s here (make prereqs installs busybox-static)", busybox)
	}
	for name, script := range map[string]string{"install-cni.sh": installCNIScript, "entrypoint.sh": rkeToolsEntrypointScript} {
		cmd := exec.Command(busybox, "sh", "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not parse: %v: %s", name, err, out)
		}
	}
}

// A file given by content goes into the archive as it is, and into the key.
func TestImageFileContent(t *testing.T) {
	a := imageSpec{ref: "x:1", files: []imageFile{{content: "#!/bin/sh\necho a\n", dst: "/a.sh", mode: 0o755}}}
	b := imageSpec{ref: "x:1", files: []imageFile{{content: "#!/bin/sh\necho b\n", dst: "/a.sh", mode: 0o755}}}
	ka, err := inputKey(a)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := inputKey(b)
	if err != nil {
		t.Fatal(err)
	}
	if ka == kb {
		t.Error("two contents give one key")
	}
	img, _, err := buildArchive(t.TempDir(), a)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, img.Archive)
	if got := files["a.sh"]; got != "#!/bin/sh\necho a\n" {
		t.Errorf("a.sh in the archive = %q", got)
	}
}

// readTar returns the regular files of a tarball by name.
func readTar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[hdr.Name] = string(b)
		}
	}
}

// runScript runs script with busybox's shell.
func runScript(t *testing.T, script string) (string, error) {
	t.Helper()
	cmd := exec.Command(busybox, "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
