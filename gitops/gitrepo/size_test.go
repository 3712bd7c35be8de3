package gitrepo

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

// TestLargeFilesAreNotRead: a file larger than the caller's maximum is
// found, with its size, and not read: its size comes from the object
// store before any of it is. The other files are read as usual.
func TestLargeFilesAreNotRead(t *testing.T) {
	const max = 1 << 20
	ctx := context.Background()
	bare := newBare(t)
	// 24 MiB: more than the 16 MiB Find may allocate below, so that reading
	// it would show.
	big := strings.Repeat("# a comment that compresses well\n", 3<<18)
	humanPush(t, bare, "main", map[string]string{
		"clusters/big/cluster.yml":   big,
		"clusters/small/cluster.yml": "name: small\n",
	})
	r, err := Open(ctx, t.TempDir(), fileURL(bare), Auth{})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	files, err := r.Find("main", "clusters", "cluster.yml", max)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Errorf("Find allocated %d MiB: the large file was read", n>>20)
	}
	if len(files) != 2 {
		t.Fatalf("found %d files, want 2", len(files))
	}
	if f := files[0]; f.Path != "clusters/big/cluster.yml" || f.Size != int64(len(big)) || f.Content != nil || f.Blob == "" {
		t.Errorf("large file: %s, %d bytes, %d read, blob %q; want its size and blob, no content", f.Path, f.Size, len(f.Content), f.Blob)
	}
	if small := files[1]; string(small.Content) != "name: small\n" || small.Size != int64(len(small.Content)) {
		t.Errorf("small file: %q, size %d", small.Content, small.Size)
	}

	f, ok, err := r.ReadFile("main", "clusters/big/cluster.yml", max)
	if err != nil || !ok || f.Size != int64(len(big)) || f.Content != nil {
		t.Errorf("ReadFile of the large file = %d bytes read, size %d, %v, %v; want its size, no content", len(f.Content), f.Size, ok, err)
	}
	if f, ok, err := r.ReadFile("main", "clusters/small/cluster.yml", 4); err != nil || !ok || f.Size != 12 || f.Content != nil {
		t.Errorf("ReadFile of 12 bytes with a maximum of 4 = %q, size %d, %v, %v; want no content", f.Content, f.Size, ok, err)
	}
}

// TestCommitFileOverLargeFile: a status.yml pushed larger than CommitFile
// compares is replaced without being read.
func TestCommitFileOverLargeFile(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"clusters/a/status.yml": strings.Repeat("x: y\n", maxCompared/4)})
	r := openAt(t, bare)
	c := statusCommit("main", "clusters/a/status.yml", "ready: true\n")
	c.Same = func([]byte) bool { t.Error("the large file was read to be compared"); return true }
	if _, changed, err := r.CommitFile(context.Background(), c); err != nil || !changed {
		t.Fatalf("CommitFile = changed %v, %v; want the file replaced", changed, err)
	}
	if got := runGit(t, bare, "show", "main:clusters/a/status.yml"); got != "ready: true" {
		t.Errorf("status.yml on main = %.40q", got)
	}
}
