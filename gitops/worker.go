package gitops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/sopsfile"
)

// Retry delays after a failed reconcile: doubling from retryMin, never
// longer than the drift interval.
const (
	retryMin      = 15 * time.Second
	lockHeldRetry = 30 * time.Second
	// snapshotRetry is the wait after a failed scheduled snapshot.
	snapshotRetry = time.Minute
)

// clusterRef is one cluster.yml as fetched.
type clusterRef struct {
	Path string
	// Content is nil when Size is more than spec.MaxFileSize.
	Content []byte
	Size    int64
	Blob    string
	// Revision is the commit that last changed the file; Head the branch's
	// head when it was fetched.
	Revision, Head string
}

// worker reconciles one cluster.yml: when its content changes, at every
// drift check, and when a retry or a snapshot is due. Everything but
// latest is owned by run's goroutine.
type worker struct {
	srv        *Server
	path       string
	statusPath string
	log        *slog.Logger
	cancel     context.CancelFunc
	notify     chan struct{}
	// done is closed when the worker has ended; left is set once the
	// server no longer counts it among its workers (Server.leave).
	done chan struct{}
	left atomic.Bool
	// retiring is closed by retire; retired is set then, holding while
	// held runs (see retire).
	retiring         chan struct{}
	retired, holding atomic.Bool
	retireOnce       sync.Once
	// name is the cluster_name last read (Server.claim).
	name atomic.Pointer[string]
	// conflicts are the other cluster.yml files known to have the same
	// name (Server.claim, under the server's lock); recheck makes the
	// worker reconcile again when one is found, to be refused too.
	conflicts map[string]bool
	recheck   atomic.Bool

	mu     sync.Mutex
	latest clusterRef
	// waiting is the ticket of a reconcile waiting for a slot, for offer
	// to move it ahead when the cluster.yml changes meanwhile.
	waiting atomic.Pointer[slotTicket]

	// applied is the content last acted on to the end (converged, or
	// stalled on something only a person can fix); its Revision is the
	// commit it was first seen at.
	applied clusterRef
	// tried is the blob of the content last reconciled, converged or not.
	tried string
	prev  *StatusFile
	drift []DriftRepair
	// lastRun and retryAt decide the next wake-up; snapshotDue is when
	// the etcd schedule asks for the next snapshot (zero: none).
	lastRun, retryAt, snapshotDue time.Time
	failures                      int
	snapshots                     *SnapshotStatus
	restore                       *RestoreStatus
}

// offer hands the worker the cluster.yml of a new fetch; only the newest
// is kept.
func (w *worker) offer(ref clusterRef) {
	w.mu.Lock()
	changed := w.latest.Blob != ref.Blob
	w.latest = ref
	w.mu.Unlock()
	if t := w.waiting.Load(); t != nil && changed {
		// A drift check waiting for a slot reconciles the new content:
		// it is a change now.
		w.srv.slots.promote(t, classChange)
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// poke wakes the worker up.
func (w *worker) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *worker) current() clusterRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

func (w *worker) stop() { w.cancel() }

// retire ends the worker once the reconcile under way, if any, is over:
// at once when it does not hold the cluster's Lease, else between two
// reconciles (held ends it then). The two sides check each other's flag
// after setting their own, so that one of them always ends it.
func (w *worker) retire() {
	w.retireOnce.Do(func() {
		w.retired.Store(true)
		close(w.retiring)
		if !w.holding.Load() {
			w.cancel()
		}
	})
}

// held runs the worker while this replica holds the cluster's Lease
// (Config.Share): it reconciles at once, then as run does, until ctx ends
// or, between two reconciles, handOver is closed.
func (w *worker) held(ctx context.Context, handOver <-chan struct{}) {
	cfg := w.srv.cfg
	id := cfg.Share.ID()
	w.log.Info("holding the cluster's Lease: this replica reconciles it", "replica", id)
	cfg.Metrics.holding(w.path, id, true)
	w.holding.Store(true)
	w.run(ctx, handOver)
	w.holding.Store(false)
	cfg.Metrics.holding(w.path, id, false)
	reason := "handed over to the replica it is assigned to"
	switch {
	case ctx.Err() != nil:
		reason = context.Cause(ctx).Error()
	case w.retired.Load():
		reason = "assigned to another replica"
		w.cancel() // the campaign ends too
	}
	w.log.Info("cluster's Lease given up: another replica may reconcile it", "replica", id, "reason", reason)
}

// run reconciles at once (a drift check of what the nodes run now), then
// whenever the content changes or a timer is due, until ctx ends or,
// between two reconciles, handOver is closed (nil: never).
func (w *worker) run(ctx context.Context, handOver <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-handOver: // before anything else that is ready
			return
		case <-w.retiring:
			return
		default:
		}
		cause := ""
		select {
		case <-ctx.Done():
			return
		case <-handOver:
			return
		case <-w.retiring:
			return
		case <-w.notify:
			recheck := w.recheck.Swap(false)
			switch {
			case w.current().Blob != w.tried:
				cause = "change"
			case recheck:
				// Another cluster.yml was found with this one's name.
				cause = "retry"
			default:
				// A commit that did not touch this cluster.yml; a failed
				// reconcile of it is retried by the timer, with backoff.
				continue
			}
		case <-timer.C:
			cause = w.dueCause()
		}
		w.reconcile(ctx, cause)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(w.nextWake().Sub(w.srv.cfg.Now()), 0))
	}
}

