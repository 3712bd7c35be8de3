package notify

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/internal/ctxwait"
)

// DedupWindow is how long the same event (cluster, kind, reason, message)
// is not sent again, as Flux's notification-controller does.
const DedupWindow = 5 * time.Minute

// Config is what a Notifier sends, and how.
type Config struct {
	// Targets are the webhooks (--notify, --notify-file).
	Targets []Target
	// Forge, when set, gets commit statuses.
	Forge *Forge
	// Client makes the requests (default: one that follows no redirect, so
	// that a request and its token go nowhere else).
	Client *http.Client
	Log    *slog.Logger
	// Observe counts each request's result by target ("json", "slack",
	// "github", "gitea", "gitlab") and result ("sent", "failed",
	// "dropped"), e.g. gitops.Metrics.Notification.
	Observe func(target, result string)
	// Now is the clock of de-duplication (default time.Now).
	Now func() time.Time
	// Wait waits between tries (default: a timer).
	Wait func(ctx context.Context, d time.Duration) error
	// Queue is each destination's queue length (default DefaultQueue).
	Queue int
}

// Notifier turns a Board's updates into notifications and commit
// statuses, and sends them from a queue per destination (Run).
type Notifier struct {
	cfg   Config
	hooks []hook
	forge *outbox

	mu     sync.Mutex
	sent   map[dedupKey]time.Time
	posted map[string]commitStatus // the last commit status set, by cluster.yml path
	names  map[string]string       // cluster_name by cluster.yml path
}

type hook struct {
	target Target
	out    *outbox
}

type dedupKey struct {
	path    string
	kind    Kind
	reason  string
	message string
}

// New makes a Notifier; nothing is sent until Run.
func New(cfg Config) *Notifier {
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Observe == nil {
		cfg.Observe = func(string, string) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Wait == nil {
		cfg.Wait = ctxwait.Sleep
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	n := &Notifier{cfg: cfg, sent: map[dedupKey]time.Time{}, posted: map[string]commitStatus{}, names: map[string]string{}}
	d := &deliverer{client: cfg.Client, now: cfg.Now, wait: cfg.Wait}
	for _, t := range cfg.Targets {
		n.hooks = append(n.hooks, hook{target: t, out: newOutbox(t.Host, t.Format, cfg.Queue, cfg.Log, cfg.Observe, d.deliver)})
	}
	if cfg.Forge != nil {
		n.forge = newOutbox(cfg.Forge.API, cfg.Forge.Kind, cfg.Queue, cfg.Log, cfg.Observe, d.deliver)
	}
	return n
}

// Watch has n told of b's reconciles.
func (n *Notifier) Watch(b *gitops.Board) {
	b.Watch(n.Updated)
	b.WatchStarts(n.Started)
}

// Run sends until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, h := range n.hooks {
		wg.Go(func() { h.out.run(ctx) })
	}
	if n.forge != nil {
		wg.Go(func() { n.forge.run(ctx) })
	}
	wg.Wait()
}

// Updated queues the notifications and the commit status that a
// reconcile's end calls for. It never blocks (Board.Watch).
func (n *Notifier) Updated(u gitops.StatusUpdate) {
	if u.Next == nil {
		return
	}
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if u.Next.Cluster != "" {
		n.names[u.Path] = u.Next.Cluster
	}
	for _, e := range Events(u, now) {
		if !n.firstLocked(e, now) {
			n.cfg.Log.Debug("notification not sent again within the de-duplication window", "path", e.Path, "kind", e.Kind, "reason", e.Reason)
			continue
		}
		for _, h := range n.hooks {
			body, err := genericBody(e)
			if h.target.Format == FormatSlack {
				body, err = slackBody(e)
			}
			if err != nil {
				n.cfg.Log.Error("notification payload", "err", err)
				continue
			}
			h.out.push(request{URL: h.target.URL, Body: body, What: string(e.Kind) + " of " + e.Cluster})
		}
	}
	n.commitStatusLocked(u)
}

