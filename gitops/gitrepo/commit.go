package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Defaults for FileCommit.
const (
	// DefaultAttempts is how many times CommitFile builds and pushes its
	// commit when others keep pushing first.
	DefaultAttempts = 5
	// DefaultBackoff is the wait before the second attempt; it doubles
	// after each, with jitter.
	DefaultBackoff = 500 * time.Millisecond
)

// maxCompared bounds the file CommitFile reads to compare with the new
// content: a larger one is replaced without being read.
const maxCompared = 8 << 20

// ErrConflict is returned (wrapped) by CommitFile when every attempt lost
// the race against someone else pushing to the branch. Nothing was pushed;
// trying again later is safe.
var ErrConflict = errors.New("someone else pushed to the branch first on every attempt")

// FileCommit is one file to write on a branch, as one commit.
type FileCommit struct {
	// Branch to commit on. When the remote has no such branch it is created
	// with an orphan commit holding only the file (a status branch).
	Branch string
	// Path of the file, relative to the repository root.
	Path string
	// Content of the file.
	Content []byte
	// Same, when set, tells whether the existing content old means the same
	// as Content (say, a status that differs only in a timestamp); then
	// nothing is committed. Equal bytes never make a commit.
	Same func(old []byte) bool
	// Message is the commit message: subject, then an optional body.
	Message string
	// Trailer, such as "Rigger-Status: clusters/prod/cluster.yml", is added
	// as the message's last paragraph, so IsRiggerCommit recognises it.
	Trailer string
	// Author names rigger; its When is set by CommitFile. It is also the
	// committer.
	Author object.Signature
	// Attempts is how many times to build and push the commit when others
	// push first (DefaultAttempts when zero).
	Attempts int
	// Backoff is the first wait between attempts (DefaultBackoff when zero);
	// it doubles after each, with jitter.
	Backoff time.Duration
	// Log, when set, receives a line for each lost race.
	Log *slog.Logger
	// Pushing, when set, is called with the commit's hash before each
	// push of it: a forge may announce the push (a webhook) before the
	// push returns.
	Pushing func(hash string)
}

// CommitFile writes c.Content to c.Path on c.Branch as one commit on top of
// the remote head and pushes it, without a worktree and without force. It
// returns the new commit's hash and changed=true, or the head's hash and
// changed=false when the file already holds that content (or c.Same says
// so). When someone pushes to the branch between the fetch and the push,
// the branch is fetched again and the commit made again on the new head, up
// to c.Attempts times; their commit is kept as the new commit's ancestor.
func (r *Repo) CommitFile(ctx context.Context, c FileCommit) (hash string, changed bool, err error) {
	p, err := cleanPath(c.Path)
	if err == nil {
		err = validBranch(c.Branch)
	}
	if err == nil && strings.TrimSpace(c.Message) == "" {
		err = errors.New("commit message is empty")
	}
	if err == nil && (c.Author.Name == "" || c.Author.Email == "") {
		err = errors.New("commit author needs a name and an e-mail")
	}
	if err != nil {
		return "", false, r.errorf("commit %s on %s of %s: %w", c.Path, c.Branch, r.remote.url, err)
	}
	c.Path = p
	attempts, backoff := c.Attempts, c.Backoff
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	if backoff <= 0 {
		backoff = DefaultBackoff
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Each retry waits twice as long as the one before, jittered.
	attempt := 0
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: backoff, Factor: 2, Jitter: 1, Steps: attempts},
		func(ctx context.Context) (bool, error) {
			attempt++
			hash, changed, err = r.commitOnce(ctx, c)
			if errors.Is(err, errMoved) {
				log.Info("branch moved while pushing, committing again on the new head",
					"branch", c.Branch, "path", c.Path, "attempt", attempt)
				return false, nil
			}
			return err == nil, err
		})
	switch {
	case wait.Interrupted(err) && ctx.Err() == nil:
		return "", false, r.errorf("commit %s on %s of %s: %w (%d attempts): it will be tried again on the next reconcile",
			c.Path, c.Branch, r.remote.url, ErrConflict, attempts)
	case err != nil:
		return "", false, r.errorf("commit %s on %s of %s: %w", c.Path, c.Branch, r.remote.url, err)
	}
	return hash, changed, nil
}

