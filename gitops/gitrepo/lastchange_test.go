package gitrepo

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLastChange: the commit that gave a file its content, whatever
// commits came after, and found again after the file changed back.
func TestLastChange(t *testing.T) {
	dir := t.TempDir()
	bare, work := filepath.Join(dir, "origin.git"), filepath.Join(dir, "work")
	git := func(in string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = in
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(dir, "init", "-q", "--bare", "-b", "main", bare)
	git(dir, "clone", "-q", bare, work)
	git(work, "checkout", "-q", "-b", "main")
	commit := func(file, content string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git(work, "add", file)
		git(work, "commit", "-q", "-m", file)
		return git(work, "rev-parse", "HEAD")
	}
	first := commit("c/cluster.yml", "a\n")
	commit("c/status.yml", "s1\n")
	second := commit("c/cluster.yml", "b\n")
	commit("c/status.yml", "s2\n")
	commit("README.md", "r\n")
	git(work, "push", "-q", "origin", "main")
	r, err := Open(context.Background(), filepath.Join(dir, "clone"), "file://"+bare, Auth{})
	if err != nil {
		t.Fatal(err)
	}
	head, err := r.Fetch(context.Background(), "main")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.LastChange(head.Hash, "c/cluster.yml"); err != nil || got != second {
		t.Errorf("LastChange = %s, %v; want %s (the commit that wrote b)", got, err, second)
	}
	if got, err := r.LastChange(second+"~1", "c/cluster.yml"); err != nil || got != first {
		t.Errorf("LastChange before the change = %s, %v; want %s", got, err, first)
	}
	if _, err := r.LastChange(head.Hash, "../x"); err == nil {
		t.Error("a path outside the repository was accepted")
	}
}