// nextWake is the earliest of the next drift check, retry and snapshot.
func (w *worker) nextWake() time.Time {
	next := w.driftDue()
	for _, t := range []time.Time{w.retryAt, w.snapshotDue} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	return next
}

// dueCause names why the timer fired.
func (w *worker) dueCause() string {
	now := w.srv.cfg.Now()
	switch {
	case w.lastRun.IsZero():
		return "start"
	case !w.retryAt.IsZero() && !now.Before(w.retryAt):
		return "retry"
	case !w.snapshotDue.IsZero() && !now.Before(w.snapshotDue) && now.Before(w.driftDue()):
		return "snapshot"
	}
	return "drift-check"
}

// driftDue is when the next drift check is due: DriftInterval after the
// one before, on this cluster's own phase of the interval (driftPhase), so
// that clusters started together, by one server or by several, do not all
// check at the same moment but spread over the interval, as Flux and Argo
// CD spread their resyncs; never less than half an interval after the
// last run (a change or a retry moves the next check to the next phase).
func (w *worker) driftDue() time.Time {
	interval := w.srv.cfg.DriftInterval
	return nextDrift(w.lastRun, interval, driftPhase(w.path, interval))
}

// driftPhase is where in each drift interval the checks of the cluster.yml
// at path fall: a hash of the path, the same on every server and after
// every restart.
func driftPhase(path string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(path))
	return time.Duration(h.Sum64() % uint64(interval))
}

// nextDrift is the first time at least interval/2 after last that is
// phase past a multiple of interval (counted from the Unix epoch); the
// zero time when last is.
func nextDrift(last time.Time, interval, phase time.Duration) time.Time {
	if last.IsZero() {
		return last // never run: at once
	}
	earliest := last.Add(interval / 2).UnixNano()
	iv := int64(interval)
	t := earliest - (earliest-int64(phase))%iv
	if t < earliest {
		t += iv
	}
	return time.Unix(0, t)
}

// outcome is what one reconcile found and did.
type outcome struct {
	cluster   string
	suspended bool
	// stalled is the reason when only a person can make it go on.
	stalled stall.Reason
	// retry is set when trying again later may succeed (a failure, a lock
	// held, nodes unreachable); retryIn overrides the backoff.
	retry   bool
	retryIn time.Duration
	err     error
	steps   int
	failed  int
	status  *report.Status
	// plan is the plan the reconcile computed, as lines (planLines).
	plan []string
}

// fail records err as stall.Classify says: a stall, or a retry (a
// held lock after lockHeldRetry, anything else with backoff).
func (o *outcome) fail(err error) {
	o.err = err
	switch reason, stalls := stall.Classify(err); {
	case stalls:
		o.stalled = reason
	case reason == stall.LockHeld:
		o.retry, o.retryIn = true, lockHeldRetry
	default:
		o.retry = true
	}
}