// firstLocked says whether e was not sent within DedupWindow, and records
// it as sent now; n.mu is held.
func (n *Notifier) firstLocked(e Event, now time.Time) bool {
	for k, at := range n.sent {
		if now.Sub(at) >= DedupWindow {
			delete(n.sent, k)
		}
	}
	k := dedupKey{path: e.Path, kind: e.Kind, reason: e.Reason, message: e.Message}
	if _, ok := n.sent[k]; ok {
		return false
	}
	n.sent[k] = now
	return true
}

// commitStatusLocked queues the commit status of a reconcile's end: on the
// commit of the cluster.yml it acted on, success when Ready is True,
// failure otherwise, when its state or Ready's reason differs from the
// last one set; n.mu is held.
func (n *Notifier) commitStatusLocked(u gitops.StatusUpdate) {
	if n.forge == nil {
		return
	}
	sha := u.Revision
	if sha == "" {
		sha = u.Next.ObservedRevision
	}
	if sha == "" {
		return
	}
	state, desc := readyState(u.Next)
	cs := commitStatus{SHA: sha, Context: Context(n.nameLocked(u.Path)), State: state, Description: desc,
		reason: condition(u.Next, gitops.ConditionReady).Reason}
	last, ok := n.posted[u.Path]
	if ok && last == cs {
		return
	}
	if ok && last.SHA == cs.SHA && last.Context == cs.Context && last.State == cs.State &&
		(last.reason == cs.reason || n.cfg.Forge.Kind == ForgeGitLab) {
		// The same state for another message only: not worth a status
		// (GitHub keeps at most 1000 a commit and context, and each retry
		// of a failing revision may say it differently). GitLab refuses
		// a status in the state the commit's is in already ("Cannot
		// transition status"), whatever its description.
		return
	}
	if !ok && u.Prev != nil && u.Prev.ObservedRevision == sha {
		// A serve that starts: status.yml says this was set already.
		if s, _ := readyState(u.Prev); s == state && condition(u.Prev, gitops.ConditionReady).Reason == cs.reason {
			n.posted[u.Path] = cs
			return
		}
	}
	if ok && last.SHA == sha && last.State == StatePending && last.Context != cs.Context {
		// cluster_name changed with the revision: end the pending status
		// under the old name too.
		old := cs
		old.Context = last.Context
		n.pushStatusLocked(old)
	}
	n.posted[u.Path] = cs
	n.pushStatusLocked(cs)
}

// Started queues a pending commit status when a reconcile of a revision
// not acted on yet starts (not for drift checks, nor for retries of a
// revision already marked). The first reconcile of a cluster.yml serve
// never saw gets none: its cluster_name, which names the status, is read
// during the reconcile. It never blocks (Board.WatchStarts).
func (n *Notifier) Started(s gitops.StartUpdate) {
	if n.forge == nil || s.Running.Revision == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.Status != nil && s.Status.Cluster != "" {
		n.names[s.Path] = s.Status.Cluster
	}
	name, known := n.names[s.Path]
	if !known || (s.Status != nil && s.Status.ObservedRevision == s.Running.Revision) || n.posted[s.Path].SHA == s.Running.Revision {
		return
	}
	cs := commitStatus{SHA: s.Running.Revision, Context: Context(name), State: StatePending,
		Description: "rigger reconciles " + shortRev(s.Running.Revision) + " (" + s.Running.Trigger + ")"}
	n.posted[s.Path] = cs
	n.pushStatusLocked(cs)
}

func (n *Notifier) nameLocked(path string) string {
	if name := n.names[path]; name != "" {
		return name
	}
	return path
}

func (n *Notifier) pushStatusLocked(cs commitStatus) {
	r, err := n.cfg.Forge.request(cs)
	if err != nil {
		n.cfg.Log.Error("commit status request", "err", err)
		return
	}
	n.forge.push(r)
}
