package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// remoteName is the clone's only remote.
const remoteName = "origin"

// ErrBranchNotFound is returned (wrapped) by Fetch when the remote has no
// such branch.
var ErrBranchNotFound = errors.New("branch not found on the remote")

// Repo is a bare clone of one remote repository in a directory that is kept
// between runs. Its methods may be called from several goroutines; git
// operations on the clone run one at a time.
type Repo struct {
	dir    string
	remote *remote

	mu   sync.Mutex // serialises go-git calls on repo
	repo *git.Repository

	// now stamps commits; time.Now unless a test sets it.
	now func() time.Time
	// beforePush, when set by a test, runs after a commit is built and
	// before it is pushed: the window in which someone else may push.
	beforePush func()
}

// Commit is a branch head.
type Commit struct {
	Hash    string
	When    time.Time // committer time
	Subject string    // first line of Message
	Message string    // full message, for IsRiggerCommit
}

// File is a file read from a commit's tree.
type File struct {
	Path string // relative to the repository root, slash-separated
	// Content is nil when Size is more than the maximum the caller gave:
	// such a file is not read at all.
	Content []byte
	Size    int64
	Blob    string // the blob's hash: equal hashes mean equal content
}

// Open opens the bare clone of url in dir, or creates it when dir is missing
// or empty, and fetches every branch. A dir that holds a clone of another URL,
// or something that is not a git repository, is an error: rigger never
// deletes a directory it did not create.
func Open(ctx context.Context, dir, url string, auth Auth) (*Repo, error) {
	rem, err := newRemote(url, auth)
	if err != nil {
		return nil, redact(fmt.Errorf("open git repository: %w", err), secretsOf(url, auth))
	}
	r := &Repo{dir: dir, remote: rem, now: time.Now}
	if err := r.open(ctx); err != nil {
		return nil, r.errorf("open clone of %s in %s: %w", r.remote.url, dir, err)
	}
	return r, nil
}

func (r *Repo) open(ctx context.Context) error {
	if err := os.MkdirAll(r.dir, privateDir); err != nil {
		return fmt.Errorf("make directory: %w", err)
	}
	repo, err := plainOpen(r.dir)
	switch {
	case err == nil:
		rc, err := repo.Remote(remoteName)
		if err != nil {
			return fmt.Errorf("%s is a git repository without remote %q: remove it or choose another directory", r.dir, remoteName)
		}
		urls := rc.Config().URLs
		if len(urls) != 1 || StripURL(urls[0]) != r.remote.url {
			for i, u := range urls {
				urls[i] = StripURL(u)
			}
			return fmt.Errorf("%s is a clone of %s, not of %s: remove it or choose another directory",
				r.dir, strings.Join(urls, ", "), r.remote.url)
		}
		if urls[0] != r.remote.url {
			// Made by an older rigger, which kept a token in the URL.
			if err := r.forgetCredentials(repo); err != nil {
				return err
			}
		}
		if err := closeToOthers(r.dir); err != nil {
			return err
		}
	case errors.Is(err, git.ErrRepositoryNotExists):
		entries, rerr := os.ReadDir(r.dir)
		if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("read directory: %w", rerr)
		}
		if len(entries) > 0 {
			return fmt.Errorf("%s is not empty and not a git repository: remove it or choose another directory", r.dir)
		}
		if err := closeToOthers(r.dir); err != nil {
			return err
		}
		if repo, err = plainInit(r.dir); err != nil {
			return fmt.Errorf("create bare repository: %w", err)
		}
		_, err = repo.CreateRemote(&config.RemoteConfig{
			Name:  remoteName,
			URLs:  []string{r.remote.url},
			Fetch: []config.RefSpec{config.RefSpec("+refs/heads/*:refs/remotes/" + remoteName + "/*")},
		})
		if err != nil {
			return fmt.Errorf("add remote: %w", err)
		}
	default:
		return fmt.Errorf("open repository: %w", err)
	}
	r.repo = repo
	r.mu.Lock()
	defer r.mu.Unlock()
	err = r.fetchLocked(ctx, "+refs/heads/*:refs/remotes/"+remoteName+"/*")
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return fmt.Errorf("fetch: %w", err)
	}
	return nil
}

