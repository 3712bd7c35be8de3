package gitops

import (
	"context"
	"fmt"
	"time"

	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/reconcile/stall"
)

// writeStatus commits status.yml when its meaning changed.
func (w *worker) writeStatus(ctx context.Context, f *StatusFile) error {
	cfg := w.srv.cfg
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	branch := cfg.Branch
	if cfg.StatusBranch != "" {
		branch = cfg.StatusBranch
	}
	ready := "Unknown"
	for _, c := range f.Conditions {
		if c.Type == ConditionReady {
			ready = c.Status + " (" + c.Reason + ")"
		}
	}
	name := f.Cluster
	if name == "" {
		name = w.path
	}
	author := cfg.Author
	author.When = cfg.Now()
	hash, changed, err := cfg.Repo.CommitFile(ctx, gitrepo.FileCommit{
		Branch: branch, Path: w.statusPath, Content: b,
		Same:    func(old []byte) bool { return SameMeaning(old, b) },
		Message: fmt.Sprintf("rigger: status of %s: Ready %s\n\nObserved revision %s of %s.", name, ready, short(f.ObservedRevision), w.path),
		Trailer: TrailerKey + ": " + w.path,
		Author:  author,
		// Known before the push: its webhook may come before the push returns.
		Pushing: w.srv.own.add,
	})
	if err != nil {
		cfg.Metrics.statusCommit("failed")
		return err
	}
	w.prev = f
	if changed {
		cfg.Metrics.statusCommit("committed")
		w.log.Info("status.yml committed", "commit", short(hash), "branch", branch)
		cfg.Events(Event{Kind: EventStatusWritten, Path: w.path, Revision: hash})
	}
	return nil
}

// statusFile is the status.yml of one reconcile.
func (w *worker) statusFile(out outcome, cause string, start, end time.Time) *StatusFile {
	cfg := w.srv.cfg
	f := &StatusFile{
		APIVersion: "rigger.io/v1", Kind: "ClusterStatus", Cluster: out.cluster,
		Source:           Source{Repository: cfg.RepoURL, Branch: cfg.Branch, Path: w.path, Blob: w.applied.Blob},
		ObservedRevision: w.applied.Revision, Suspended: out.suspended,
		LastReconcile: &LastReconcile{Trigger: cause, FinishedAt: end.UTC().Truncate(time.Second),
			Duration: end.Sub(start).Round(time.Millisecond).String(), Steps: out.steps, Failed: out.failed},
		Drift: w.drift, Snapshots: w.snapshots, Restore: w.restore, Status: out.status,
	}
	if f.Cluster == "" && w.prev != nil {
		f.Cluster = w.prev.Cluster
	}
	if cfg.Share != nil {
		f.Replica = cfg.Share.ID()
	}
	if cfg.PendingAgents != nil && f.Cluster != "" {
		f.PendingAgents = cfg.PendingAgents(f.Cluster)
	}
	if cfg.AgentTunnels != nil && f.Cluster != "" {
		f.AgentTunnels = cfg.AgentTunnels(f.Cluster)
	}
	var prev []Condition
	if w.prev != nil {
		prev = w.prev.Conditions
	}
	f.Conditions = conditions(out, w.applied.Revision, prev, end.UTC().Truncate(time.Second))
	return f
}

// stalledMessage is the Stalled condition's message; Ready's says why, and
// is not written twice.
const stalledMessage = "only a change to cluster.yml (or to what the Ready condition names) lets rigger go on: the Ready condition says why"