// retryDelay is the wait before the next try after out, the failures-th
// in a row: out.retryIn when set, else doubling from retryMin, never
// longer than the drift interval.
func retryDelay(out outcome, failures int, drift time.Duration) time.Duration {
	if out.retryIn > 0 {
		return out.retryIn
	}
	return min(retryMin<<min(failures-1, 10), drift)
}

// reconcile runs one reconcile of the newest cluster.yml and writes its
// status.yml, also when it fails.
func (w *worker) reconcile(ctx context.Context, cause string) {
	cfg := w.srv.cfg
	release, err := w.acquire(ctx, cause)
	if err != nil {
		return
	}
	defer release()
	ref := w.current()
	w.tried = ref.Blob
	w.readStatus(ctx, ref.Head, false)
	changed := ref.Blob != w.applied.Blob
	if changed {
		cause = "change"
	}
	start := cfg.Now()
	log := w.log.With("revision", short(ref.Revision), "trigger", cause)
	log.Info("reconcile starts")
	cfg.Events(Event{Kind: EventReconcileStart, Path: w.path, Revision: ref.Revision, Trigger: cause})
	cfg.Board.started(w.path, cause, ref.Revision, start)

	out := w.attempt(ctx, log, ref, changed)
	end := cfg.Now()
	w.lastRun = end
	if out.retry {
		w.failures++
		w.retryAt = end.Add(retryDelay(out, w.failures, cfg.DriftInterval))
	} else {
		w.failures, w.retryAt = 0, time.Time{}
		if changed {
			w.applied = clusterRef{Path: ref.Path, Blob: ref.Blob, Revision: ref.Revision}
		}
	}
	if w.applied.Blob == "" {
		// Never acted on to the end: the revision being tried is the one
		// status.yml is about.
		w.applied.Revision = ref.Revision
	}
	cfg.Metrics.reconciled(out, end.Sub(start))
	f := w.statusFile(out, cause, start, end)
	crashpoint.Reach(crashpoint.ServeReconciled)
	err = w.writeStatus(ctx, f)
	cfg.Board.finished(w.path, ReconcileRecord{Trigger: cause, Revision: ref.Revision, StartedAt: start, FinishedAt: end,
		Steps: out.steps, Failed: out.failed, Error: errorText(out.err), Plan: out.plan}, f)
	cfg.Events(Event{Kind: EventReconcileEnd, Path: w.path, Revision: ref.Revision, Trigger: cause, Err: out.err})
	switch {
	case out.err != nil:
		log.Warn("reconcile did not converge", "cluster", out.cluster, "err", out.err, "retry_at", w.retryAt)
	default:
		log.Info("reconcile done", "cluster", out.cluster, "steps", out.steps, "duration", end.Sub(start).Round(time.Millisecond))
	}
	if err != nil {
		log.Error("write status.yml", "err", err)
		if w.retryAt.IsZero() {
			w.retryAt = end.Add(retryMin)
		}
	}
}

// acquire takes one of the MaxConcurrent reconcile slots: content not
// reconciled yet (a push) before anything serve does on its own (drift
// checks, retries, snapshots), see slots.
func (w *worker) acquire(ctx context.Context, cause string) (release func(), err error) {
	class := classRoutine
	if w.current().Blob != w.tried {
		class = classChange
	}
	t := w.srv.slots.enqueue(class)
	w.waiting.Store(t)
	defer w.waiting.Store(nil)
	if class != classChange && w.current().Blob != w.tried {
		w.srv.slots.promote(t, classChange) // offered before waiting was set
	}
	select {
	case <-t.ready:
	default:
		w.log.Debug("waiting for a reconcile slot", "trigger", cause, "queue", t.class)
		w.srv.cfg.Events(Event{Kind: EventReconcileWaiting, Path: w.path, Revision: w.current().Revision, Trigger: cause})
	}
	return t.wait(ctx)
}