// forgetCredentials rewrites the clone's remote URL without credentials.
func (r *Repo) forgetCredentials(repo *git.Repository) error {
	cfg, err := repo.Config()
	if err != nil {
		return fmt.Errorf("read the clone's config: %w", err)
	}
	cfg.Remotes[remoteName].URLs = []string{r.remote.url}
	if err := repo.SetConfig(cfg); err != nil {
		return fmt.Errorf("remove the credentials from the clone's config: %w", err)
	}
	return nil
}

// withHint adds what to do next to the errors a person can fix.
func withHint(err error) error {
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("%w: check the credentials (token file, SSH key) and that they may access the repository", err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("%w: check the repository URL and that the credentials may read it", err)
	default:
		return err
	}
}

// URL is the repository's URL without credentials (StripURL): what may be
// shown in logs and written to status.yml.
func (r *Repo) URL() string { return r.remote.url }

// errorf is fmt.Errorf with the repository's secrets hidden.
func (r *Repo) errorf(format string, args ...any) error {
	return redact(fmt.Errorf(format, args...), r.remote.secrets)
}

// fetchLocked fetches refspec; an up-to-date fetch is not an error. The
// caller holds r.mu.
func (r *Repo) fetchLocked(ctx context.Context, refspec string) error {
	err := r.repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(refspec)},
		Auth:       r.remote.auth,
		Tags:       git.NoTags,
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return withHint(err)
}

// Fetch fetches branch and returns its head. A branch the remote does not
// have is ErrBranchNotFound.
func (r *Repo) Fetch(ctx context.Context, branch string) (Commit, error) {
	if err := validBranch(branch); err != nil {
		return Commit{}, r.errorf("fetch %s from %s: %w", branch, r.remote.url, err)
	}
	hash, ok, err := r.fetchHead(ctx, branch)
	if err != nil {
		return Commit{}, r.errorf("fetch %s from %s: %w", branch, r.remote.url, err)
	}
	if !ok {
		return Commit{}, r.errorf("fetch %s from %s: %w: check the branch name", branch, r.remote.url, ErrBranchNotFound)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.repo.CommitObject(hash)
	if err != nil {
		return Commit{}, r.errorf("read head %s of %s: %w", hash, branch, err)
	}
	return commitOf(c), nil
}

// fetchHead fetches branch and returns the hash of its head on the remote,
// or ok=false when the remote has no such branch.
func (r *Repo) fetchHead(ctx context.Context, branch string) (hash plumbing.Hash, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tracking := plumbing.NewRemoteReferenceName(remoteName, branch)
	err = r.fetchLocked(ctx, "+"+plumbing.NewBranchReferenceName(branch).String()+":"+tracking.String())
	if errors.Is(err, transport.ErrEmptyRemoteRepository) || errors.Is(err, git.NoMatchingRefSpecError{}) {
		// The branch is gone: forget what we knew of it.
		if rerr := r.repo.Storer.RemoveReference(tracking); rerr != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("forget removed branch: %w", rerr)
		}
		return plumbing.ZeroHash, false, nil
	}
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	ref, err := r.repo.Reference(tracking, true)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("read fetched head: %w", err)
	}
	return ref.Hash(), true, nil
}

func commitOf(c *object.Commit) Commit {
	subject, _, _ := strings.Cut(c.Message, "\n")
	return Commit{Hash: c.Hash.String(), When: c.Committer.When, Subject: subject, Message: c.Message}
}

// Find returns every regular file called name under dir (recursively) at
// commit rev, sorted by path. rev is a commit hash or a branch fetched
// before; dir is relative to the repository root ("" or "." for the root).
// A file of more than max bytes is returned without its content. A dir
// that does not exist at rev is an error (wrapping
// object.ErrDirectoryNotFound): a wrong --path must not look like a
// repository without clusters. Symbolic links and submodules are skipped.
func (r *Repo) Find(rev, dir, name string, max int64) ([]File, error) {
	files, err := r.find(rev, dir, name, max)
	if err != nil {
		return nil, r.errorf("find %s under %q at %s in %s: %w", name, dir, rev, r.remote.url, err)
	}
	return files, nil
}