// errMoved means the push lost a race: the branch moved on the remote.
var errMoved = errors.New("branch moved on the remote")

// commitOnce fetches the branch, commits the file on its head and pushes.
// It returns errMoved when the push failed because the branch moved.
func (r *Repo) commitOnce(ctx context.Context, c FileCommit) (string, bool, error) {
	head, exists, err := r.fetchHead(ctx, c.Branch)
	if err != nil {
		return "", false, fmt.Errorf("fetch: %w", err)
	}
	commit, changed, err := r.build(c, head, exists)
	if err != nil || !changed {
		return commit.String(), false, err
	}
	if r.beforePush != nil {
		r.beforePush()
	}
	if c.Pushing != nil {
		c.Pushing(commit.String())
	}
	perr := r.push(ctx, c.Branch, commit, head, exists)
	if perr == nil {
		return commit.String(), true, nil
	}
	// Whether the push lost a race is read from the remote, not from the
	// error's text: fetch again and look at the head.
	now, nowExists, ferr := r.fetchHead(ctx, c.Branch)
	switch {
	case ferr != nil:
		return "", false, fmt.Errorf("push: %w", errors.Join(perr, fmt.Errorf("fetch after failed push: %w", ferr)))
	case nowExists && now == commit:
		return commit.String(), true, nil // pushed; only the answer was lost
	case nowExists != exists || now != head:
		return "", false, fmt.Errorf("push: %w: %w", errMoved, perr)
	default:
		return "", false, fmt.Errorf("push (check write access to the branch and its protection rules): %w", perr)
	}
}

// build makes the commit that puts the file on head (an orphan commit when
// the branch does not exist). changed is false, and the hash head's, when
// the file already holds the content.
func (r *Repo) build(c FileCommit, head plumbing.Hash, exists bool) (plumbing.Hash, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var root *object.Tree
	var parents []plumbing.Hash
	if exists {
		hc, err := r.repo.CommitObject(head)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("read head %s: %w", head, err)
		}
		if root, err = hc.Tree(); err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("read tree of head %s: %w", head, err)
		}
		old, ok, err := r.readLocked(root, c.Path, maxCompared)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("read current %s: %w", c.Path, err)
		}
		if ok && old.Content != nil && (bytes.Equal(old.Content, c.Content) || (c.Same != nil && c.Same(old.Content))) {
			return head, false, nil
		}
		parents = []plumbing.Hash{head}
	}
	blob, err := r.storeBlob(c.Content)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("write blob: %w", err)
	}
	tree, err := r.putFile(root, strings.Split(c.Path, "/"), blob)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("write trees: %w", err)
	}
	sig := c.Author
	sig.When = r.now()
	commit := &object.Commit{
		Author:       sig,
		Committer:    sig,
		Message:      message(c.Message, c.Trailer),
		TreeHash:     tree,
		ParentHashes: parents,
	}
	obj := r.repo.Storer.NewEncodedObject()
	if err := commit.Encode(obj); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("encode commit: %w", err)
	}
	h, err := r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("store commit: %w", err)
	}
	return h, true, nil
}

// push sends commit to the branch as a fast-forward of head (a creation when
// the branch did not exist). Never forced.
func (r *Repo) push(ctx context.Context, branch string, commit, head plumbing.Hash, exists bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	dst := plumbing.NewBranchReferenceName(branch)
	opts := &git.PushOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(commit.String() + ":" + dst.String())},
		Auth:       r.remote.auth,
	}
	if exists {
		// Compare-and-swap: refuse to send anything unless the remote
		// still points at the head the commit was built on.
		opts.RequireRemoteRefs = []config.RefSpec{config.RefSpec(head.String() + ":" + dst.String())}
	}
	err := r.repo.PushContext(ctx, opts)
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return withHint(err)
	}
	// The branch as last fetched is now the commit: ReadFile of the
	// branch sees it without another fetch.
	tracking := plumbing.NewHashReference(plumbing.NewRemoteReferenceName(remoteName, branch), commit)
	if err := r.repo.Storer.SetReference(tracking); err != nil {
		return fmt.Errorf("record the pushed commit as %s: %w", tracking.Name(), err)
	}
	return nil
}

