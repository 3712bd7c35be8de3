// Package nodebintest builds a small static Go program for the tests of
// what copies rigger's binary to the nodes (nodebin).
package nodebintest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds a static Go program that prints its arguments, in a
// temporary directory of t, and returns its path. The test is skipped
// where no go command is found.
func Build(t testing.TB) string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build a static binary: %v", err)
	}
	dir := t.TempDir()
	src := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() { fmt.Println(os.Args[1:]) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module nodebintest\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "static")
	cmd := exec.Command(gocmd, "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build a static program: %v\n%s", err, b)
	}
	return out
}