// attempt loads the cluster.yml, takes the cluster's lock, plans and
// applies (unless suspended), takes a due snapshot, and observes the result.
func (w *worker) attempt(ctx context.Context, log *slog.Logger, ref clusterRef, changed bool) (out outcome) {
	cfg := w.srv.cfg
	c, err := w.srv.parse(ctx, log, ref)
	if err != nil {
		out.fail(err)
		return out
	}
	out.cluster, out.suspended = c.ClusterName, c.Rigger.Suspend
	log = log.With("cluster", c.ClusterName)
	dir := filepath.Join(cfg.StateDir, c.ClusterName)
	if err := w.claimStateDir(ctx, c.ClusterName, dir); err != nil {
		var load *stateLoadError
		if errors.As(err, &load) {
			log.Error("cluster's state not loaded", "err", err)
			out.fail(load.err)
			return out
		}
		// Loud: the keys of a cluster are at stake.
		log.Error("cluster refused: its cluster_name is not its own", "err", err)
		out.stalled, out.err = ReasonDuplicateCluster, err
		return out
	}
	s, err := cfg.Open(c, reconcile.Options{StateDir: dir, Log: log, Now: cfg.Now,
		ReadInclude: w.includeReader(ref), IgnoreDockerVersion: cfg.IgnoreDockerVersion, Answers: cfg.Answers,
		Self: cfg.Self})
	if err != nil {
		out.fail(err)
		return out
	}
	defer s.Close()
	lk, err := s.Lock(ctx, "serve", false)
	if err != nil {
		out.fail(err)
		return out
	}
	log.Debug("cluster locked")
	defer func() {
		// Logged before the release, so that logs never show two holders.
		log.Debug("cluster unlocked")
		lk.Release()
	}()

	if !out.suspended {
		if err := w.restoreRequested(ctx, log, s, lk); err != nil {
			out.fail(err)
			return out
		}
	}
	pl, err := s.Plan(ctx)
	if err != nil {
		out.fail(fmt.Errorf("plan: %w", err))
		return out
	}
	out.status, out.plan = pl.Status(), planLines(pl)
	if !out.suspended {
		out = w.apply(ctx, log, s, lk, pl, changed, out)
	}
	w.snapshot(ctx, log, s, lk, c)
	if out.steps > 0 || len(pl.NodeChanges) > 0 {
		if after, err := s.Plan(ctx); err == nil {
			out.status = after.Status()
		}
	}
	if !out.retry && out.stalled == "" && !pl.Complete() {
		out.retry = true
	}
	return out
}

// parse reads the cluster.yml of ref within serve's bounds: spec's (size,
// values, nesting), ParseTimeout, and one file at a time, then makes
// decide.CheckSpec's refusals. A file past one of them, like one with
// errors, stalls its cluster (InvalidSpec), and so does one encrypted with
// SOPS that cannot be decrypted (DecryptionFailed); the other clusters go on.
func (s *Server) parse(ctx context.Context, log *slog.Logger, ref clusterRef) (*spec.Cluster, error) {
	invalid := func(err error) error {
		return &stall.Error{Reason: stall.InvalidSpec, Stalls: true, Err: err}
	}
	if ref.Size > spec.MaxFileSize {
		return nil, invalid(fmt.Errorf("%s: error: the file is larger than %d MiB (%d bytes): move long manifests from addons to files listed in addons_include",
			ref.Path, spec.MaxFileSize>>20, ref.Size))
	}
	timeout := s.cfg.ParseTimeout
	s.parseMu.Lock()
	defer s.parseMu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	decrypt := s.cfg.Decrypt
	if decrypt == nil {
		decrypt = sopsfile.Decrypter{}.Decrypt
	}
	decryptFailed := false
	c, diags, err := spec.ParseWith(pctx, ref.Content, ref.Path, spec.Options{Decrypt: func(ctx context.Context, data []byte, root *yaml.Node) ([]*yaml.Node, error) {
		nodes, err := decrypt(ctx, data, root)
		decryptFailed = err != nil
		return nodes, err
	}})
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("read %s: %w", ref.Path, context.Cause(ctx)) // serve stops
	case err != nil:
		return nil, invalid(fmt.Errorf("%s: error: the file was not read within %s: make it smaller or simpler (fewer values, anchors and aliases)", ref.Path, timeout))
	}
	for _, d := range diags {
		if d.Severity != spec.SeverityError {
			log.Warn("cluster.yml", "diagnostic", d.String())
		}
	}
	if err := diags.Err(); err != nil {
		if decryptFailed {
			return nil, &stall.Error{Reason: ReasonDecryptionFailed, Stalls: true, Err: err}
		}
		return nil, invalid(err)
	}
	// The refusals a plan would make of the file alone, as every command
	// makes them before it connects.
	if err := decide.CheckSpec(c, ref.Path).Err(); err != nil {
		return nil, invalid(err)
	}
	return c, nil
}