// storeBlob writes content as a blob; the caller holds r.mu.
func (r *Repo) storeBlob(content []byte) (plumbing.Hash, error) {
	obj := r.repo.Storer.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(content); err != nil {
		w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.repo.Storer.SetEncodedObject(obj)
}

// putFile stores the tree that is t (nil: empty) with the file at parts set
// to blob, and the trees below it that change, and returns its hash. The
// caller holds r.mu.
func (r *Repo) putFile(t *object.Tree, parts []string, blob plumbing.Hash) (plumbing.Hash, error) {
	var entries []object.TreeEntry
	if t != nil {
		entries = append(entries, t.Entries...)
	}
	name := parts[0]
	i := -1
	for j, e := range entries {
		if e.Name == name {
			i = j
			break
		}
	}
	var entry object.TreeEntry
	if len(parts) == 1 {
		mode := filemode.Regular
		if i >= 0 {
			switch entries[i].Mode {
			case filemode.Executable:
				mode = filemode.Executable
			case filemode.Regular, filemode.Deprecated:
			default:
				return plumbing.ZeroHash, fmt.Errorf("%s exists and is not a regular file", name)
			}
		}
		entry = object.TreeEntry{Name: name, Mode: mode, Hash: blob}
	} else {
		var sub *object.Tree
		if i >= 0 {
			if entries[i].Mode != filemode.Dir {
				return plumbing.ZeroHash, fmt.Errorf("%s exists and is not a directory", name)
			}
			var err error
			if sub, err = r.repo.TreeObject(entries[i].Hash); err != nil {
				return plumbing.ZeroHash, fmt.Errorf("read tree %s: %w", name, err)
			}
		}
		h, err := r.putFile(sub, parts[1:], blob)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("%s/%w", name, err)
		}
		entry = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
	}
	if i >= 0 {
		entries[i] = entry
	} else {
		entries = append(entries, entry)
	}
	sort.Slice(entries, func(a, b int) bool { return treeKey(entries[a]) < treeKey(entries[b]) })
	tree := &object.Tree{Entries: entries}
	obj := r.repo.Storer.NewEncodedObject()
	if err := tree.Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode tree: %w", err)
	}
	return r.repo.Storer.SetEncodedObject(obj)
}

// treeKey is the name git sorts a tree entry by: directories as if their
// name ended in "/".
func treeKey(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

// message joins a commit message and its trailer paragraph.
func message(msg, trailer string) string {
	msg = strings.TrimRight(msg, "\n") + "\n"
	if trailer = strings.TrimSpace(trailer); trailer != "" {
		msg += "\n" + trailer + "\n"
	}
	return msg
}

// IsRiggerCommit reports whether message carries the trailer trailerKey
// (such as "Rigger-Status"): a "Key: value" line in the message's last
// paragraph, which is not its subject. Keys compare case-insensitively,
// as git's do.
func IsRiggerCommit(message, trailerKey string) bool {
	trailerKey = strings.TrimSpace(trailerKey)
	if trailerKey == "" {
		return false
	}
	msg := strings.TrimRight(strings.ReplaceAll(message, "\r\n", "\n"), "\n \t")
	i := strings.LastIndex(msg, "\n\n")
	if i < 0 {
		return false // only a subject
	}
	if strings.TrimSpace(msg[:i]) == "" {
		return false // the last paragraph is the subject
	}
	for _, line := range strings.Split(msg[i+2:], "\n") {
		k, _, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), trailerKey) && !strings.HasPrefix(k, " ") {
			return true
		}
	}
	return false
}
