package gitops

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBoard(t *testing.T) {
	b := NewBoard(2)
	ch, cancel := b.Subscribe()
	defer cancel()
	var updates []StatusUpdate
	b.Watch(func(u StatusUpdate) { updates = append(updates, u) })
	var starts []StartUpdate
	b.WatchStarts(func(s StartUpdate) { starts = append(starts, s) })

	read := &StatusFile{Cluster: "read back"}
	b.known("a/cluster.yml", read)
	select {
	case <-ch:
	default:
		t.Fatal("a subscriber was not woken by a status read back")
	}
	at := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	b.started("a/cluster.yml", "change", "abc", at)
	if c := b.Clusters(); len(c) != 1 || c[0].Running == nil || c[0].Running.Trigger != "change" || c[0].Status != read {
		t.Fatalf("after start: %+v", c)
	}
	if len(starts) != 1 || starts[0].Running.Revision != "abc" || starts[0].Running.Trigger != "change" || starts[0].Status != read {
		t.Fatalf("start watchers told %+v", starts)
	}
	for i, err := range []error{nil, errors.New("boom"), nil} {
		f := &StatusFile{Cluster: "a", ObservedRevision: string(rune('0' + i))}
		b.finished("a/cluster.yml", ReconcileRecord{Trigger: "drift-check", Revision: "rev" + string(rune('0'+i)), Error: errorText(err), StartedAt: at, FinishedAt: at.Add(time.Second)}, f)
	}
	b.known("a/cluster.yml", &StatusFile{Cluster: "stale"}) // a status read back never hides a newer one
	c := b.Clusters()
	if len(c) != 1 || c[0].Running != nil || c[0].Status.ObservedRevision != "2" {
		t.Fatalf("after three reconciles: %+v", c)
	}
	if len(c[0].Reconciles) != 2 || c[0].Reconciles[0].Error != "" || c[0].Reconciles[1].Error != "boom" {
		t.Fatalf("history (newest first, two kept): %+v", c[0].Reconciles)
	}
	if len(updates) != 3 || updates[0].Prev != read || updates[1].Prev != updates[0].Next || updates[2].Next.ObservedRevision != "2" || updates[2].Revision != "rev2" {
		t.Fatalf("watchers told %+v", updates)
	}
	c[0].Reconciles[0].Trigger = "changed by the caller"
	if b.Clusters()[0].Reconciles[0].Trigger != "drift-check" {
		t.Fatal("Clusters shares its history with the board")
	}
	b.removed("a/cluster.yml")
	if len(b.Clusters()) != 0 {
		t.Fatal("a removed cluster is still on the board")
	}
	var none *Board
	none.started("x", "start", "", at) // a nil board keeps nothing
	if none.Clusters() != nil {
		t.Fatal("a nil board has clusters")
	}
}

// TestPlanLines: a reconcile's plan is kept as rigger plan prints it, one
// line a step and one a node not reached, and a long plan is cut with a
// line that says how much.
func TestPlanLines(t *testing.T) {
	got := planLines(planned(1, "10.0.0.9"))
	want := []string{"10.0.0.1: restart kubelet (container exited)", "10.0.0.9: not reachable, nothing planned for it (connection refused)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan lines (-want +got):\n%s", diff)
	}
	long := planLines(planned(maxPlanLines + 10))
	if len(long) != maxPlanLines || long[maxPlanLines-1] != "… and 11 more" {
		t.Errorf("a plan of %d steps kept as %d lines ending %q", maxPlanLines+10, len(long), long[len(long)-1])
	}
	if planLines(planned(0)) != nil || planLines(nil) != nil {
		t.Error("an empty plan has lines")
	}
}
