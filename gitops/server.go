package gitops

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// Defaults of Config.
const (
	// DefaultInterval is how often the repository is fetched without a
	// webhook.
	DefaultInterval = time.Minute
	// DefaultDriftInterval is how often each cluster's nodes are checked
	// against its unchanged cluster.yml (and drift repaired).
	DefaultDriftInterval = 5 * time.Minute
	// DefaultMaxConcurrent is how many clusters are reconciled at once.
	DefaultMaxConcurrent = 4
	// DefaultParseTimeout is how long reading one cluster.yml may take.
	// Within spec's bounds it takes a few seconds at most: more is a file
	// made to cost time, or a machine too loaded to reconcile anyway.
	DefaultParseTimeout = 30 * time.Second
	// jitter is the share of Interval by which each poll is moved, so that
	// many servers do not fetch at the same moment.
	jitter = 0.1
	// ClusterFileName is the file that makes a directory a cluster.
	ClusterFileName = "cluster.yml"
	// ServeDir is serve's own directory in StateDir (the agent tunnel's
	// CA and tokens, the clone): no cluster may be named so.
	ServeDir = "serve"
	// TrailerKey marks rigger's status commits.
	TrailerKey = "Rigger-Status"
)

// Repository is the git repository serve follows (gitrepo.Repo): the
// server reads cluster.yml files from it and commits status.yml to it.
type Repository interface {
	Fetch(ctx context.Context, branch string) (gitrepo.Commit, error)
	Find(rev, dir, name string, max int64) ([]gitrepo.File, error)
	ReadFile(rev, path string, max int64) (gitrepo.File, bool, error)
	LastChange(rev, path string) (string, error)
	CommitFile(ctx context.Context, c gitrepo.FileCommit) (hash string, changed bool, err error)
}

var _ Repository = (*gitrepo.Repo)(nil)

// Config is what a Server follows and how.
type Config struct {
	Repo Repository
	// RepoURL names the repository in status.yml (no credentials).
	RepoURL string
	// Branch holds the cluster.yml files; Path is the directory searched
	// for them ("" or "." for the whole repository).
	Branch, Path string
	// StatusBranch, when set, receives status.yml commits instead of
	// Branch (same paths).
	StatusBranch string
	// Interval between fetches (DefaultInterval), moved by up to 10%.
	Interval time.Duration
	// DriftInterval between drift checks of each cluster
	// (DefaultDriftInterval).
	DriftInterval time.Duration
	// MaxConcurrent bounds the clusters reconciled at once
	// (DefaultMaxConcurrent). A free slot goes to a changed cluster.yml
	// before the drift checks, retries and snapshots waiting (slots).
	MaxConcurrent int
	// ParseTimeout bounds the reading of one cluster.yml
	// (DefaultParseTimeout); a file read no faster stalls its cluster.
	ParseTimeout time.Duration
	// Decrypt reads the cluster.yml files encrypted with SOPS
	// (sopsfile.Decrypter{}.Decrypt, keys where the sops CLI takes them,
	// when nil).
	Decrypt spec.Decrypter
	// StateDir holds one state directory per cluster, named for its
	// cluster_name, as `rigger apply` lays them out: a CLI apply with the
	// same base shares the state and the lock.
	StateDir string
	// LoadState, when set, keeps each cluster's state elsewhere (Kubernetes
	// Secrets: secretstate.Store.Load): its directory in StateDir is then a
	// working copy, filled by LoadState each time the cluster is taken up
	// and written through by every write of its state. An error stalls the
	// cluster when only a person can help (stall.Classify), else retries.
	LoadState func(ctx context.Context, cluster, dir string) error
	// StateFileAt, when set, names for people where the state file file
	// (slash separated) of cluster is kept, and how to remove it (with
	// LoadState: its Secret and the kubectl command). Nil: the file in
	// StateDir.
	StateFileAt func(cluster, file string) string
	// Author signs the status commits.
	Author object.Signature
	// Open opens a reconcile session (reconcile.Open when nil; tests
	// give a transport, or a fake).
	Open Opener
	// PendingAgents, when set, lists a cluster's pending agents (agents
	// of nodes its cluster.yml does not declare with transport: agent)
	// for its status.yml.
	PendingAgents func(cluster string) []string
	// AgentTunnels, when set, gives the tunnel of each of a cluster's
	// nodes with transport: agent, for its status.yml.
	AgentTunnels func(cluster string) []AgentTunnel
	// Elsewhere, when set and with Share, is given each cluster.yml of
	// the repository that another replica holds, read as its reconcile
	// reads it, at each change of the file: the agent endpoint admits its
	// agent nodes on every replica, since a node's agent reaches any.
	Elsewhere func(c *spec.Cluster)
	Log       *slog.Logger
	// Metrics receives what happens (nil: none).
	Metrics *Metrics
	// Now gives the time (time.Now when nil).
	Now func() time.Time
	// Events, when set, is told what happens, for tests and benchmarks.
	Events func(Event)
	// Board, when set, is kept up to date with every cluster's status and
	// reconciles (the status page, notifications).
	Board *Board
	// IgnoreDockerVersion skips the check of the nodes' Docker versions
	// (reconcile.Options.IgnoreDockerVersion): serve's --ignore-docker-version.
	IgnoreDockerVersion bool
	// Self is the pod serve runs as, in a Kubernetes cluster
	// (reconcile.Options.Self); nil when it does not run in a pod.
	Self *observe.PodRef
	// Answers is the pool the weight of every cluster's nodes' Docker
	// answers is drawn from (reconcile.Options.Answers): one for the
	// whole server, so that many clusters reconciled at once do not
	// together take more memory than it bounds. Nil: one of
	// transport.DefaultAnswerPool.
	Answers *transport.AnswerPool
	// Share, when set, shares the clusters among the replicas of serve
	// (replicas.Set): this server keeps workers only for the clusters it
	// campaigns for, and a worker runs only while it holds its cluster's
	// Lease. Nil: this server reconciles every cluster.
	Share Sharer
}

