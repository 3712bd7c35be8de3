// Package rkerender gives tests hack/rke-render, the program that runs RKE
// v1.8.14's own code on cluster.yml files (its parser, defaults, add-on
// rendering and `rke config`), so that rigger can be compared with RKE.
//
// hack/rke-render is a module of its own, never a dependency of rigger. It
// is built from the Go module cache only: a test that needs it is skipped,
// saying so, when RKE's module or one of its dependencies is not there, and
// with -short.
package rkerender

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rigger/rigger/spec/rkemeta"
)

// Env names a prebuilt hack/rke-render binary to use instead of building it.
const Env = "RIGGER_RKE_RENDER"

// Binary returns the path of hack/rke-render, built into a temporary
// directory of t, or skips t.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not building RKE")
	}
	dir := filepath.Join(moduleRoot(t), "hack", "rke-render")
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/rancher/rke " + rkemeta.RKEVersion; !bytes.Contains(mod, []byte(want)) {
		t.Fatalf("hack/rke-render/go.mod does not require %s, the RKE whose metadata spec/rkemeta holds", want)
	}
	if bin := os.Getenv(Env); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "rke-render")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOTOOLCHAIN=local")
	b, err := cmd.CombinedOutput()
	if err != nil {
		if bytes.Contains(b, []byte("GOPROXY=off")) || bytes.Contains(b, []byte("module lookup disabled")) {
			t.Skipf("RKE %s's module or one of its dependencies is not in the Go module cache (run `go mod download` in hack/rke-render to enable this test):\n%s", rkemeta.RKEVersion, firstLines(b, 3))
		}
		t.Fatalf("build hack/rke-render: %v\n%s", err, b)
	}
	return bin
}

// Run runs hack/rke-render with args and returns its standard output; it
// fails t when the program fails.
func Run(t testing.TB, bin string, args ...string) []byte {
	t.Helper()
	return RunInput(t, bin, nil, args...)
}

// RunInput is Run with in as the program's standard input.
func RunInput(t testing.TB, bin string, in []byte, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rke-render %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// moduleRoot is the directory of rigger's go.mod, above the test's.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/rigger/rigger\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("rigger's go.mod not found above the test's directory")
		}
		dir = parent
	}
}

func firstLines(b []byte, n int) string {
	l := strings.Split(string(bytes.TrimSpace(b)), "\n")
	return strings.Join(l[:min(n, len(l))], "\n")
}
