package gitrepo

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestClonePrivate: the clone holds the whole history of every cluster.yml,
// so nothing in it, nor the directories rigger makes above it, is open to
// others, whatever the umask; a clone an older rigger left open is closed.
func TestClonePrivate(t *testing.T) {
	// The most open umask, so that only the modes rigger asks for count
	// (no test in this package runs in parallel).
	defer syscall.Umask(syscall.Umask(0))
	ctx := context.Background()
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "nodes: []\n"})
	base := t.TempDir()
	dir := filepath.Join(base, "serve", "abc", "clone")

	r, err := Open(ctx, dir, fileURL(bare), Auth{})
	if err != nil {
		t.Fatal(err)
	}
	r.now = fixedNow
	if _, err := r.Fetch(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.CommitFile(ctx, statusCommit("main", "clusters/a/status.yml", "ok\n")); err != nil {
		t.Fatal(err)
	}
	humanPush(t, bare, "main", map[string]string{"README": "more\n"})
	if _, err := r.Fetch(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	open := func() []string {
		var out []string
		for _, p := range []string{filepath.Join(base, "serve"), filepath.Join(base, "serve", "abc")} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o077 != 0 {
				out = append(out, p)
			}
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o077 != 0 {
				out = append(out, fi.Mode().Perm().String()+" "+p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := open(); len(got) > 0 {
		t.Errorf("open to others:\n%v", got)
	}

	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dir, fileURL(bare), Auth{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a clone left open is not closed on Open: %v %v", fi.Mode(), err)
	}
}