// Sharer shares the clusters among the replicas of serve (replicas.Set).
type Sharer interface {
	// ID names this replica (status.yml, metrics, logs).
	ID() string
	// Campaigns is told the paths of every cluster.yml and returns those
	// this replica campaigns for.
	Campaigns(paths []string) map[string]bool
	// Hold runs run while this replica holds the Lease of the cluster.yml
	// at path, until ctx ends; run's context ends when the Lease is lost,
	// and handOver is closed when the cluster is to go to another replica
	// once the reconcile under way is over.
	Hold(ctx context.Context, path string, run func(ctx context.Context, handOver <-chan struct{})) error
	// Changed is signalled when Campaigns may answer otherwise.
	Changed() <-chan struct{}
	// Leases is told the paths of every cluster.yml at the head just
	// read: it returns the replica holding each one's Lease ("" for
	// none), and deletes the Leases of cluster.yml files not among them
	// that nobody holds.
	Leases(ctx context.Context, paths []string) (holders map[string]string, err error)
}

// Event is something a Server did, for Config.Events.
type Event struct {
	Kind EventKind
	// Path is the cluster.yml concerned ("" for fetches).
	Path string
	// Revision is the commit fetched or reconciled.
	Revision string
	// Trigger is why a reconcile runs (start, change, drift-check,
	// retry, snapshot: status.yml's lastReconcile.trigger).
	Trigger string
	// Err is set when the step failed.
	Err error
}

// EventKind says what an Event is.
type EventKind string

// Event kinds.
const (
	EventFetched EventKind = "fetched"
	// EventReconcileWaiting: a reconcile waits for a slot (all
	// MaxConcurrent are taken); Trigger is why it is to run.
	EventReconcileWaiting EventKind = "reconcile-waiting"
	EventReconcileStart   EventKind = "reconcile-start"
	EventReconcileEnd     EventKind = "reconcile-end"
	EventStatusWritten    EventKind = "status-written"
)

// Server follows a git repository: every cluster.yml under Config.Path is
// one cluster, reconciled by a worker of its own when its content changes,
// at every drift check and when a snapshot is due.
type Server struct {
	cfg     Config
	trigger chan struct{}
	slots   *slots
	// own are the commits serve made (status.yml), for OwnCommit.
	own     *commitSet
	ready   atomic.Bool
	mu      sync.Mutex
	workers map[string]*worker // by cluster.yml path
	// leaving are the workers stopped and not yet ended, by path: no
	// other starts for that path until it has (with Share, both would
	// hold the cluster's Lease under this replica's one identity).
	leaving map[string]*worker
	wg      sync.WaitGroup
	// parseMu makes workers read their cluster.yml one at a time: spec
	// bounds the memory of reading one file, this bounds serve's.
	parseMu sync.Mutex
	// toldElsewhere is the blob of each cluster.yml last given to
	// Config.Elsewhere, by path (sync's alone).
	toldElsewhere map[string]string
}

