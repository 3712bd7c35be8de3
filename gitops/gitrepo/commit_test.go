package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// openAt opens a fresh clone of bare with a fixed clock.
func openAt(t *testing.T, bare string) *Repo {
	t.Helper()
	r, err := Open(context.Background(), filepath.Join(t.TempDir(), "clone"), fileURL(bare), Auth{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	r.now = fixedNow
	return r
}

func statusCommit(branch, path, content string) FileCommit {
	return FileCommit{
		Branch:  branch,
		Path:    path,
		Content: []byte(content),
		Message: "status: " + path + "\n\nReconciled.",
		Trailer: "Rigger-Status: " + path,
		Author:  testAuthor,
		Backoff: time.Millisecond,
	}
}

func TestCommitFile(t *testing.T) {
	const cluster = "clusters/prod/cluster.yml"
	tests := []struct {
		name        string
		existing    map[string]string // on main before the commit
		commit      FileCommit
		wantChanged bool
		wantParents int    // of the branch head after CommitFile
		wantFiles   string // `git ls-tree -r --name-only` of the branch head
	}{
		{
			name:        "creates the file beside cluster.yml",
			existing:    map[string]string{cluster: "nodes: []\n"},
			commit:      statusCommit("main", "clusters/prod/status.yml", "ready: true\n"),
			wantChanged: true, wantParents: 1,
			wantFiles: "clusters/prod/cluster.yml\nclusters/prod/status.yml",
		},
		{
			name:        "creates new directories",
			existing:    map[string]string{cluster: "nodes: []\n"},
			commit:      statusCommit("main", "status/a/b/status.yml", "ready: true\n"),
			wantChanged: true, wantParents: 1,
			wantFiles: "clusters/prod/cluster.yml\nstatus/a/b/status.yml",
		},
		{
			name:        "updates the file",
			existing:    map[string]string{cluster: "nodes: []\n", "clusters/prod/status.yml": "ready: false\n"},
			commit:      statusCommit("main", "clusters/prod/status.yml", "ready: true\n"),
			wantChanged: true, wantParents: 1,
			wantFiles: "clusters/prod/cluster.yml\nclusters/prod/status.yml",
		},
		{
			name:      "skips the same bytes",
			existing:  map[string]string{cluster: "nodes: []\n", "clusters/prod/status.yml": "ready: true\n"},
			commit:    statusCommit("main", "clusters/prod/status.yml", "ready: true\n"),
			wantFiles: "clusters/prod/cluster.yml\nclusters/prod/status.yml",
		},
		{
			name:     "skips what Same says means the same",
			existing: map[string]string{cluster: "nodes: []\n", "clusters/prod/status.yml": "ready: true\nseen: 1\n"},
			commit: func() FileCommit {
				c := statusCommit("main", "clusters/prod/status.yml", "ready: true\nseen: 2\n")
				c.Same = func(old []byte) bool { return bytes.HasPrefix(old, []byte("ready: true\n")) }
				return c
			}(),
			wantFiles: "clusters/prod/cluster.yml\nclusters/prod/status.yml",
		},
		{
			name:     "commits when Same says it differs",
			existing: map[string]string{cluster: "nodes: []\n", "clusters/prod/status.yml": "ready: false\n"},
			commit: func() FileCommit {
				c := statusCommit("main", "clusters/prod/status.yml", "ready: true\n")
				c.Same = func(old []byte) bool { return false }
				return c
			}(),
			wantChanged: true, wantParents: 1,
			wantFiles: "clusters/prod/cluster.yml\nclusters/prod/status.yml",
		},
		{
			name:        "orphan status branch",
			existing:    map[string]string{cluster: "nodes: []\n"},
			commit:      statusCommit("rigger-status", "clusters/prod/status.yml", "ready: true\n"),
			wantChanged: true, wantParents: 0,
			wantFiles: "clusters/prod/status.yml",
		},
		{
			name:        "empty repository",
			commit:      statusCommit("main", "clusters/prod/status.yml", "ready: true\n"),
			wantChanged: true, wantParents: 0,
			wantFiles: "clusters/prod/status.yml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bare := newBare(t)
			var before string
			if tt.existing != nil {
				before = humanPush(t, bare, "main", tt.existing)
			}
			r := openAt(t, bare)
			hash, changed, err := r.CommitFile(context.Background(), tt.commit)
			if err != nil {
				t.Fatalf("CommitFile: %v", err)
			}
			if changed != tt.wantChanged {
				t.Fatalf("changed = %v, want %v", changed, tt.wantChanged)
			}
			branch := tt.commit.Branch
			head := runGit(t, bare, "rev-parse", branch)
			if hash != head {
				t.Errorf("CommitFile hash = %s, remote %s is at %s", hash, branch, head)
			}
			if !changed {
				if head != before {
					t.Errorf("unchanged file moved the branch from %s to %s", before, head)
				}
				return
			}
			if got := runGit(t, bare, "show", branch+":"+tt.commit.Path); got+"\n" != string(tt.commit.Content) {
				t.Errorf("pushed content = %q, want %q", got, tt.commit.Content)
			}
			if got := runGit(t, bare, "ls-tree", "-r", "--name-only", branch); got != tt.wantFiles {
				t.Errorf("files on %s = %q, want %q", branch, got, tt.wantFiles)
			}
			parents := strings.Fields(runGit(t, bare, "log", "-1", "--format=%P", branch))
			if len(parents) != tt.wantParents || (tt.wantParents == 1 && parents[0] != before) {
				t.Errorf("parents = %v, want %d (%s)", parents, tt.wantParents, before)
			}
			msg := runGit(t, bare, "log", "-1", "--format=%B", branch)
			if !IsRiggerCommit(msg, "Rigger-Status") {
				t.Errorf("commit message lacks the trailer:\n%s", msg)
			}
			if got := runGit(t, bare, "log", "-1", "--format=%(trailers:key=Rigger-Status,valueonly)", branch); got != tt.commit.Path {
				t.Errorf("git reads trailer %q, want %q", got, tt.commit.Path)
			}
			if got := runGit(t, bare, "log", "-1", "--format=%an <%ae> %at", branch); got != fmt.Sprintf("rigger <rigger@example.com> %d", fixedNow().Unix()) {
				t.Errorf("author = %q", got)
			}
			runGit(t, bare, "fsck", "--strict", "--no-dangling")
		})
	}
}

func TestCommitFileRefuses(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"clusters/prod": "a file, not a dir\n", "dir/x": "x"})
	r := openAt(t, bare)
	tests := []struct {
		name string
		edit func(*FileCommit)
		want string
	}{
		{"path outside", func(c *FileCommit) { c.Path = "../x" }, "inside"},
		{"path in .git", func(c *FileCommit) { c.Path = ".git/hooks/post-update" }, ".git"},
		{"file where a directory is", func(c *FileCommit) { c.Path = "clusters/prod/status.yml" }, "not a directory"},
		{"directory where the file is", func(c *FileCommit) { c.Path = "dir" }, "not a regular file"},
		{"no author", func(c *FileCommit) { c.Author.Email = "" }, "author"},
		{"no message", func(c *FileCommit) { c.Message = " \n" }, "message"},
		{"bad branch", func(c *FileCommit) { c.Branch = "a..b" }, "branch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := statusCommit("main", "status.yml", "x\n")
			tt.edit(&c)
			_, _, err := r.CommitFile(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), fileURL(bare)) {
				t.Fatalf("CommitFile error = %v, want one naming the repository and containing %q", err, tt.want)
			}
		})
	}
}

