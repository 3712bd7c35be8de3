package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGoProgramBuildArgs(t *testing.T) {
	tests := []struct {
		name string
		prog goProgram
		want []string
		env  string
	}{
		{
			name: "flannel: cgo, static, netgo, version stamp",
			prog: flannelProgram,
			want: []string{"build", "-v", "-trimpath", "-tags", "netgo,osusergo",
				"-ldflags", "-s -w -extldflags=-static -X github.com/flannel-io/flannel/pkg/version.Version=v0.26.1",
				"-o", "/out/", "."},
			env: "CGO_ENABLED=1",
		},
		{
			name: "metrics-server: its version stamp",
			prog: metricsServerProgram,
			want: []string{"build", "-v", "-trimpath",
				"-ldflags", "-s -w -X k8s.io/client-go/pkg/version.gitVersion=v0.7.2",
				"-o", "/out/", "./cmd/metrics-server"},
			env: "CGO_ENABLED=0",
		},
		{
			name: "CNI plugins: several packages into one directory",
			prog: cniPluginsProgram,
			want: []string{"build", "-v", "-trimpath",
				"-ldflags", "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v1.6.2",
				"-o", "/out/", "./plugins/main/bridge", "./plugins/main/loopback", "./plugins/ipam/host-local", "./plugins/meta/portmap", "./plugins/meta/bandwidth"},
			env: "CGO_ENABLED=0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.prog.buildArgs("/out")); diff != "" {
				t.Errorf("build args (-want +got):\n%s", diff)
			}
			env := tt.prog.buildEnv()
			for _, want := range []string{tt.env, "GOFLAGS=-mod=readonly -buildvcs=false", "GOTOOLCHAIN=local"} {
				if !slices.Contains(env, want) {
					t.Errorf("build env %q lacks %q", env, want)
				}
			}
		})
	}
}

func TestGoProgramBinaries(t *testing.T) {
	for _, tt := range []struct {
		prog goProgram
		want []string
	}{
		{flannelProgram, []string{"flannel"}},
		{flannelCNIProgram, []string{"flannel"}},
		{cniPluginsProgram, []string{"bridge", "loopback", "host-local", "portmap", "bandwidth"}},
		{coreDNSProgram, []string{"coredns"}},
		{metricsServerProgram, []string{"metrics-server"}},
		{criDockerdProgram, []string{"cri-dockerd"}},
	} {
		if diff := cmp.Diff(tt.want, tt.prog.Binaries()); diff != "" {
			t.Errorf("%s binaries (-want +got):\n%s", tt.prog.Name, diff)
		}
	}
}

// The cache key follows every input of the build, and only those.
func TestGoProgramKey(t *testing.T) {
	base := flannelProgram
	if base.key() != flannelProgram.key() {
		t.Fatal("the key of one program changes between calls")
	}
	changed := map[string]goProgram{}
	v := base
	v.Version = "v0.26.2"
	changed["version"] = v
	m := base
	m.Module = "example.com/flannel"
	changed["module"] = m
	c := base
	c.CGO = false
	changed["cgo"] = c
	tg := base
	tg.Tags = []string{"netgo"}
	changed["tags"] = tg
	l := base
	l.LDFlags = []string{"-X x.y=z"}
	changed["ldflags"] = l
	pk := base
	pk.Packages = []string{"./cmd/other"}
	changed["packages"] = pk
	pt := base
	pt.Patches = []sourcePatch{{File: "a.go", Old: "x", New: "y"}}
	changed["patches"] = pt
	for what, g := range changed {
		if g.key() == base.key() {
			t.Errorf("changing the %s keeps the cache key", what)
		}
		if g.cacheDir("/c") == base.cacheDir("/c") {
			t.Errorf("changing the %s keeps the cache directory", what)
		}
	}
	if got := base.cacheDir("/c"); !strings.HasPrefix(got, "/c/gobuild/flannel-v0.26.1-") {
		t.Errorf("cache directory %s: want /c/gobuild/flannel-v0.26.1-<key>", got)
	}
	n := base
	n.Name = "flannel2"
	if n.key() != base.key() {
		t.Error("the name, which is not an input of the build, changes the key")
	}
}

func TestGoProgramsDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range goPrograms() {
		if seen[g.Name] {
			t.Errorf("two programs named %s share a cache directory name", g.Name)
		}
		seen[g.Name] = true
		if g.CGO && !strings.Contains(g.ldflags(), "-extldflags=-static") {
			t.Errorf("%s builds with cgo but does not link statically", g.Name)
		}
	}
}

// A cache that has every build is used as it is: no lock, no Go toolchain.
func TestEnsureGoProgramsCached(t *testing.T) {
	cache := t.TempDir()
	progs := []goProgram{coreDNSProgram, criDockerdProgram}
	for _, g := range progs {
		if err := os.MkdirAll(g.cacheDir(cache), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g.cacheDir(cache), ".complete"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", t.TempDir()) // no go
	got, err := ensureGoPrograms(context.Background(), cache, progs, newProgress(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(criDockerdProgram.cacheDir(cache), "cri-dockerd"); got.bin(criDockerdProgram, "cri-dockerd") != want {
		t.Errorf("cri-dockerd at %s, want %s", got.bin(criDockerdProgram, "cri-dockerd"), want)
	}
	if _, err := os.Stat(filepath.Join(cache, "gobuild.lock")); err == nil {
		t.Error("the lock was taken although nothing was built")
	}
}

// A missing build needs the toolchain, and says so.
func TestEnsureGoProgramsNoGo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := ensureGoPrograms(context.Background(), t.TempDir(), []goProgram{coreDNSProgram}, newProgress(nil))
	if err == nil || !strings.Contains(err.Error(), "Go toolchain") {
		t.Fatalf("err = %v, want one that names the Go toolchain", err)
	}
}

func TestPatchedCopy(t *testing.T) {
	mod := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mod, "libdocker"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(mod, "libdocker", "client.go")
	orig := "package libdocker\n\nconst (\n\tMinimumDockerAPIVersion = \"1.42.0\"\n)\n"
	if err := os.WriteFile(src, []byte(orig), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "src")
	if err := patchedCopy(mod, work, criDockerdProgram.Patches[:1]); err != nil {
		t.Fatal(err)
	}
	patched, err := os.ReadFile(filepath.Join(work, "libdocker", "client.go"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(orig, "1.42.0", "1.41.0", 1); string(patched) != want {
		t.Errorf("patched file:\n%s\nwant:\n%s", patched, want)
	}
	if got, _ := os.ReadFile(filepath.Join(work, "go.mod")); string(got) != "module example.com/m\n" {
		t.Errorf("go.mod not copied: %q", got)
	}
	if got, _ := os.ReadFile(src); string(got) != orig {
		t.Error("the module's own file was changed")
	}

	// A patch that no longer applies stops the build.
	if err := os.Chmod(src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("package libdocker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := patchedCopy(mod, work, criDockerdProgram.Patches[:1]); err == nil || !strings.Contains(err.Error(), "occurs 0 times") {
		t.Errorf("err = %v, want one that says the text is not there", err)
	}
}