func (r *Repo) find(rev, dir, name string, max int64) ([]File, error) {
	dir, err := cleanDir(dir)
	if err != nil {
		return nil, err
	}
	if name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("file name %q must be a base name", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tree, err := r.treeAt(rev)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		if tree, err = tree.Tree(dir); err != nil {
			if errors.Is(err, object.ErrDirectoryNotFound) {
				return nil, fmt.Errorf("%w: check the path", err)
			}
			return nil, fmt.Errorf("read directory: %w", err)
		}
	}
	w := object.NewTreeWalker(tree, true, nil)
	defer w.Close()
	var files []File
	for {
		p, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("walk tree: %w", err)
		}
		if path.Base(p) != name || !isRegular(e.Mode) {
			continue
		}
		full := path.Join(dir, p)
		f, err := r.file(full, e.Hash, max)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", full, err)
		}
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// ReadFile returns the file at path in commit rev (a hash or a fetched
// branch), without its content when it has more than max bytes, and false
// when there is no regular file at path.
func (r *Repo) ReadFile(rev, path string, max int64) (File, bool, error) {
	p, err := cleanPath(path)
	if err != nil {
		return File{}, false, r.errorf("read %s at %s in %s: %w", path, rev, r.remote.url, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tree, err := r.treeAt(rev)
	if err != nil {
		return File{}, false, r.errorf("read %s at %s in %s: %w", p, rev, r.remote.url, err)
	}
	f, ok, err := r.readLocked(tree, p, max)
	if err != nil {
		return File{}, false, r.errorf("read %s at %s in %s: %w", p, rev, r.remote.url, err)
	}
	return f, ok, nil
}

// readLocked reads the regular file at p in tree, unless it has more
// than max bytes; the caller holds r.mu.
func (r *Repo) readLocked(tree *object.Tree, p string, max int64) (File, bool, error) {
	e, ok, err := r.entry(tree, p)
	if err != nil || !ok || !isRegular(e.Mode) {
		return File{}, false, err
	}
	f, err := r.file(p, e.Hash, max)
	return f, err == nil, err
}

// entry finds the entry at p in tree; ok is false when a part of p is
// missing or is not a directory. The caller holds r.mu.
func (r *Repo) entry(tree *object.Tree, p string) (object.TreeEntry, bool, error) {
	parts := strings.Split(p, "/")
	for i, part := range parts {
		var found *object.TreeEntry
		for j := range tree.Entries {
			if tree.Entries[j].Name == part {
				found = &tree.Entries[j]
				break
			}
		}
		switch {
		case found == nil:
			return object.TreeEntry{}, false, nil
		case i == len(parts)-1:
			return *found, true, nil
		case found.Mode != filemode.Dir:
			return object.TreeEntry{}, false, nil
		}
		var err error
		if tree, err = r.repo.TreeObject(found.Hash); err != nil {
			return object.TreeEntry{}, false, fmt.Errorf("read tree %s: %w", path.Join(parts[:i+1]...), err)
		}
	}
	return object.TreeEntry{}, false, nil
}

// treeAt resolves rev to a commit and returns its root tree; the caller
// holds r.mu.
func (r *Repo) treeAt(rev string) (*object.Tree, error) {
	hash, err := r.resolve(rev)
	if err != nil {
		return nil, err
	}
	c, err := r.repo.CommitObject(hash)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", hash, err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", hash, err)
	}
	return t, nil
}

// resolve turns rev into a commit hash: a full hash as is, else a branch
// fetched from the remote, else any revision go-git understands.
func (r *Repo) resolve(rev string) (plumbing.Hash, error) {
	if plumbing.IsHash(rev) {
		return plumbing.NewHash(rev), nil
	}
	if ref, err := r.repo.Reference(plumbing.NewRemoteReferenceName(remoteName, rev), true); err == nil {
		return ref.Hash(), nil
	}
	h, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("resolve %q (fetch the branch first): %w", rev, err)
	}
	return *h, nil
}