// TestCommitFileRace pushes a human commit between CommitFile's fetch and
// its push: the push must be refused, and the file committed again on top
// of the human's commit.
func TestCommitFileRace(t *testing.T) {
	tests := []struct {
		name  string
		human map[string]string // what the human pushes in the window
	}{
		{"human edits another file", map[string]string{"clusters/prod/cluster.yml": "nodes: [a, b]\n"}},
		{"human edits the same file", map[string]string{"clusters/prod/status.yml": "edited by hand\n"}},
		{"human creates the status branch", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bare := newBare(t)
			start := humanPush(t, bare, "main", map[string]string{"clusters/prod/cluster.yml": "nodes: [a]\n"})
			r := openAt(t, bare)
			branch, human := "main", tt.human
			if human == nil {
				branch, human = "status", map[string]string{"README": "status lives here\n"}
			}
			var humanHash string
			calls := 0
			r.beforePush = func() {
				calls++
				if calls == 1 {
					humanHash = humanPush(t, bare, branch, human)
				}
			}
			c := statusCommit(branch, "clusters/prod/status.yml", "ready: true\n")
			var announced []string
			c.Pushing = func(hash string) {
				if got := strings.TrimSpace(runGit(t, bare, "rev-parse", "-q", "--verify", branch)); got == hash {
					t.Errorf("Pushing(%s) called after the push", hash)
				}
				announced = append(announced, hash)
			}
			hash, changed, err := r.CommitFile(context.Background(), c)
			if err != nil || !changed {
				t.Fatalf("CommitFile = %s, %v, %v; want a commit", hash, changed, err)
			}
			if calls != 2 {
				t.Errorf("commit built %d times, want 2 (once more after the race)", calls)
			}
			if len(announced) != 2 || announced[1] != hash {
				t.Errorf("Pushing called with %v, want each commit built, the pushed %s last", announced, hash)
			}
			log := strings.Fields(runGit(t, bare, "log", "--format=%H", branch))
			if len(log) == 0 || log[0] != hash {
				t.Fatalf("branch log = %v, want rigger's commit %s on top", log, hash)
			}
			if parent := runGit(t, bare, "log", "-1", "--format=%P", branch); parent != humanHash {
				t.Errorf("rigger's commit has parent %s, want the human's %s", parent, humanHash)
			}
			for p, c := range human {
				if p == "clusters/prod/status.yml" {
					// rigger's content wins the file, but the human's
					// commit and its content stay in history.
					if got := runGit(t, bare, "show", humanHash+":"+p); got+"\n" != c {
						t.Errorf("human's %s = %q, want %q", p, got, c)
					}
					continue
				}
				if got := runGit(t, bare, "show", branch+":"+p); got+"\n" != c {
					t.Errorf("%s on %s = %q, want the human's %q", p, branch, got, c)
				}
			}
			if branch == "main" {
				runGit(t, bare, "merge-base", "--is-ancestor", start, branch)
			}
		})
	}
}

