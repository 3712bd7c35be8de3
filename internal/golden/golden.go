// Package golden compares test output with a golden file, and rewrites the
// file from the output when the test runs with -update. Every package's
// golden tests use it, so that `go test ./... -update` rewrites them all.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files from the current output")

// Check fails t when got differs from the file at path (relative to the
// test's package directory), showing the difference; with -update it
// writes got to the file first.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); if intended, run go test with -update:\n%s", path, diff)
	}
}
