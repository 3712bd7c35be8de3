package gitops

import (
	"context"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/spec"
)

// fakeSharer holds every Lease at once, as a replica alone would, and
// campaigns for the clusters of mine.
type fakeSharer struct {
	mu              sync.Mutex
	mine            map[string]bool
	holds, maxHolds int
	changed         chan struct{}
}

func (f *fakeSharer) ID() string { return "replica-a" }

func (f *fakeSharer) Campaigns([]string) map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.mine)
}

func (f *fakeSharer) Hold(ctx context.Context, _ string, run func(context.Context, <-chan struct{})) error {
	f.mu.Lock()
	f.holds++
	f.maxHolds = max(f.maxHolds, f.holds)
	f.mu.Unlock()
	run(ctx, nil)
	f.mu.Lock()
	f.holds--
	f.mu.Unlock()
	<-ctx.Done() // campaigns until the worker ends
	return nil
}

func (f *fakeSharer) Changed() <-chan struct{} { return f.changed }

func (f *fakeSharer) set(mine map[string]bool) {
	f.mu.Lock()
	f.mine = mine
	f.mu.Unlock()
	f.changed <- struct{}{}
}

// blockingSession's first Plan waits for release, and tells entered its
// context.
type blockingSession struct {
	fakeSession
	entered chan context.Context
	release chan struct{}
	once    *sync.Once
}

func (s *blockingSession) Plan(ctx context.Context) (*decide.Planned, error) {
	s.once.Do(func() {
		s.entered <- ctx
		<-s.release
	})
	return planned(0), nil
}

// TestRetiredWorkerFinishesItsReconcile: a cluster the replica no longer
// campaigns for (it went to another replica) is let go once the reconcile
// under way is over, not cut short; and a worker for it starts again only
// once the old one has ended, never beside it (both would hold its Lease
// under the replica's one identity).
func TestRetiredWorkerFinishesItsReconcile(t *testing.T) {
	dir := t.TempDir()
	bare, work := filepath.Join(dir, "origin.git"), filepath.Join(dir, "work")
	gitRun(t, dir, "init", "-q", "--bare", "-b", "main", bare)
	gitRun(t, dir, "clone", "-q", bare, work)
	gitRun(t, work, "checkout", "-q", "-b", "main")
	const p = "clusters/c/cluster.yml"
	writeFile(t, filepath.Join(work, p), validYML)
	gitRun(t, work, "add", ".")
	gitRun(t, work, "commit", "-q", "-m", "a cluster")
	gitRun(t, work, "push", "-q", "origin", "main")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	repo, err := gitrepo.Open(ctx, filepath.Join(dir, "clone"), "file://"+bare, gitrepo.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	share := &fakeSharer{mine: map[string]bool{p: true}, changed: make(chan struct{})}
	sess := &blockingSession{entered: make(chan context.Context, 1), release: make(chan struct{}), once: &sync.Once{}}
	board := NewBoard(0)
	srv, err := New(Config{Repo: repo, RepoURL: "file://" + bare, Branch: "main", Path: "clusters", Interval: time.Hour,
		StateDir: filepath.Join(dir, "state"), Author: object.Signature{Name: "rigger", Email: "rigger@example.test"},
		Share: share, Board: board, Open: func(*spec.Cluster, reconcile.Options) (Session, error) { return sess, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = srv.Run(ctx)
	}()
	var released sync.Once
	release := func() { released.Do(func() { close(sess.release) }) }
	defer func() { release(); cancel(); <-ran }()

	pctx := testwait.Recv(t, sess.entered, 30*time.Second, "the first reconcile", func(context.Context) bool { return true })
	share.set(map[string]bool{}) // assigned to another replica
	testwait.For(t, 30*time.Second, "the cluster off this replica's status page", func() bool { return len(board.Clusters()) == 0 })
	share.set(map[string]bool{p: true}) // and back, while the reconcile runs
	share.set(map[string]bool{p: true}) // taken once the sync of the one before is over
	if err := pctx.Err(); err != nil {
		t.Fatalf("the reconcile under way was cut short when its cluster went to another replica: %v", err)
	}
	release()
	testwait.For(t, 30*time.Second, "the cluster back on this replica", func() bool { return len(board.Clusters()) == 1 })
	testwait.For(t, 30*time.Second, "a worker holding the cluster again", func() bool {
		share.mu.Lock()
		defer share.mu.Unlock()
		return share.holds == 1
	})
	share.mu.Lock()
	defer share.mu.Unlock()
	if share.maxHolds != 1 {
		t.Errorf("%d workers held the cluster at once, want 1", share.maxHolds)
	}
}