// New checks cfg and makes a Server; Run starts it.
func New(cfg Config) (*Server, error) {
	if cfg.Repo == nil || cfg.Branch == "" || cfg.StateDir == "" {
		return nil, errors.New("gitops: a repository, a branch and a state directory are needed")
	}
	if cfg.Author.Name == "" || cfg.Author.Email == "" {
		return nil, errors.New("gitops: the status commits' author needs a name and an email")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DriftInterval <= 0 {
		cfg.DriftInterval = DefaultDriftInterval
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.ParseTimeout <= 0 {
		cfg.ParseTimeout = DefaultParseTimeout
	}
	if cfg.Open == nil {
		cfg.Open = openReconcile
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Events == nil {
		cfg.Events = func(Event) {}
	}
	if cfg.Answers == nil {
		cfg.Answers = transport.NewAnswerPool(transport.DefaultAnswerPool)
	}
	cfg.Path = path.Clean("/" + cfg.Path)[1:]
	cfg.Repo = &lockedRepo{r: cfg.Repo}
	return &Server{cfg: cfg, trigger: make(chan struct{}, 1), slots: newSlots(cfg.MaxConcurrent),
		own: newCommitSet(rememberedCommits), workers: map[string]*worker{}, leaving: map[string]*worker{}}, nil
}

// Trigger asks for a fetch now (a webhook's push); it never blocks.
func (s *Server) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default: // a fetch is already asked for
	}
}

// Ready says whether the repository was fetched at least once.
func (s *Server) Ready() bool { return s.ready.Load() }

// Run fetches the repository now, then at every interval and on every
// Trigger, until ctx ends; it then waits for the reconciles under way to
// stop (they see ctx end between steps). It may be run again after it
// returned (a replica that leads again), not twice at once.
func (s *Server) Run(ctx context.Context) error {
	defer func() {
		s.wg.Wait()
		// A later Run (leadership regained) starts the workers again.
		s.mu.Lock()
		s.workers, s.leaving = map[string]*worker{}, map[string]*worker{}
		s.mu.Unlock()
	}()
	var changed <-chan struct{} // replicas came or went: who reconciles what
	if s.cfg.Share != nil {
		changed = s.cfg.Share.Changed()
	}
	for {
		s.sync(ctx)
		wait := time.NewTimer(jittered(s.cfg.Interval))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil
		case <-s.trigger:
			wait.Stop()
		case <-changed:
			wait.Stop()
		case <-wait.C:
		}
	}
}

// jittered is d moved by up to ±10%.
func jittered(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*2-1)*jitter*float64(d))
}

