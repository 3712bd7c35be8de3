package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWritePrivate: --out leaves a file of mode 0600 with the new content,
// also over a world-readable file that was there, and through a link.
func TestWritePrivate(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "config")
	if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(old, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{old, link, filepath.Join(dir, "new")} {
		if err := writePrivate(path, []byte("secret")); err != nil {
			t.Fatalf("writePrivate(%s): %v", path, err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != "secret" {
			t.Errorf("%s holds %q (%v), want the new content", path, b, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced by a file (%v, %v)", fi, err)
	}
}
