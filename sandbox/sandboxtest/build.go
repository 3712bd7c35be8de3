package sandboxtest

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildRigger compiles the rigger command as `make build` does (static,
// -trimpath, no symbol table or DWARF, which shortens the link), into the
// test's temporary directory: under `make test` every package comes from the
// build cache `make build` filled and only the link is left. A test that
// needs rigger's binary takes it from here, never from a `go build` of its
// own flags, which on a cold cache compiles the whole module again.
func BuildRigger(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rigger")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "github.com/rigger/rigger/cmd/rigger")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build rigger: %v\n%s", err, msg)
	}
	return out
}

// KubectlVersion is hack/kubectl-build's: the sandbox's default Kubernetes.
const KubectlVersion = "v1.32.13"

// BuildKubectl returns kubectl KubectlVersion: $RIGGER_KUBECTL (make kubectl
// builds it), else built from hack/kubectl-build into the cache once,
// where make kubectl puts it (from a warm Go build cache, a link).
func BuildKubectl(t testing.TB) string {
	t.Helper()
	return cachedBuild(t, "RIGGER_KUBECTL", "kubectl-build/"+KubectlVersion, "kubectl", "kubectl-"+KubectlVersion,
		"-ldflags=-s -w -X k8s.io/component-base/version.gitVersion="+KubectlVersion, "k8s.io/kubernetes/cmd/kubectl")
}

// RKEVersion is the RKE release whose own rke up the tests run: the last,
// the one rigger's table follows (hack/rke-render's module requires it).
const RKEVersion = "v1.8.14"

// BuildRKE returns RKE's own rke binary, RKEVersion: $RIGGER_RKE (make rke
// builds it), else built from hack/rke-render's module (which requires
// github.com/rancher/rke, with RKE's replace lines that go install
// refuses) into the cache once, where make rke puts it.
func BuildRKE(t testing.TB) string {
	t.Helper()
	return cachedBuild(t, "RIGGER_RKE", "rke-render", "rke", "rke-"+RKEVersion,
		"-ldflags=-s -w -X main.VERSION="+RKEVersion, "github.com/rancher/rke")
}

// cachedBuild returns $env, else the binary that `go build` of pkg in the
// module hack/<module> makes, kept in <cache>/<sub>/<name>-<go.sum's
// hash>.
func cachedBuild(t testing.TB, env, module, sub, name, ldflags, pkg string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	src := filepath.Join(RepoRoot(t), "hack", module)
	sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	cache := os.Getenv("RIGGER_CACHE")
	if cache == "" {
		cache = "/var/cache/rigger"
	}
	hash := sha256.Sum256(sum)
	out := filepath.Join(cache, sub, fmt.Sprintf("%s-%x", name, hash[:8]))
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", ldflags, "-o", tmp, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s in %s: %v\n%s", pkg, src, err, msg)
	}
	// Another package's build may have got there first: either will do.
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// RepoRoot is the rigger repository above the test's directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, ExampleCluster)); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no %s above the test's directory: not in the rigger repository", ExampleCluster)
		}
		dir = parent
	}
}