// conditions are Ready, Reconciling and Stalled for an outcome, as Flux
// sets them: Stalled when only a person can make it go on, Reconciling
// while rigger will try again by itself, Ready when the nodes run what
// cluster.yml says.
func conditions(out outcome, revision string, prev []Condition, now time.Time) []Condition {
	var conds []Condition
	set := func(typ, status, reason, msg string) {
		conds = setCondition(conds, prev, Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: now})
	}
	msg := ""
	if out.err != nil {
		msg = out.err.Error()
	}
	pending := 0
	if out.status != nil {
		pending = out.status.PendingSteps
	}
	switch {
	case out.stalled != "":
		set(ConditionReady, conditionFalse, string(out.stalled), msg)
		set(ConditionReconciling, conditionFalse, string(out.stalled), "")
		set(ConditionStalled, conditionTrue, string(out.stalled), stalledMessage)
	case out.suspended:
		status, m := conditionTrue, "rigger.suspend is set: the cluster is observed, not changed; the nodes run what cluster.yml says"
		if pending > 0 || out.err != nil {
			status, m = conditionUnknown, fmt.Sprintf("rigger.suspend is set: the cluster is observed, not changed; %d step(s) are pending", pending)
		}
		if out.err != nil {
			m += ": " + msg
		}
		set(ConditionReady, status, ReasonSuspended, m)
		set(ConditionReconciling, conditionFalse, ReasonSuspended, "")
		set(ConditionStalled, conditionFalse, ReasonSuspended, "")
	case out.err != nil:
		reason, _ := stall.Classify(out.err)
		set(ConditionReady, conditionFalse, string(reason), msg)
		set(ConditionReconciling, conditionTrue, ReasonRetryScheduled, "rigger tries again by itself")
		set(ConditionStalled, conditionFalse, ReasonRetryScheduled, "")
	case out.retry:
		m := "some nodes of cluster.yml could not be reached and were left as they are"
		if out.status != nil {
			var nodes []string
			for _, n := range out.status.Nodes {
				if !n.Reachable && !n.Removed {
					nodes = append(nodes, n.Address)
				}
			}
			m = fmt.Sprintf("%d node(s) of cluster.yml could not be reached and were left as they are: %v", len(nodes), nodes)
		}
		set(ConditionReady, conditionFalse, ReasonNodesUnreachable, m)
		set(ConditionReconciling, conditionTrue, ReasonRetryScheduled, "rigger tries again by itself")
		set(ConditionStalled, conditionFalse, ReasonRetryScheduled, "")
	case pending > 0:
		set(ConditionReady, conditionFalse, ReasonProgressing, fmt.Sprintf("%d step(s) still pending after the apply", pending))
		set(ConditionReconciling, conditionTrue, ReasonProgressing, "")
		set(ConditionStalled, conditionFalse, ReasonProgressing, "")
	default:
		set(ConditionReady, conditionTrue, ReasonSucceeded, fmt.Sprintf("the nodes run what cluster.yml of %s says", short(revision)))
		set(ConditionReconciling, conditionFalse, ReasonSucceeded, "")
		set(ConditionStalled, conditionFalse, ReasonSucceeded, "")
	}
	return conds
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// maxStatusFile bounds the status.yml read back: rigger writes far smaller
// ones, and a larger one is not read (the next status replaces it).
const maxStatusFile = 1 << 20

// readStatus reads status.yml as the repository has it at rev (or at the
// status branch's head) and takes from it what the next status carries
// on: the conditions' transition times, the drift repaired, the snapshots
// and the last restore. The repository, not the memory of one server, is
// the record: a restarted server, or another one, goes on from it.
//
// With a status branch, the branch is read as last fetched: at start
// (fetch), and by every status commit since, which fetches it first.
func (w *worker) readStatus(ctx context.Context, rev string, fetch bool) *StatusFile {
	cfg := w.srv.cfg
	if cfg.StatusBranch != "" {
		rev = cfg.StatusBranch
		if fetch {
			if _, err := cfg.Repo.Fetch(ctx, cfg.StatusBranch); err != nil {
				return nil // no status branch yet
			}
		}
	}
	f, ok, err := cfg.Repo.ReadFile(rev, w.statusPath, maxStatusFile)
	if err != nil || !ok || f.Content == nil {
		return nil
	}
	prev := ParseStatus(f.Content)
	if prev == nil {
		return nil
	}
	w.prev, w.drift, w.snapshots, w.restore = prev, prev.Drift, prev.Snapshots, prev.Restore
	cfg.Board.known(w.path, prev)
	return prev
}
