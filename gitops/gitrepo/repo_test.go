package gitrepo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"
)

func TestOpenCloneThenReopen(t *testing.T) {
	ctx := context.Background()
	bare := newBare(t)
	first := humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "nodes: []\n"})
	dir := filepath.Join(t.TempDir(), "clone")

	r, err := Open(ctx, dir, fileURL(bare), Auth{})
	if err != nil {
		t.Fatalf("Open (clone): %v", err)
	}
	head, err := r.Fetch(ctx, "main")
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if head.Hash != first || head.Subject != "human change" || head.When.IsZero() {
		t.Errorf("Fetch = %+v, want hash %s, subject %q and a time", head, first, "human change")
	}
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		t.Errorf("clone is not a bare repository: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); !os.IsNotExist(err) {
		t.Errorf("clone has a .git directory (a worktree), want bare: %v", err)
	}

	// Fetching again with nothing new is not an error.
	if again, err := r.Fetch(ctx, "main"); err != nil || again.Hash != first {
		t.Errorf("second Fetch = %+v, %v; want %s, nil", again, err, first)
	}

	second := humanPush(t, bare, "main", map[string]string{"README": "hi\n"})
	r2, err := Open(ctx, dir, fileURL(bare), Auth{})
	if err != nil {
		t.Fatalf("Open (reopen): %v", err)
	}
	if head, err := r2.Fetch(ctx, "main"); err != nil || head.Hash != second {
		t.Errorf("Fetch after reopen = %+v, %v; want %s", head, err, second)
	}
}

func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"a": "a"})
	other := newBare(t)

	clone := filepath.Join(t.TempDir(), "clone")
	if _, err := Open(ctx, clone, fileURL(bare), Auth{}); err != nil {
		t.Fatal(err)
	}
	notRepo := t.TempDir()
	if err := os.WriteFile(filepath.Join(notRepo, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, dir, url, want string
	}{
		{"clone of another URL", clone, fileURL(other), "not of " + fileURL(other)},
		{"directory that is not a repository", notRepo, fileURL(bare), "not empty and not a git repository"},
		{"unsupported protocol", t.TempDir(), "ftp://example.com/r.git", `protocol "ftp" is not supported`},
		{"remote that does not exist", t.TempDir(), fileURL(filepath.Join(t.TempDir(), "missing.git")), "fetch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(ctx, tt.dir, tt.url, Auth{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(notRepo, "precious")); err != nil {
		t.Errorf("Open touched a directory that is not its clone: %v", err)
	}
}

func TestFetchMissingBranch(t *testing.T) {
	ctx := context.Background()
	bare := newBare(t)
	r, err := Open(ctx, t.TempDir(), fileURL(bare), Auth{})
	if err != nil {
		t.Fatalf("Open of an empty repository: %v", err)
	}
	if _, err := r.Fetch(ctx, "main"); !errors.Is(err, ErrBranchNotFound) {
		t.Errorf("Fetch on empty remote = %v, want ErrBranchNotFound", err)
	}
	humanPush(t, bare, "main", map[string]string{"a": "a"})
	if _, err := r.Fetch(ctx, "nope"); !errors.Is(err, ErrBranchNotFound) {
		t.Errorf("Fetch of missing branch = %v, want ErrBranchNotFound", err)
	}
	if _, err := r.Fetch(ctx, "bad..name"); err == nil {
		t.Error("Fetch of an invalid branch name succeeded")
	}
}

func TestFind(t *testing.T) {
	ctx := context.Background()
	bare := newBare(t)
	files := map[string]string{
		"clusters/a/cluster.yml":   "name: a\n",
		"clusters/a/status.yml":    "ready: true\n",
		"clusters/b/c/cluster.yml": "name: c\n",
		"clusters/cluster.yml.bak": "old\n",
		"other/cluster.yml":        "name: other\n",
	}
	rev := humanPush(t, bare, "main", files)
	r, err := Open(ctx, t.TempDir(), fileURL(bare), Auth{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Fetch(ctx, "main"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, rev, dir string
		want           []string
		wantErr        error
	}{
		{name: "nested dirs", rev: "main", dir: "clusters/", want: []string{"clusters/a/cluster.yml", "clusters/b/c/cluster.yml"}},
		{name: "by hash", rev: rev, dir: "clusters", want: []string{"clusters/a/cluster.yml", "clusters/b/c/cluster.yml"}},
		{name: "whole repository", rev: "main", dir: "", want: []string{"clusters/a/cluster.yml", "clusters/b/c/cluster.yml", "other/cluster.yml"}},
		{name: "one cluster", rev: "main", dir: "clusters/b", want: []string{"clusters/b/c/cluster.yml"}},
		{name: "missing dir", rev: "main", dir: "clsuters", wantErr: object.ErrDirectoryNotFound},
		{name: "dir outside", rev: "main", dir: "../x", wantErr: errAny},
		{name: "unknown rev", rev: "nope", dir: "clusters", wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Find(tt.rev, tt.dir, "cluster.yml", 1<<20)
			if tt.wantErr != nil {
				if err == nil || (tt.wantErr != errAny && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("Find error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Find: %v", err)
			}
			var paths []string
			for _, f := range got {
				paths = append(paths, f.Path)
				if string(f.Content) != files[f.Path] {
					t.Errorf("%s content = %q, want %q", f.Path, f.Content, files[f.Path])
				}
				if want := runGit(t, bare, "rev-parse", "main:"+f.Path); f.Blob != want {
					t.Errorf("%s blob = %s, want %s", f.Path, f.Blob, want)
				}
			}
			if diff := cmp.Diff(tt.want, paths); diff != "" {
				t.Errorf("Find paths (-want +got):\n%s", diff)
			}
		})
	}
}

// errAny in a table means "some error".
var errAny = errors.New("any error")

func TestReadFile(t *testing.T) {
	ctx := context.Background()
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "name: a\n"})
	r, err := Open(ctx, t.TempDir(), fileURL(bare), Auth{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		wantOK     bool
		wantErr    bool
	}{
		{name: "file", path: "clusters/a/cluster.yml", wantOK: true},
		{name: "missing file", path: "clusters/a/status.yml"},
		{name: "missing dir", path: "nope/status.yml"},
		{name: "a directory", path: "clusters/a"},
		{name: "absolute", path: "/etc/passwd", wantErr: true},
		{name: "inside .git", path: ".git/config", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok, err := r.ReadFile("main", tt.path, 1<<20)
			if (err != nil) != tt.wantErr || ok != tt.wantOK {
				t.Fatalf("ReadFile = %+v, %v, %v; want ok=%v, error=%v", f, ok, err, tt.wantOK, tt.wantErr)
			}
			if ok && string(f.Content) != "name: a\n" {
				t.Errorf("content = %q", f.Content)
			}
		})
	}
}