// includeReader reads the addons_include files of the cluster.yml of ref
// from the repository, at the commit fetched: paths relative to the
// cluster.yml's directory, inside the repository.
func (w *worker) includeReader(ref clusterRef) func(entry string, max int64) ([]byte, error) {
	return func(entry string, max int64) ([]byte, error) {
		if path.IsAbs(entry) {
			return nil, fmt.Errorf("an absolute path: rigger serve reads addons_include files from the repository, relative to %s", path.Dir(ref.Path))
		}
		p := path.Join(path.Dir(ref.Path), entry)
		if p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("%s is outside the repository", entry)
		}
		f, ok, err := w.srv.cfg.Repo.ReadFile(ref.Head, p, max)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("no file %s in the repository at %s", p, short(ref.Head))
		case f.Content == nil:
			return nil, fmt.Errorf("%s is larger than %d bytes", p, max)
		}
		return f.Content, nil
	}
}

// apply carries out the plan; when cluster.yml did not change, what it
// repairs is drift and is recorded.
func (w *worker) apply(ctx context.Context, log *slog.Logger, s Session, lk *reconcile.Lock, pl *decide.Planned, changed bool, out outcome) outcome {
	if !pl.Changes() {
		return out
	}
	res, err := s.Apply(ctx, lk, pl, reconcile.ApplyOptions{Hooks: logHooks(log), Pass: func(pass int, pl *decide.Planned) {
		log.Info("planned the next stage", "plan", pass, "steps", len(pl.Plan.Steps), "then", pl.Next())
	}})
	if res != nil {
		out.steps, out.failed = len(res.Done), len(res.Failed())
		if !changed {
			w.recordDrift(out.cluster, res)
		}
	}
	if err != nil {
		out.fail(err)
	}
	return out
}

// restoreRequested carries out the restore request of cluster.yml (restore:
// with a new id), once: see engine.RestorePending.
func (w *worker) restoreRequested(ctx context.Context, log *slog.Logger, s Session, lk *reconcile.Lock) error {
	req, err := s.RestoreRequest()
	if err != nil || req == nil || req.Done != nil {
		return err
	}
	log.Warn("restoring etcd as cluster.yml requests", "snapshot", req.SnapshotName, "id", req.ID)
	_, err = s.RestorePending(ctx, lk, etcdsnap.RestoreOptions{
		Phase:    func(title string) { log.Info(title, "phase", "restore") },
		Progress: func(node, msg string) { log.Info(msg, "node", node, "phase", "restore") },
		Hooks:    logHooks(log),
	})
	var rerr *etcdsnap.RestoreError
	if err != nil && !errors.As(err, &rerr) {
		// Refused before anything stopped: not recorded, tried again.
		return fmt.Errorf("restore %s (id %s): %w", req.SnapshotName, req.ID, err)
	}
	w.restore = &RestoreStatus{ID: req.ID, Snapshot: req.SnapshotName, At: w.srv.cfg.Now().UTC().Truncate(time.Second)}
	if err != nil {
		w.restore.Error = err.Error()
		return err
	}
	return nil
}