// sync fetches the branch and hands each cluster.yml to its worker:
// workers start for new files and stop for files gone.
func (s *Server) sync(ctx context.Context) {
	log := s.cfg.Log
	head, err := s.cfg.Repo.Fetch(ctx, s.cfg.Branch)
	s.cfg.Metrics.fetch(err)
	if err != nil {
		log.Error("fetch failed; the clusters keep their last revision", "branch", s.cfg.Branch, "err", err)
		s.cfg.Events(Event{Kind: EventFetched, Err: err})
		return
	}
	files, err := s.cfg.Repo.Find(head.Hash, s.cfg.Path, ClusterFileName, spec.MaxFileSize)
	if err != nil {
		log.Error("list cluster files", "revision", head.Hash, "path", s.cfg.Path, "err", err)
		s.cfg.Events(Event{Kind: EventFetched, Revision: head.Hash, Err: err})
		return
	}
	s.ready.Store(true)
	log.Debug("fetched", "branch", s.cfg.Branch, "revision", head.Hash, "clusters", len(files))
	s.cfg.Events(Event{Kind: EventFetched, Revision: head.Hash})
	var mine map[string]bool // the clusters this replica campaigns for
	if s.cfg.Share != nil {
		paths := make([]string, len(files))
		for i, f := range files {
			paths[i] = f.Path
		}
		mine = s.cfg.Share.Campaigns(paths)
		holders, err := s.cfg.Share.Leases(ctx, paths)
		if err != nil {
			log.Warn("read the clusters' Leases: the status page keeps the holders it showed", "err", err)
		}
		fresh := err == nil
		defer func() { // once s.mu is unlocked
			s.showElsewhere(ctx, head.Hash, paths, holders, fresh)
			s.tellElsewhere(ctx, head.Hash, files, holders, fresh)
		}()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, f := range files {
		seen[f.Path] = true
		w := s.workers[f.Path]
		if mine != nil && !mine[f.Path] {
			if w != nil {
				log.Info("cluster assigned to another replica: no longer campaigning for it, once the reconcile under way is over",
					"path", f.Path, "replica", s.cfg.Share.ID())
				w.retire()
				s.leave(w)
			}
			continue
		}
		if l := s.leaving[f.Path]; w == nil && l != nil {
			select {
			case <-l.done:
				delete(s.leaving, f.Path)
			default:
				continue // started at the sync after it ended (it asks for one)
			}
		}
		ref := clusterRef{Path: f.Path, Content: f.Content, Size: f.Size, Blob: f.Blob, Head: head.Hash}
		if w != nil && w.current().Blob == f.Blob {
			ref.Revision = w.current().Revision // unchanged: no history walk
		} else {
			// The revision of a cluster.yml is the commit that last changed
			// it: every server names the same one, and status commits after
			// it do not change it.
			rev, err := s.cfg.Repo.LastChange(head.Hash, f.Path)
			if err != nil {
				log.Warn("find the commit that last changed a cluster.yml", "path", f.Path, "err", err)
				rev = head.Hash
			}
			ref.Revision = rev
		}
		if w == nil {
			w = s.startWorker(ctx, ref)
			s.workers[f.Path] = w
		}
		w.offer(ref)
	}
	for p, w := range s.workers {
		if !seen[p] {
			log.Warn("cluster.yml is gone from the repository: its cluster is no longer reconciled (its nodes are left as they are)", "path", p)
			w.stop()
			s.leave(w)
			s.cfg.Board.removed(p)
		}
	}
}

// showElsewhere puts on the board (the status page) the clusters of the
// repository at head that another replica reconciles: each with the
// replica holding its Lease, as holders says, and its status.yml as
// committed, which that replica wrote (with StatusBranch, fetched first).
// A cluster whose Lease this replica holds is its worker's to show. The
// board keeps what it showed when the Leases could not be read (!fresh).
func (s *Server) showElsewhere(ctx context.Context, head string, paths []string, holders map[string]string, fresh bool) {
	at := map[string]bool{}
	for _, p := range paths {
		at[p] = true
	}
	s.cfg.Board.retain(at)
	if !fresh || s.cfg.Board == nil {
		return
	}
	me := s.cfg.Share.ID()
	s.mu.Lock()
	here := map[string]bool{} // a reconcile handed over may still run, in leaving
	for _, ws := range []map[string]*worker{s.workers, s.leaving} {
		for p, w := range ws {
			here[p] = here[p] || w.holding.Load()
		}
	}
	s.mu.Unlock()
	rev, fetched := head, s.cfg.StatusBranch == ""
	for _, p := range paths {
		holder := holders[p]
		if here[p] || holder == me {
			continue
		}
		if !fetched {
			fetched = true
			rev = s.cfg.StatusBranch
			if _, err := s.cfg.Repo.Fetch(ctx, s.cfg.StatusBranch); err != nil {
				s.cfg.Log.Debug("fetch the status branch for the status page", "branch", s.cfg.StatusBranch, "err", err)
			}
		}
		var st *StatusFile
		f, ok, err := s.cfg.Repo.ReadFile(rev, path.Join(path.Dir(p), StatusFileName), maxStatusFile)
		if err == nil && ok && f.Content != nil {
			st = ParseStatus(f.Content)
		}
		s.cfg.Board.elsewhere(p, holder, f.Blob, st)
	}
}

// tellElsewhere gives Config.Elsewhere the cluster.yml files of the
// repository at head that another replica holds, as holders says, each
// when it changed since it was last given; one that does not read is
// left to its holder to report.
func (s *Server) tellElsewhere(ctx context.Context, head string, files []gitrepo.File, holders map[string]string, fresh bool) {
	if s.cfg.Elsewhere == nil || !fresh {
		return
	}
	me := s.cfg.Share.ID()
	told := s.toldElsewhere
	s.toldElsewhere = map[string]string{}
	for _, f := range files {
		if b, ok := told[f.Path]; ok {
			s.toldElsewhere[f.Path] = b // the files gone are forgotten
		}
		if holder := holders[f.Path]; holder == "" || holder == me || s.toldElsewhere[f.Path] == f.Blob {
			continue
		}
		s.toldElsewhere[f.Path] = f.Blob
		ref := clusterRef{Path: f.Path, Content: f.Content, Size: f.Size, Blob: f.Blob, Head: head}
		c, err := s.parse(ctx, s.cfg.Log.With("path", f.Path), ref)
		if err != nil {
			s.cfg.Log.Debug("a cluster.yml another replica holds does not read; its holder reports it", "path", f.Path, "err", err)
			continue
		}
		s.cfg.Elsewhere(c)
	}
}

func (s *Server) startWorker(ctx context.Context, ref clusterRef) *worker {
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{srv: s, path: ref.Path, statusPath: path.Join(path.Dir(ref.Path), StatusFileName),
		notify: make(chan struct{}, 1), cancel: cancel, log: s.cfg.Log.With("path", ref.Path), latest: ref,
		done: make(chan struct{}), retiring: make(chan struct{})}
	if prev := w.readStatus(ctx, ref.Head, true); prev != nil && prev.Source.Blob != "" {
		// What an earlier run applied: unchanged content is no change.
		w.applied = clusterRef{Path: w.path, Blob: prev.Source.Blob, Revision: prev.ObservedRevision}
		w.tried = prev.Source.Blob
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(w.done)
		defer func() {
			if ctx.Err() == nil && w.left.Load() {
				s.Trigger() // a worker for the path may start again
			}
		}()
		if s.cfg.Share == nil {
			w.run(wctx, nil)
			return
		}
		if err := s.cfg.Share.Hold(wctx, w.path, w.held); err != nil {
			w.log.Error("campaign for the cluster's Lease", "err", err)
		}
	}()
	return w
}

// leave moves w from the workers to the leaving ones. Called with s.mu
// held.
func (s *Server) leave(w *worker) {
	w.left.Store(true)
	delete(s.workers, w.path)
	s.leaving[w.path] = w
}

// claim records that path holds the cluster called name; it returns the
// other cluster.yml files that hold that name too, sorted, and has each of
// them reconciled again, to be refused as well: of two cluster.yml with one
// name, neither is the cluster's by being read first.
func (s *Server) claim(name, p string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	me := s.workers[p]
	if me != nil {
		me.name.Store(&name)
		me.conflicts = map[string]bool{}
	}
	var others []string
	for other, w := range s.workers {
		if other == p || w.name.Load() == nil || *w.name.Load() != name {
			continue
		}
		others = append(others, other)
		if me != nil {
			me.conflicts[other] = true
		}
		if !w.conflicts[p] {
			// Told once: it knows of p from then on.
			if w.conflicts == nil {
				w.conflicts = map[string]bool{}
			}
			w.conflicts[p] = true
			w.recheck.Store(true)
			w.poke()
		}
	}
	slices.Sort(others)
	return others
}

// lockedRepo serializes the operations on the repository: the fetches of
// the server and the status commits of the workers share one clone.
type lockedRepo struct {
	mu sync.Mutex
	r  Repository
}

func (l *lockedRepo) Fetch(ctx context.Context, branch string) (gitrepo.Commit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Fetch(ctx, branch)
}

func (l *lockedRepo) Find(rev, dir, name string, max int64) ([]gitrepo.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Find(rev, dir, name, max)
}

func (l *lockedRepo) ReadFile(rev, p string, max int64) (gitrepo.File, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.ReadFile(rev, p, max)
}

func (l *lockedRepo) LastChange(rev, p string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.LastChange(rev, p)
}

func (l *lockedRepo) CommitFile(ctx context.Context, c gitrepo.FileCommit) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.CommitFile(ctx, c)
}
