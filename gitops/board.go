package gitops

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/decide"
)

// DefaultBoardHistory is how many reconciles of each cluster a Board
// keeps when NewBoard is given 0.
const DefaultBoardHistory = 10

// Board is what serve knows of each cluster now, for its status page and
// its notifications: the newest status (what status.yml says, committed or
// not), the reconcile running, and the last reconciles. Watchers are told
// of every status; subscribers are woken by every change. Nil is a Board
// that keeps nothing.
type Board struct {
	history int

	mu       sync.Mutex
	clusters map[string]*BoardCluster // by cluster.yml path
	// version counts the changes; each cluster's changed is the version of
	// its last one, and gone has the version at which each path removed
	// since was removed, the maxGone newest. Since cannot tell the changes
	// since a version below floor (a removal it forgot).
	version  uint64
	changed  map[string]uint64
	gone     map[string]uint64
	floor    uint64
	subs     map[chan struct{}]struct{}
	watchers []func(StatusUpdate)
	starts   []func(StartUpdate)
	// shownBlob is the blob of the status.yml shown for each cluster
	// held elsewhere (elsewhere), so that an unchanged one is no change.
	shownBlob map[string]string
}

// BoardCluster is one cluster on a Board.
type BoardCluster struct {
	// Path is the cluster.yml's path in the repository.
	Path string `json:"path"`
	// Status is the newest reconcile's status (nil before the first ends).
	Status *StatusFile `json:"status,omitempty"`
	// Running is the reconcile under way, if any.
	Running *RunningReconcile `json:"running,omitempty"`
	// Reconciles are the last reconciles, newest first.
	Reconciles []ReconcileRecord `json:"reconciles,omitempty"`
	// Elsewhere is set for a cluster that another replica of serve
	// reconciles (several replicas share the clusters, Config.Share):
	// Status is then its status.yml as that replica committed it, read
	// from this replica's clone at its last fetch; Reconciles are this
	// replica's own, from when it held the cluster.
	Elsewhere bool `json:"elsewhere,omitempty"`
	// HeldBy is the replica that holds the cluster's Lease when
	// Elsewhere is set, as this replica last read it ("": none does at
	// the moment, it is being handed over or taken over).
	HeldBy string `json:"heldBy,omitempty"`
}

// RunningReconcile is a reconcile under way.
type RunningReconcile struct {
	Trigger   string    `json:"trigger"`
	Revision  string    `json:"revision"`
	StartedAt time.Time `json:"startedAt"`
}