// snapshot takes the etcd snapshot the schedule asks for, if any, and
// applies retention; it sets when the schedule is due next.
func (w *worker) snapshot(ctx context.Context, log *slog.Logger, s Session, lk *reconcile.Lock, c *spec.Cluster) {
	now := w.srv.cfg.Now()
	r, err := s.ScheduledSnapshot(ctx, lk)
	if r == nil || !r.Schedule.Enabled {
		w.snapshots, w.snapshotDue = nil, time.Time{}
		return
	}
	st := &SnapshotStatus{Removed: r.Deleted, NotInS3: r.NotInS3, Uploaded: r.Uploaded}
	if w.snapshots != nil {
		st.Last = w.snapshots.Last
	}
	if l := r.Schedule.Last; l != nil {
		st.Last = snapshotRef(l.Name, l.Sidecar, l.TakenAt, l.Size)
	}
	next := r.Next
	if r.Snapshot != nil && r.Snapshot.Sidecar != nil {
		sc := r.Snapshot.Sidecar
		st.Last = snapshotRef(sc.Name, sc, sc.TakenAt, sc.Size)
		w.srv.cfg.Metrics.snapshot(c.ClusterName, nil)
		log.Info("scheduled snapshot taken", "snapshot", sc.Name, "next", next)
	}
	var problems []error
	for _, e := range []error{err, r.ListErr, r.CopyErr, r.S3Err, r.RetentionErr} {
		if e != nil {
			problems = append(problems, e)
		}
	}
	if err != nil {
		w.srv.cfg.Metrics.snapshot(c.ClusterName, err)
		log.Error("scheduled snapshot failed", "err", err)
		next = now.Add(snapshotRetry) // tried again soon, not at the next drift check
	}
	if len(problems) > 0 {
		st.Error = errors.Join(problems...).Error()
	}
	if st.Last != nil {
		w.srv.cfg.Metrics.snapshotTaken(c.ClusterName, st.Last.Taken)
	}
	if !next.IsZero() && err == nil {
		t := next.UTC().Truncate(time.Second)
		st.Next = &t
	}
	w.snapshots, w.snapshotDue = st, next
}

func snapshotRef(name string, sc *etcdsnap.Sidecar, taken time.Time, size int64) *SnapshotRef {
	ref := &SnapshotRef{Name: name, Taken: taken.UTC(), Size: size}
	if sc != nil {
		ref.Kind, ref.SHA256 = sc.Kind, sc.SHA256
	}
	return ref
}

// recordDrift keeps the steps a drift check carried out, newest first.
func (w *worker) recordDrift(cluster string, res *reconcile.Result) {
	at := w.srv.cfg.Now().UTC().Truncate(time.Second)
	var rec []DriftRepair
	for _, o := range res.Done {
		d := DriftRepair{RepairedAt: at, Node: o.Step.Node, Component: o.Step.Component, Action: string(o.Step.Action), Reason: o.Step.Reason}
		if o.Err != nil {
			d.Error = o.Err.Error()
		}
		rec = append(rec, d)
	}
	if res.Addons != nil {
		for _, ac := range res.Addons.Addons {
			for _, ch := range ac.Changes {
				if ch.Action == addons.Create || ch.Action == addons.Configure || ch.Action == addons.Prune {
					rec = append(rec, DriftRepair{RepairedAt: at, Component: "addon/" + ac.Name, Action: string(ch.Action),
						Reason: ch.Object.String() + ": " + ch.Summary})
				}
			}
		}
	}
	w.srv.cfg.Metrics.drift(cluster, len(rec))
	w.drift = append(rec, w.drift...)
	if len(w.drift) > maxDrift {
		w.drift = w.drift[:maxDrift]
	}
}

// logHooks turn the executor's progress into log lines.
func logHooks(log *slog.Logger) plan.Hooks {
	return plan.Hooks{
		Phase: func(p plan.Phase, title string) { log.Info(title, "phase", string(p)) },
		Step: func(node, msg string, err error) {
			if err != nil {
				log.Warn(msg, "node", node, "err", err)
				return
			}
			log.Info(msg, "node", node)
		},
	}
}

// BindingFile is the file of a cluster's state directory that names the
// cluster.yml it was made for (a Binding, JSON): a state directory holds
// the cluster's CA, service-account signing key and admin certificate, so
// only that cluster.yml is reconciled with it.
const BindingFile = "serve-binding.json"

// Binding is the cluster.yml a state directory was made for.
type Binding struct {
	// Repository is the repository serve follows (without credentials),
	// Path the cluster.yml in it.
	Repository string `json:"repository"`
	Path       string `json:"path"`
}

