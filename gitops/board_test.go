package gitops

import (
	"errors"
	"fmt"
	"slices"
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

// TestBoardSince: a follower that gives the version it last saw gets only
// the clusters changed or removed since; one too far behind, or new, gets
// the whole board.
func TestBoardSince(t *testing.T) {
	b := NewBoard(0)
	at := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	for _, p := range []string{"a", "b", "c"} {
		b.started(p, "start", "rev1", at)
	}
	all := b.Since(0)
	if !all.Full || len(all.Changed) != 3 || all.Changed[0].Path != "a" || all.Version == 0 {
		t.Fatalf("Since(0) = %+v, want the whole board", all)
	}
	b.finished("b", ReconcileRecord{Revision: "rev1"}, &StatusFile{Cluster: "b"})
	b.removed("c")
	got := b.Since(all.Version)
	if got.Full || len(got.Changed) != 1 || got.Changed[0].Path != "b" || got.Changed[0].Status.Cluster != "b" ||
		!slices.Equal(got.Removed, []string{"c"}) || got.Version != all.Version+2 {
		t.Fatalf("Since(%d) = %+v, want b changed and c removed", all.Version, got)
	}
	if now := b.Since(got.Version); now.Full || len(now.Changed) != 0 || len(now.Removed) != 0 {
		t.Fatalf("nothing changed since %d: %+v", got.Version, now)
	}
	// A cluster removed, then back: changed, not removed.
	b.started("c", "start", "rev2", at)
	if again := b.Since(got.Version); len(again.Changed) != 1 || again.Changed[0].Path != "c" || len(again.Removed) != 0 {
		t.Fatalf("a cluster back: %+v", again)
	}
	// A version from another board (a restarted serve) is not trusted.
	if other := b.Since(b.Since(0).Version + 5); !other.Full || len(other.Changed) != 3 {
		t.Fatalf("a version from the future: %+v", other)
	}

	// More removals than the board remembers: a follower from before the
	// forgotten ones gets the whole board, one after them only the news.
	old := b.Since(0).Version
	for i := range maxGone + 1 {
		p := fmt.Sprintf("gone-%d", i)
		b.started(p, "start", "", at)
		b.removed(p)
	}
	if full := b.Since(old); !full.Full || len(full.Removed) != 0 || len(full.Changed) != 3 {
		t.Fatalf("a follower from before a forgotten removal: Full %v, %d changed, %d removed", full.Full, len(full.Changed), len(full.Removed))
	}
	recent := b.Since(0).Version
	b.removed("a")
	if news := b.Since(recent); news.Full || !slices.Equal(news.Removed, []string{"a"}) {
		t.Fatalf("a follower after the forgotten removals: %+v", news)
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
