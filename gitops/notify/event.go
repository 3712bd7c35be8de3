package notify

import (
	"time"

	"github.com/rigger/rigger/gitops"
)

// Kind is what an Event reports.
type Kind string

// The kinds of Event.
const (
	// KindReady: the Ready condition became True.
	KindReady Kind = "ready"
	// KindNotReady: the Ready condition became False (and Stalled did not
	// become True).
	KindNotReady Kind = "not-ready"
	// KindStalled: the Stalled condition became True: only a person can
	// make the cluster go on.
	KindStalled Kind = "stalled"
	// KindSnapshotFailed: a scheduled etcd snapshot failed.
	KindSnapshotFailed Kind = "snapshot-failed"
	// KindSnapshotRecovered: a scheduled etcd snapshot succeeded after
	// one failed.
	KindSnapshotRecovered Kind = "snapshot-recovered"
)

// Severities of an Event.
const (
	SeverityInfo  = "info"
	SeverityError = "error"
)

// Event is one notification: what changed in a cluster's status. Its
// fields come from status.yml's, which hold no secret.
type Event struct {
	Cluster    string    `json:"cluster"`
	Path       string    `json:"path"`
	Repository string    `json:"repository,omitempty"`
	Branch     string    `json:"branch,omitempty"`
	Revision   string    `json:"revision,omitempty"`
	Kind       Kind      `json:"kind"`
	Severity   string    `json:"severity"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	Time       time.Time `json:"time"`
}

// Events are the notifications a status update calls for: the Ready and
// Stalled transitions from u.Prev to u.Next, and a scheduled snapshot's
// failure (a new one, or a different error) or success after a failure.
// A first status (u.Prev nil) is compared with an unknown one: a cluster
// that comes up failing is reported. It is a pure function of u.
func Events(u gitops.StatusUpdate, at time.Time) []Event {
	next := u.Next
	if next == nil {
		return nil
	}
	prev := u.Prev
	if prev == nil {
		prev = &gitops.StatusFile{}
	}
	base := Event{Cluster: next.Cluster, Path: u.Path, Repository: next.Source.Repository, Branch: next.Source.Branch,
		Revision: u.Revision, Time: at.UTC()}
	if base.Cluster == "" {
		base.Cluster = u.Path
	}
	if base.Revision == "" {
		base.Revision = next.ObservedRevision
	}
	var out []Event
	add := func(k Kind, severity, reason, message string) {
		e := base
		e.Kind, e.Severity, e.Reason, e.Message = k, severity, reason, message
		out = append(out, e)
	}
	ready, wasReady := condition(next, gitops.ConditionReady), condition(prev, gitops.ConditionReady)
	stalled, wasStalled := condition(next, gitops.ConditionStalled), condition(prev, gitops.ConditionStalled)
	switch {
	case stalled.Status == "True" && wasStalled.Status != "True":
		// Ready's reason and message say why: Stalled's only that a
		// person must act.
		add(KindStalled, SeverityError, ready.Reason, ready.Message)
	case ready.Status == "False" && wasReady.Status != "False":
		add(KindNotReady, SeverityError, ready.Reason, ready.Message)
	case ready.Status == "True" && wasReady.Status != "True":
		add(KindReady, SeverityInfo, ready.Reason, ready.Message)
	}
	snapErr, wasErr := snapshotError(next), snapshotError(prev)
	switch {
	case snapErr != "" && snapErr != wasErr:
		add(KindSnapshotFailed, SeverityError, "SnapshotFailed", snapErr)
	case snapErr == "" && wasErr != "" && next.Snapshots != nil && next.Snapshots.Last != nil:
		add(KindSnapshotRecovered, SeverityInfo, "SnapshotSucceeded", "etcd snapshot "+next.Snapshots.Last.Name+" taken")
	}
	return out
}

// condition is f's condition of type typ (zero when it has none).
func condition(f *gitops.StatusFile, typ string) gitops.Condition {
	for _, c := range f.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return gitops.Condition{}
}

func snapshotError(f *gitops.StatusFile) string {
	if f.Snapshots == nil {
		return ""
	}
	return f.Snapshots.Error
}
