package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVersionImages(t *testing.T) {
	tests := []struct {
		name, version string
		want          map[string]string
		err           string
	}{
		{"the default", KubernetesVersion, map[string]string{"kubernetes": HyperkubeImage, "etcd": EtcdImage}, ""},
		{"RKE's version name", "v1.32.13-rancher1-3", map[string]string{"kubernetes": "rigger-sandbox/hyperkube:v1.32.13", "etcd": "rigger-sandbox/etcd:v3.5.16"}, ""},
		{"1.33: etcd 3.5.26 or later", "v1.33.13", map[string]string{"kubernetes": "rigger-sandbox/hyperkube:v1.33.13", "etcd": "rigger-sandbox/etcd:v3.5.35"}, ""},
		{"1.34: etcd 3.6", "v1.34.4", map[string]string{"kubernetes": "rigger-sandbox/hyperkube:v1.34.4", "etcd": "rigger-sandbox/etcd:v3.6.16"}, ""},
		{"unknown", "v1.31.4", nil, "builds no Kubernetes v1.31.4: it builds v1.32.13, v1.33.13, v1.34.4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := VersionImages(tt.version)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("VersionImages(%s) error %v, want %q", tt.version, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("VersionImages(%s) (-want +got):\n%s", tt.version, diff)
			}
		})
	}
	if HyperkubeImage != "rigger-sandbox/hyperkube:v1.32.13" || EtcdImage != "rigger-sandbox/etcd:v3.5.16" {
		t.Errorf("default images %s, %s: want RKE v1.8.14's default Kubernetes v1.32.13 with etcd v3.5.16", HyperkubeImage, EtcdImage)
	}
}

func TestReleasesToBuild(t *testing.T) {
	tests := []struct {
		name  string
		asked []string
		want  []string
		err   bool
	}{
		{"nothing asked: the default only", nil, []string{"v1.32.13"}, false},
		{"in release order, once each", []string{"v1.34.4", "v1.32.13", "v1.34.4-rancher1-1"}, []string{"v1.32.13", "v1.34.4"}, false},
		{"the upgrade path", []string{"v1.33.13", "v1.34.4"}, []string{"v1.32.13", "v1.33.13", "v1.34.4"}, false},
		{"the road", []string{"v1.37.2", "v1.35.4", "v1.33.13", "v1.36.3", "v1.34.4"}, []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"}, false},
		{"unknown", []string{"v1.38.0"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := releasesToBuild(tt.asked)
			if (err != nil) != tt.err {
				t.Fatalf("releasesToBuild(%v) error %v, want error %v", tt.asked, err, tt.err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, r.Kubernetes)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("releasesToBuild(%v) (-want +got):\n%s", tt.asked, diff)
			}
		})
	}
}

func TestModuleRequires(t *testing.T) {
	gomod := `module x

go 1.22

require k8s.io/kubernetes v1.32.13 // a comment

require (
	go.etcd.io/etcd/server/v3 v3.5.16
	github.com/a/b v1.0.0 // indirect
)

replace k8s.io/api => k8s.io/api v0.32.13
`
	want := map[string]string{"k8s.io/kubernetes": "v1.32.13", "go.etcd.io/etcd/server/v3": "v3.5.16", "github.com/a/b": "v1.0.0"}
	if diff := cmp.Diff(want, moduleRequires(gomod)); diff != "" {
		t.Errorf("moduleRequires (-want +got):\n%s", diff)
	}
}

// A release's build refuses a module whose go.mod pins another version
// than its directory names, before building anything.
func TestEnsureVersionBuildChecksModule(t *testing.T) {
	src := t.TempDir()
	dir := filepath.Join(src, "kube-build", "v1.33.13")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n\nrequire k8s.io/kubernetes v1.32.13\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	built := false
	b := kubeBuild("v1.33.13")
	b.build = func(context.Context, string, string, *progress) error { built = true; return nil }
	_, err := ensureVersionBuild(context.Background(), t.TempDir(), src, b, newProgress(nil))
	if err == nil || !strings.Contains(err.Error(), "pins Kubernetes v1.32.13, not v1.33.13") || built {
		t.Errorf("ensureVersionBuild of a module pinning another version: %v (built %v)", err, built)
	}
}

// A release's build goes into <cache>/etcd/<version> with its .complete
// marker, once: a second call finds it.
func TestEnsureVersionBuildCaches(t *testing.T) {
	static, err := os.ReadFile(busybox) // any static binary
	if err != nil {
		t.Skipf("no %s here (make prereqs installs it)", busybox)
	}
	src, cache := t.TempDir(), t.TempDir()
	dir := filepath.Join(src, "etcd-build", "v3.6.16")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := "module x\n\nrequire (\n\tgo.etcd.io/etcd/etcdctl/v3 v3.6.16\n\tgo.etcd.io/etcd/etcdutl/v3 v3.6.16\n\tgo.etcd.io/etcd/server/v3 v3.6.16\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	builds := 0
	b := etcdBuild("v3.6.16")
	b.build = func(_ context.Context, source, out string, _ *progress) error {
		builds++
		if source != filepath.Join(src, "etcd-build") {
			t.Errorf("built from %s", source)
		}
		for _, c := range etcdCommands() {
			if err := os.WriteFile(filepath.Join(out, c), static, 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	for range 2 {
		got, err := ensureVersionBuild(context.Background(), cache, src, b, newProgress(nil))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(cache, "etcd", "v3.6.16"); got != want || !complete(got) {
			t.Errorf("built into %s (complete %v), want %s", got, complete(got), want)
		}
	}
	if builds != 1 {
		t.Errorf("%d builds, want 1: the second call finds the first's", builds)
	}
}