func TestCommitFileGivesUp(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"a": "a\n"})
	r := openAt(t, bare)
	n := 0
	r.beforePush = func() {
		n++
		humanPush(t, bare, "main", map[string]string{"a": fmt.Sprintf("human %d\n", n)})
	}
	c := statusCommit("main", "status.yml", "x\n")
	c.Attempts = 3
	_, _, err := r.CommitFile(context.Background(), c)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("CommitFile = %v, want ErrConflict", err)
	}
	if n != 3 {
		t.Errorf("attempts = %d, want 3", n)
	}
	if got := runGit(t, bare, "show", "main:a"); got != "human 3" {
		t.Errorf("main:a = %q, want the human's last edit", got)
	}
	if got := runGit(t, bare, "rev-list", "--count", "main"); got != "4" {
		t.Errorf("main has %s commits, want 4 (all human)", got)
	}
}

func TestCommitFileBackoffHonoursContext(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"a": "a\n"})
	r := openAt(t, bare)
	n := 0
	r.beforePush = func() {
		n++
		humanPush(t, bare, "main", map[string]string{"a": fmt.Sprintf("human %d\n", n)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c := statusCommit("main", "status.yml", "x\n")
	c.Backoff = time.Hour
	start := time.Now()
	_, _, err := r.CommitFile(ctx, c)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CommitFile = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("CommitFile waited %v after the context ended", d)
	}
}

// TestCommitFileConcurrent commits two paths from two clones at once; both
// must land whichever loses the race.
func TestCommitFileConcurrent(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "a\n", "clusters/b/cluster.yml": "b\n"})
	repos := []*Repo{openAt(t, bare), openAt(t, bare)}
	paths := []string{"clusters/a/status.yml", "clusters/b/status.yml"}
	var wg sync.WaitGroup
	errs := make([]error, len(repos))
	for i := range repos {
		wg.Go(func() {
			c := statusCommit("main", paths[i], fmt.Sprintf("cluster %d\n", i))
			c.Attempts = 10
			c.Backoff = 5 * time.Millisecond
			_, _, errs[i] = repos[i].CommitFile(context.Background(), c)
		})
	}
	wg.Wait()
	for i, p := range paths {
		if errs[i] != nil {
			t.Errorf("CommitFile %s: %v", p, errs[i])
			continue
		}
		if got := runGit(t, bare, "show", "main:"+p); got != fmt.Sprintf("cluster %d", i) {
			t.Errorf("main:%s = %q", p, got)
		}
	}
	if got := runGit(t, bare, "rev-list", "--count", "main"); got != "3" {
		t.Errorf("main has %s commits, want 3", got)
	}
}

