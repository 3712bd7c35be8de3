package gitrepo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
)

// runGit runs the git CLI in dir, isolated from the user's configuration, and
// returns its trimmed output.
func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.com",
		"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.com",
		"GIT_TERMINAL_PROMPT=0",
	)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// newBare creates an empty bare repository whose default branch is main.
func newBare(t testing.TB) string {
	t.Helper()
	bare := filepath.Join(t.TempDir(), "remote.git")
	runGit(t, "", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	return bare
}

// humanPush commits files (path → content) to branch of bare as a human
// would, through a temporary clone, and returns the commit's hash.
func humanPush(t testing.TB, bare, branch string, files map[string]string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	runGit(t, "", "clone", "--quiet", bare, work)
	if runGit(t, work, "ls-remote", "--heads", "origin", branch) != "" {
		runGit(t, work, "checkout", "--quiet", branch)
	} else {
		runGit(t, work, "checkout", "--quiet", "--orphan", branch)
	}
	for p, c := range files {
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		runGit(t, work, "add", p)
	}
	runGit(t, work, "commit", "--quiet", "-m", "human change")
	runGit(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
	return runGit(t, work, "rev-parse", "HEAD")
}

func fileURL(bare string) string { return "file://" + bare }

var testAuthor = object.Signature{Name: "rigger", Email: "rigger@example.com"}

// fixedNow is the commit time in tests.
func fixedNow() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
