package gitops

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// Leases says that the clusters of mine are held here, and the others by
// replica-b.
func (f *fakeSharer) Leases(_ context.Context, paths []string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for _, p := range paths {
		out[p] = "replica-b"
		if f.mine[p] {
			out[p] = "replica-a"
		}
	}
	return out, nil
}

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
	testwait.For(t, 30*time.Second, "the worker leaving", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.leaving[p] != nil
	})
	share.set(map[string]bool{}) // received once the sync that retired it is over
	if cs := board.Clusters(); len(cs) != 1 || cs[0].Elsewhere || cs[0].Running == nil {
		t.Errorf("the status page shows %+v, want the reconcile under way here (it is handed over once over), not another replica's cluster", cs)
	}
	share.set(map[string]bool{p: true}) // and back, while the reconcile runs
	share.set(map[string]bool{p: true}) // taken once the sync of the one before is over
	if err := pctx.Err(); err != nil {
		t.Fatalf("the reconcile under way was cut short when its cluster went to another replica: %v", err)
	}
	release()
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

// TestBoardShowsClustersHeldElsewhere: with replicas, the status page of
// each shows every cluster of the repository. One held by another replica
// shows that replica and its status.yml as committed (by that replica),
// follows a new commit of it, changes nothing while nothing changed (no
// event for the page, no notification), and goes off the page with its
// cluster.yml; the one held here shows its own reconciles.
func TestBoardShowsClustersHeldElsewhere(t *testing.T) {
	dir := t.TempDir()
	bare, work := filepath.Join(dir, "origin.git"), filepath.Join(dir, "work")
	gitRun(t, dir, "init", "-q", "--bare", "-b", "main", bare)
	gitRun(t, dir, "clone", "-q", bare, work)
	gitRun(t, work, "checkout", "-q", "-b", "main")
	const mine, theirs = "clusters/a/cluster.yml", "clusters/b/cluster.yml"
	writeFile(t, filepath.Join(work, mine), validYML)
	writeFile(t, filepath.Join(work, theirs), strings.Replace(validYML, "cluster_name: c", "cluster_name: b", 1))
	status := func(reason string) string {
		t.Helper()
		f := &StatusFile{APIVersion: "rigger.io/v1", Kind: "ClusterStatus", Cluster: "b", Replica: "replica-b",
			Source:     Source{Repository: "file://" + bare, Branch: "main", Path: theirs},
			Conditions: []Condition{{Type: ConditionReady, Status: conditionFalse, Reason: reason, Message: "as replica-b saw it"}}}
		b, err := f.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	writeFile(t, filepath.Join(work, "clusters/b", StatusFileName), status("NodesUnreachable"))
	gitRun(t, work, "add", ".")
	gitRun(t, work, "commit", "-q", "-m", "two clusters, b's status from replica-b")
	gitRun(t, work, "push", "-q", "origin", "main")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	repo, err := gitrepo.Open(ctx, filepath.Join(dir, "clone"), "file://"+bare, gitrepo.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	share := &fakeSharer{mine: map[string]bool{mine: true}, changed: make(chan struct{})}
	board := NewBoard(0)
	var told sync.Map
	board.Watch(func(u StatusUpdate) { told.Store(u.Path, true) })
	// The clusters given to Elsewhere (the agent endpoint's admission):
	// replica-b's, read, once for each change of its cluster.yml.
	var elsewhereMu sync.Mutex
	var elsewhere []string
	srv, err := New(Config{Repo: repo, RepoURL: "file://" + bare, Branch: "main", Path: "clusters", Interval: time.Hour,
		DriftInterval: time.Hour, StateDir: filepath.Join(dir, "state"), Author: object.Signature{Name: "rigger", Email: "rigger@example.test"},
		Share: share, Board: board, Open: func(*spec.Cluster, reconcile.Options) (Session, error) { return &fakeSession{}, nil },
		Elsewhere: func(c *spec.Cluster) {
			elsewhereMu.Lock()
			defer elsewhereMu.Unlock()
			elsewhere = append(elsewhere, c.ClusterName+" "+strconv.Itoa(len(c.Nodes)))
		}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = srv.Run(ctx)
	}()
	defer func() { cancel(); <-ran }()

	byPath := func() map[string]BoardCluster {
		out := map[string]BoardCluster{}
		for _, c := range board.Clusters() {
			out[c.Path] = c
		}
		return out
	}
	reason := func(c BoardCluster) string {
		if c.Status == nil {
			return ""
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == ConditionReady {
				return cond.Reason
			}
		}
		return ""
	}
	shows := func(want string) func() error {
		return func() error {
			cs := byPath()
			a, b := cs[mine], cs[theirs]
			switch {
			case a.Elsewhere || len(a.Reconciles) == 0:
				return fmt.Errorf("%s shown as %+v, want this replica's, with its reconciles", mine, a)
			case !b.Elsewhere || b.HeldBy != "replica-b" || b.Running != nil:
				return fmt.Errorf("%s shown as %+v, want held elsewhere, by replica-b", theirs, b)
			case reason(b) != want || b.Status.Replica != "replica-b":
				return fmt.Errorf("%s shows Ready's reason %q written by %q, want %q as replica-b committed it", theirs, reason(b), b.Status.Replica, want)
			}
			return nil
		}
	}
	testwait.For(t, 30*time.Second, "both clusters on the page", shows("NodesUnreachable"))

	// Nothing changed: a fetch changes nothing on the board.
	before := board.Since(0).Version
	srv.Trigger()
	share.changed <- struct{}{} // received once the sync of the trigger is over
	share.changed <- struct{}{} // and this one's sync is over too
	if v := board.Since(0).Version; v != before {
		t.Errorf("the board changed (version %d to %d) on fetches that changed nothing", before, v)
	}
	elsewhereMu.Lock()
	if !slices.Equal(elsewhere, []string{"b 1"}) {
		t.Errorf("Elsewhere was given %q, want replica-b's cluster b once (unchanged since)", elsewhere)
	}
	elsewhereMu.Unlock()

	// replica-b commits a new status: shown after the next fetch.
	writeFile(t, filepath.Join(work, "clusters/b", StatusFileName), status("Converged"))
	gitRun(t, work, "commit", "-q", "-am", "b's status from replica-b again")
	push(t, work) // rigger's status commits may come first
	srv.Trigger()
	testwait.For(t, 30*time.Second, "b's new status on the page", shows("Converged"))
	if _, ok := told.Load(theirs); ok {
		t.Errorf("the board's watchers (notifications) were told of %s, which replica-b reconciles", theirs)
	}
	// Its cluster.yml changes: Elsewhere is given it again.
	writeFile(t, filepath.Join(work, theirs), strings.Replace(validYML, "cluster_name: c", "cluster_name: b", 1)+"# changed\n")
	gitRun(t, work, "commit", "-q", "-am", "b's cluster.yml changed")
	push(t, work)
	srv.Trigger()
	testwait.For(t, 30*time.Second, "b's changed cluster.yml given to Elsewhere", func() bool {
		elsewhereMu.Lock()
		defer elsewhereMu.Unlock()
		return slices.Equal(elsewhere, []string{"b 1", "b 1"})
	})

	gitRun(t, work, "rm", "-q", "-r", "clusters/b")
	gitRun(t, work, "commit", "-q", "-m", "b is gone")
	push(t, work)
	srv.Trigger()
	testwait.For(t, 30*time.Second, "b off the page", func() bool { _, ok := byPath()[theirs]; return !ok })
}