// stateLoadError is Config.LoadState's error: it stalls or retries as
// stall.Classify says, not as a cluster_name that is not the cluster's own.
type stateLoadError struct{ err error }

func (e *stateLoadError) Error() string { return e.err.Error() }
func (e *stateLoadError) Unwrap() error { return e.err }

// claimStateDir makes sure the state directory dir, of cluster name, is
// this cluster.yml's, and binds it to it when it is no cluster.yml's
// yet. It refuses (a *reconcile.Error that stalls):
//
//   - the name of serve's own directory (ServeDir);
//   - a name another cluster.yml of the repository has too: both are
//     refused, whichever serve read first, until one is renamed;
//   - a directory bound to another cluster.yml, which it names: after a
//     restart of serve, a new cluster.yml that reuses a cluster_name does
//     not take that cluster's keys, whichever of them serve reads first.
//
// With Config.LoadState, it fills dir from the cluster's state before it
// reads the binding (which is then written through); an error of
// LoadState is a *stateLoadError. Replicas of serve that share the
// clusters hold each cluster.yml apart, so two cluster.yml with one name
// held by two replicas are not refused by the second rule: the binding,
// written as a compare-and-swap, refuses the one that did not bind the
// state first (a replica that loses the race reads the state again), so
// that only one cluster.yml's reconciles ever write that state.
func (w *worker) claimStateDir(ctx context.Context, name, dir string) error {
	if name == ServeDir {
		return fmt.Errorf("cluster_name %q is the name of rigger serve's own directory in its state directory "+
			"(the agent tunnel's CA and tokens, the clone of the repository): give the cluster another cluster_name", name)
	}
	if others := w.srv.claim(name, w.path); len(others) > 0 {
		return fmt.Errorf("cluster_name %q is also the name of %s: each cluster.yml needs a cluster_name of its own "+
			"(its state directory, with its CA and keys, is named for it); neither is reconciled until one is renamed",
			name, strings.Join(others, " and "))
	}
	for try := 0; ; try++ {
		err := w.bindStateDir(ctx, name, dir)
		var conflict *secretstate.ConflictError
		if try == 0 && errors.As(err, &conflict) {
			// Another replica of serve bound it first (two cluster.yml
			// with one cluster_name, held by different replicas): read
			// the Secrets again, to be refused by that binding.
			w.log.Info("state directory bound by another replica meanwhile: reading it again", "cluster", name)
			continue
		}
		return err
	}
}

// bindStateDir is claimStateDir's work once the name is this cluster.yml's
// among those this serve holds: fill dir (LoadState), then check its
// binding, or bind it.
func (w *worker) bindStateDir(ctx context.Context, name, dir string) error {
	cfg := w.srv.cfg
	if cfg.LoadState != nil {
		if err := cfg.LoadState(ctx, name, dir); err != nil {
			return &stateLoadError{err}
		}
	}
	want := Binding{Repository: cfg.RepoURL, Path: w.path}
	var have Binding
	if err := statedir.ReadJSON(dir, BindingFile, &have); err != nil {
		return fmt.Errorf("read the state directory's %s: %w", BindingFile, err)
	}
	where := filepath.Join(dir, BindingFile)
	if cfg.StateFileAt != nil {
		where = cfg.StateFileAt(name, BindingFile)
	}
	switch {
	case have == want:
		return nil
	case have != Binding{}:
		return fmt.Errorf("the state of cluster_name %q was made for %s in %s, not for this cluster.yml (%s in %s): "+
			"the cluster's CA and keys are that cluster.yml's, which is reconciled with them; give this one another cluster_name. "+
			"If the cluster's cluster.yml moved here, or the repository moved, remove %s (serve binds the state to the cluster.yml that uses it next)",
			name, have.Path, have.Repository, want.Path, want.Repository, where)
	}
	b, err := json.Marshal(want)
	if err != nil {
		return err
	}
	if err := statedir.WriteFile(dir, BindingFile, b); err != nil {
		return fmt.Errorf("bind the state directory to its cluster.yml: %w", err)
	}
	w.log.Info("state directory bound to its cluster.yml", "state_dir", dir, "cluster", name)
	return nil
}