// TestCommitFileSameRepoConcurrent uses one Repo from several goroutines,
// as `rigger serve` does for several clusters.
func TestCommitFileSameRepoConcurrent(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"README": "x\n"})
	r := openAt(t, bare)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			c := statusCommit("main", fmt.Sprintf("clusters/%d/status.yml", i), "ok\n")
			c.Attempts = 20
			c.Backoff = 5 * time.Millisecond
			_, _, errs[i] = r.CommitFile(context.Background(), c)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		runGit(t, bare, "cat-file", "-e", fmt.Sprintf("main:clusters/%d/status.yml", i))
	}
}

func TestIsRiggerCommit(t *testing.T) {
	tests := []struct {
		name, msg string
		want      bool
	}{
		{"trailer", "status: prod\n\nRigger-Status: clusters/prod/cluster.yml\n", true},
		{"trailer after body", "status: prod\n\nbody\n\nRigger-Status: x", true},
		{"among other trailers", "s\n\nSigned-off-by: a <a@b>\nrigger-status: x\n", true},
		{"CRLF", "s\r\n\r\nRigger-Status: x\r\n", true},
		{"human commit", "fix nodes\n\nadd node c\n", false},
		{"key in the body, not the last paragraph", "s\n\nRigger-Status: x\n\nmore text", false},
		{"key only in subject", "Rigger-Status: x", false},
		{"key as a prefix of another", "s\n\nRigger-Status-Old: x", false},
		{"indented continuation", "s\n\nA: b\n Rigger-Status: x", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsRiggerCommit(tt.msg, "Rigger-Status"); got != tt.want {
				t.Errorf("IsRiggerCommit(%q) = %v, want %v", tt.msg, got, tt.want)
			}
		})
	}
	if IsRiggerCommit("s\n\nRigger-Status: x", "") {
		t.Error("empty key matched")
	}
}

// FuzzIsRiggerCommit feeds commit messages, which anyone with push access
// writes: no panic, and what CommitFile writes is always recognised.
func FuzzIsRiggerCommit(f *testing.F) {
	f.Add("status\n\nbody", "Rigger-Status", "x")
	f.Add("s\r\n\r\n", "K", "")
	f.Add("\n\n\n", "A", "b")
	f.Fuzz(func(t *testing.T, msg, key, value string) {
		_ = IsRiggerCommit(msg, key)
		key = strings.TrimSpace(key)
		subject, _, _ := strings.Cut(msg, "\n")
		if key == "" || strings.ContainsAny(key, ":\r\n") || strings.ContainsAny(value, "\r\n") ||
			strings.TrimSpace(subject) == "" || strings.ContainsRune(msg, '\r') {
			return
		}
		full := message(msg, key+": "+value)
		if !IsRiggerCommit(full, key) {
			t.Errorf("IsRiggerCommit(%q, %q) = false for a message CommitFile wrote", full, key)
		}
	})
}