// file returns the file at p, blob h: its size, taken from the object
// store before anything is read, and its content when the size is at
// most max, read through a reader that stops there. The caller holds r.mu.
func (r *Repo) file(p string, h plumbing.Hash, max int64) (File, error) {
	f := File{Path: p, Blob: h.String()}
	size, err := r.repo.Storer.EncodedObjectSize(h)
	if err != nil {
		return File{}, fmt.Errorf("size of blob %s: %w", h, err)
	}
	f.Size = size
	if size > max {
		return f, nil
	}
	b, err := r.repo.BlobObject(h)
	if err != nil {
		return File{}, err
	}
	rd, err := b.Reader()
	if err != nil {
		return File{}, err
	}
	defer rd.Close()
	content, err := io.ReadAll(io.LimitReader(rd, max+1))
	switch {
	case err != nil:
		return File{}, err
	case int64(len(content)) > max:
		return File{}, fmt.Errorf("blob %s holds more than the %d bytes its header says", h, size)
	}
	f.Content = content
	return f, nil
}

func isRegular(m filemode.FileMode) bool {
	return m == filemode.Regular || m == filemode.Executable || m == filemode.Deprecated
}

// cleanDir normalises a directory relative to the repository root; "" is
// the root.
func cleanDir(dir string) (string, error) {
	if dir == "" || dir == "." || dir == "/" {
		return "", nil
	}
	return cleanPath(dir)
}

// cleanPath normalises a slash-separated path relative to the repository
// root and refuses absolute paths, "..", and paths into .git.
func cleanPath(p string) (string, error) {
	c := path.Clean(strings.TrimSuffix(p, "/"))
	if p == "" || c == "." || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q must be relative to the repository root and inside it", p)
	}
	for _, part := range strings.Split(c, "/") {
		if strings.EqualFold(part, ".git") {
			return "", fmt.Errorf("path %q must not be inside .git", p)
		}
	}
	return c, nil
}

// validBranch refuses names that are not valid branch names.
func validBranch(b string) error {
	if b == "" {
		return errors.New("branch name is empty")
	}
	if err := plumbing.NewBranchReferenceName(b).Validate(); err != nil {
		return fmt.Errorf("branch name %q is not valid: %w", b, err)
	}
	return nil
}

// maxHistory bounds how far back LastChange walks.
const maxHistory = 10000

// LastChange is the commit, on the first-parent history of rev, that gave
// path the content it has at rev: the revision a cluster.yml was last
// changed in, the same for everyone who reads it, whatever commits (status
// commits, other files) came after. It walks at most maxHistory commits
// and returns the oldest one reached when the content goes back further.
func (r *Repo) LastChange(rev, path string) (string, error) {
	p, err := cleanPath(path)
	if err != nil {
		return "", r.errorf("find the last change of %s in %s: %w", path, r.remote.url, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	hash, err := r.resolve(rev)
	if err != nil {
		return "", r.errorf("find the last change of %s in %s: %w", p, r.remote.url, err)
	}
	blobAt := func(h plumbing.Hash) (*object.Commit, plumbing.Hash, error) {
		c, err := r.repo.CommitObject(h)
		if err != nil {
			return nil, plumbing.ZeroHash, fmt.Errorf("read commit %s: %w", h, err)
		}
		t, err := c.Tree()
		if err != nil {
			return nil, plumbing.ZeroHash, fmt.Errorf("read tree of %s: %w", h, err)
		}
		e, ok, err := r.entry(t, p)
		if err != nil || !ok {
			return c, plumbing.ZeroHash, err
		}
		return c, e.Hash, nil
	}
	c, want, err := blobAt(hash)
	if err != nil {
		return "", r.errorf("find the last change of %s in %s: %w", p, r.remote.url, err)
	}
	for range maxHistory {
		if len(c.ParentHashes) == 0 {
			break
		}
		parent, blob, err := blobAt(c.ParentHashes[0])
		if err != nil {
			return "", r.errorf("find the last change of %s in %s: %w", p, r.remote.url, err)
		}
		if blob != want {
			break
		}
		c = parent
	}
	return c.Hash.String(), nil
}
