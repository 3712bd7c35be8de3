package watch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// waitCall waits for the next call of the watched function.
func waitCall(t *testing.T, calls <-chan string, what string) string {
	t.Helper()
	return testwait.Recv(t, calls, 5*time.Second, "a call after "+what, nil)
}

// noCall checks that the function is not called for a while.
func noCall(t *testing.T, calls <-chan string, what string) {
	t.Helper()
	select {
	case content := <-calls:
		t.Fatalf("a call (%q) after %s", content, what)
	case <-time.After(400 * time.Millisecond):
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.yml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- File(ctx, path, 100*time.Millisecond, func(context.Context) {
			b, _ := os.ReadFile(path)
			calls <- string(b)
		})
	}()
	if got := waitCall(t, calls, "start"); got != "v1" {
		t.Fatalf("first call saw %q", got)
	}

	// Three quick writes are one change.
	write("v2a")
	write("v2b")
	write("v2")
	if got := waitCall(t, calls, "three writes"); got != "v2" {
		t.Errorf("after three writes: %q", got)
	}
	noCall(t, calls, "the debounced writes")

	// An editor's save: a new file renamed over the old one.
	tmp := filepath.Join(dir, ".cluster.yml.swp")
	if err := os.WriteFile(tmp, []byte("v3"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := waitCall(t, calls, "rename over the file"); got != "v3" {
		t.Errorf("after the rename: %q", got)
	}

	// Removed and created again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	write("v4")
	if got := waitCall(t, calls, "remove and create"); got != "v4" {
		t.Errorf("after remove and create: %q", got)
	}

	// Other files in the directory do not count.
	if err := os.WriteFile(filepath.Join(dir, "status.yml"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	noCall(t, calls, "a write to another file")

	cancel()
	if err := testwait.Recv(t, done, 5*time.Second, "File's return after ctx ended", nil); err != nil {
		t.Errorf("File returned %v after ctx ended", err)
	}
}

func TestFileMissingDirectory(t *testing.T) {
	err := File(context.Background(), filepath.Join(t.TempDir(), "no", "such", "cluster.yml"), 0, func(context.Context) {})
	if err == nil {
		t.Fatal("watching a file in a missing directory succeeded")
	}
}