// ReconcileRecord is one reconcile that ended.
type ReconcileRecord struct {
	Trigger    string    `json:"trigger"`
	Revision   string    `json:"revision"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// Steps carried out, and failed.
	Steps  int `json:"steps"`
	Failed int `json:"failed,omitempty"`
	// Error is why it did not converge ("" when it did).
	Error string `json:"error,omitempty"`
	// Plan is the plan the reconcile computed, one line a step ("node:
	// action component (reason)"), then one a node it could not reach, at
	// most maxPlanLines; none when it computed none (a cluster.yml that
	// did not load, a lock held) or the plan was empty.
	Plan []string `json:"plan,omitempty"`
}

// StatusUpdate is a cluster's status after a reconcile, with the one
// before it (nil for the first this serve saw: the one read back from
// status.yml, when there was one).
type StatusUpdate struct {
	Path string
	// Revision is the commit of the cluster.yml the reconcile acted on.
	// Next.ObservedRevision is the last one acted on to the end: the two
	// differ while a new revision fails and is retried.
	Revision   string
	Prev, Next *StatusFile
}

// StartUpdate is a reconcile starting, with the cluster's status before it
// (nil when there is none yet).
type StartUpdate struct {
	Path    string
	Running RunningReconcile
	Status  *StatusFile
}

// NewBoard makes a Board that keeps history reconciles of each cluster
// (DefaultBoardHistory when 0).
func NewBoard(history int) *Board {
	if history <= 0 {
		history = DefaultBoardHistory
	}
	return &Board{history: history, clusters: map[string]*BoardCluster{}, changed: map[string]uint64{}, gone: map[string]uint64{},
		subs: map[chan struct{}]struct{}{}, shownBlob: map[string]string{}}
}

// Watch has f told of every status, in the order they come; f runs on
// the reconciling worker's goroutine, so it must not block (queue, and
// work elsewhere).
func (b *Board) Watch(f func(StatusUpdate)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watchers = append(b.watchers, f)
}

// WatchStarts has f told of every reconcile that starts, in the order
// they come; like Watch's, f runs on the reconciling worker's goroutine and
// must not block.
func (b *Board) WatchStarts(f func(StartUpdate)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starts = append(b.starts, f)
}

// Subscribe returns a channel that receives a value after each change
// (changes in quick succession may wake it once) and a cancel that stops
// it. The channel is never closed.
func (b *Board) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// Clusters is every cluster on the board, by path, copied: the caller may
// keep it. Statuses are shared and must not be changed.
func (b *Board) Clusters() []BoardCluster {
	return b.Since(0).Changed
}

// BoardChanges are a Board's changes since a version (Since).
type BoardChanges struct {
	// Version is the board's version now: the one to ask Since next.
	Version uint64
	// Full says that Changed is every cluster on the board, and that the
	// ones not in it are gone: the changes since the version asked about
	// could not be told (0, or a version older than the board remembers
	// removals for).
	Full bool
	// Changed are the clusters changed (or added) since, by path, copied:
	// the caller may keep them. Statuses are shared and must not be
	// changed.
	Changed []BoardCluster
	// Removed are the paths of the clusters removed since (never with
	// Full).
	Removed []string
}

// maxGone is how many removals a Board remembers for Since: a follower
// further behind is sent the whole board.
const maxGone = 1000

// Since are the board's changes after version v (BoardChanges.Version of
// an earlier call; 0 for the whole board), so that a follower such as the
// status page sends only what changed.
func (b *Board) Since(v uint64) BoardChanges {
	if b == nil {
		return BoardChanges{Full: true}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := BoardChanges{Version: b.version, Full: v == 0 || v < b.floor || v > b.version}
	for path, c := range b.clusters {
		if !out.Full && b.changed[path] <= v {
			continue
		}
		cc := *c
		if c.Running != nil {
			r := *c.Running
			cc.Running = &r
		}
		cc.Reconciles = slices.Clone(c.Reconciles)
		out.Changed = append(out.Changed, cc)
	}
	if out.Changed == nil {
		out.Changed = []BoardCluster{}
	}
	sort.Slice(out.Changed, func(i, j int) bool { return out.Changed[i].Path < out.Changed[j].Path })
	if !out.Full {
		for path, at := range b.gone {
			if at > v {
				out.Removed = append(out.Removed, path)
			}
		}
		sort.Strings(out.Removed)
	}
	return out
}

// cluster is path's entry, made when missing; b.mu is held.
func (b *Board) cluster(path string) *BoardCluster {
	c := b.clusters[path]
	if c == nil {
		c = &BoardCluster{Path: path}
		b.clusters[path] = c
	}
	return c
}

// known puts status f, read back from status.yml, on the board when the
// cluster has none yet (a serve that starts shows what the last one
// reported); watchers are not told.
func (b *Board) known(path string, f *StatusFile) {
	if b == nil || f == nil {
		return
	}
	b.mu.Lock()
	c := b.cluster(path)
	if c.Status != nil {
		b.mu.Unlock()
		return
	}
	c.Status = f
	b.changedLocked(path)
	b.mu.Unlock()
}

// started records a reconcile starting, and tells the start watchers.
func (b *Board) started(path, trigger, revision string, at time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	c := b.cluster(path)
	run := RunningReconcile{Trigger: trigger, Revision: revision, StartedAt: at}
	c.Running = &run
	b.here(c)
	status := c.Status
	watchers := slices.Clone(b.starts)
	b.changedLocked(path)
	b.mu.Unlock()
	for _, w := range watchers {
		w(StartUpdate{Path: path, Running: run, Status: status})
	}
}

// finished records a reconcile's end and its status f, and tells the
// watchers.
func (b *Board) finished(path string, rec ReconcileRecord, f *StatusFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	c := b.cluster(path)
	prev := c.Status
	c.Status, c.Running = f, nil
	b.here(c)
	c.Reconciles = append([]ReconcileRecord{rec}, c.Reconciles...)
	if len(c.Reconciles) > b.history {
		c.Reconciles = c.Reconciles[:b.history]
	}
	watchers := slices.Clone(b.watchers)
	b.changedLocked(path)
	b.mu.Unlock()
	for _, w := range watchers {
		w(StatusUpdate{Path: path, Revision: rec.Revision, Prev: prev, Next: f})
	}
}

// here marks c as reconciled by this replica; b.mu is held.
func (b *Board) here(c *BoardCluster) {
	c.Elsewhere, c.HeldBy = false, ""
	delete(b.shownBlob, c.Path)
}

// elsewhere shows path's cluster as reconciled by another replica: holder
// holds its Lease ("" for none), and f is its status.yml as committed
// (blob: that file's blob, "" for none), which the holder wrote. Nothing
// changes when neither did; watchers are not told (the holder tells its
// own).
func (b *Board) elsewhere(path, holder, blob string, f *StatusFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clusters[path]
	if c != nil && c.Elsewhere && c.HeldBy == holder && b.shownBlob[path] == blob {
		return
	}
	c = b.cluster(path)
	c.Elsewhere, c.HeldBy, c.Running = true, holder, nil
	if blob != b.shownBlob[path] || c.Status == nil {
		if f != nil {
			c.Status = f
		}
		b.shownBlob[path] = blob
	}
	b.changedLocked(path)
}

// retain takes every cluster whose path is not in paths off the board.
func (b *Board) retain(paths map[string]bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	var gone []string
	for p := range b.clusters {
		if !paths[p] {
			gone = append(gone, p)
		}
	}
	b.mu.Unlock()
	for _, p := range gone {
		b.removed(p)
	}
}

// removed takes a cluster whose cluster.yml is gone off the board.
func (b *Board) removed(path string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.clusters[path]; !ok {
		return
	}
	delete(b.clusters, path)
	delete(b.shownBlob, path)
	b.changedLocked(path)
	delete(b.changed, path)
	b.gone[path] = b.version
	if len(b.gone) > maxGone {
		// Forget the oldest removal: a follower from before it gets the
		// whole board.
		oldest, at := "", b.version
		for p, v := range b.gone {
			if v < at {
				oldest, at = p, v
			}
		}
		delete(b.gone, oldest)
		b.floor = at
	}
}

// changedLocked records a change of path's cluster and wakes the
// subscribers; b.mu is held.
func (b *Board) changedLocked(path string) {
	b.version++
	b.changed[path] = b.version
	delete(b.gone, path)
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
	}
}

// errorText is err's message for a ReconcileRecord ("" for nil), at most
// maxText bytes long as in status.yml (clipString).
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return clipString(strings.TrimSpace(err.Error()))
}

// maxPlanLines is how many lines of a plan a ReconcileRecord keeps; a
// longer plan ends with a line that says how many were left out.
const maxPlanLines = 50

// maxPlanLine is the longest line of a plan a ReconcileRecord keeps, in
// bytes: a reason or an error can quote a node at any length.
const maxPlanLine = 300

// planLines is pl's plan for people, as rigger plan prints it, one line a
// step and one a node not reached.
func planLines(pl *decide.Planned) []string {
	if pl == nil || pl.Plan == nil {
		return nil
	}
	var lines []string
	for _, s := range pl.Plan.Steps {
		lines = append(lines, fmt.Sprintf("%s: %s %s (%s)", s.Node, s.Action, s.Component, strings.Join(strings.Fields(s.Reason), " ")))
	}
	for _, u := range pl.Plan.Unreachable {
		lines = append(lines, fmt.Sprintf("%s: not reachable, nothing planned for it (%s)", u.Node, strings.Join(strings.Fields(u.Error), " ")))
	}
	if len(lines) > maxPlanLines {
		more := len(lines) - maxPlanLines + 1
		lines = append(lines[:maxPlanLines-1], fmt.Sprintf("… and %d more", more))
	}
	for i, l := range lines {
		lines[i] = clip.Ellipsis(l, maxPlanLine)
	}
	return lines
}
