package etcdsnap

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/spec"
)

// snap is a snapshot as ListSnapshots finds it: of kind (no sidecar when
// kind is ""), taken at, on one node unless where says otherwise
// ("damaged": only a copy of the wrong size; "s3": in S3 only;
// "nodes+s3": on the node and in S3).
func snap(name, kind string, at time.Time, where ...string) Info {
	si := Info{Name: name, TakenAt: at, Size: 10, Nodes: []string{"10.0.0.1"}}
	if kind != "" {
		si.Sidecar = &Sidecar{Name: name, Kind: kind, TakenAt: at, Size: 10}
	}
	for _, w := range where {
		switch w {
		case "damaged":
			si.Nodes, si.Damaged = nil, []string{"10.0.0.1"}
		case "s3":
			si.Nodes, si.S3 = nil, "s3://b/"+name
		case "nodes+s3":
			si.S3 = "s3://b/" + name
		}
	}
	return si
}

func TestNextSnapshot(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	enabled := func(hours int) *spec.BackupConfig {
		on := true
		return &spec.BackupConfig{Enabled: &on, IntervalHours: hours, Retention: 2}
	}
	off := false
	tests := []struct {
		name  string
		b     *spec.BackupConfig
		snaps []Info
		// Want: due, next, the name of the last ("" none), words of the reason.
		due      bool
		next     time.Time
		last     string
		enabled  bool
		inReason string
	}{
		{name: "none yet: due now", b: enabled(1), due: true, next: now, enabled: true, inReason: "no complete snapshot"},
		{name: "last 30m ago, interval 1h: not due",
			b:     enabled(1),
			snaps: []Info{snap("s1", KindScheduled, now.Add(-30*time.Minute))},
			next:  now.Add(30 * time.Minute), last: "s1", enabled: true, inReason: "in 30m0s"},
		{name: "last exactly 1h ago: due",
			b:     enabled(1),
			snaps: []Info{snap("s1", KindScheduled, now.Add(-time.Hour))},
			due:   true, next: now, last: "s1", enabled: true, inReason: "due now"},
		{name: "overdue: Next is when it was due",
			b:     enabled(1),
			snaps: []Info{snap("s1", KindScheduled, now.Add(-5*time.Hour))},
			due:   true, next: now.Add(-4 * time.Hour), last: "s1", enabled: true},
		{name: "any kind counts: a manual one 10m ago",
			b: enabled(12),
			snaps: []Info{
				snap("old", KindScheduled, now.Add(-20*time.Hour)),
				snap("manual", KindManual, now.Add(-10*time.Minute)),
				snap("before", KindBeforeChange, now.Add(-11*time.Hour)),
			},
			next: now.Add(12*time.Hour - 10*time.Minute), last: "manual", enabled: true},
		{name: "the newest is the last, whatever the order",
			b: enabled(1),
			snaps: []Info{
				snap("b", KindScheduled, now.Add(-10*time.Minute)),
				snap("a", KindScheduled, now.Add(-50*time.Minute)),
			},
			next: now.Add(50 * time.Minute), last: "b", enabled: true},
		{name: "a file without sidecar (failed or not rigger's) does not count",
			b: enabled(1),
			snaps: []Info{
				snap("good", KindScheduled, now.Add(-3*time.Hour)),
				snap("half-written", "", now.Add(-time.Minute)),
			},
			due: true, next: now.Add(-2 * time.Hour), last: "good", enabled: true},
		{name: "only damaged copies do not count",
			b:     enabled(1),
			snaps: []Info{snap("truncated", KindScheduled, now.Add(-time.Minute), "damaged")},
			due:   true, next: now, enabled: true, inReason: "no complete snapshot"},
		{name: "a snapshot left in s3 only counts",
			b:     enabled(1),
			snaps: []Info{snap("in-s3", KindScheduled, now.Add(-time.Minute), "s3")},
			next:  now.Add(59 * time.Minute), last: "in-s3", enabled: true},
		{name: "a snapshot dated after now: not due, the clock is suspect",
			b:     enabled(1),
			snaps: []Info{snap("future", KindScheduled, now.Add(2*time.Hour))},
			next:  now.Add(3 * time.Hour), last: "future", enabled: true, inReason: "check the clock"},
		{name: "interval_hours 0 is the default, 12h",
			b:     enabled(0),
			snaps: []Info{snap("s1", KindScheduled, now.Add(-11*time.Hour))},
			next:  now.Add(time.Hour), last: "s1", enabled: true},
		{name: "disabled", b: &spec.BackupConfig{Enabled: &off, IntervalHours: 1}, inReason: "enabled is false"},
		{name: "disabled with snapshots long overdue",
			b:        &spec.BackupConfig{Enabled: &off, IntervalHours: 1},
			snaps:    []Info{snap("s1", KindScheduled, now.Add(-100*time.Hour))},
			inReason: "enabled is false"},
		{name: "no backup_config", inReason: "not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NextSnapshot(tt.b, tt.snaps, now)
			last := ""
			if got.Last != nil {
				last = got.Last.Name
			}
			if got.Due != tt.due || !got.Next.Equal(tt.next) || last != tt.last || got.Enabled != tt.enabled {
				t.Errorf("got due %v, next %s, last %q, enabled %v; want due %v, next %s, last %q, enabled %v (reason: %s)",
					got.Due, got.Next, last, got.Enabled, tt.due, tt.next, tt.last, tt.enabled, got.Reason)
			}
			if !strings.Contains(got.Reason, tt.inReason) || got.Reason == "" {
				t.Errorf("reason %q, want it to say %q", got.Reason, tt.inReason)
			}
		})
	}
}

func TestRetain(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	sched, before, manual := KindScheduled, KindBeforeChange, KindManual
	tests := []struct {
		name      string
		snaps     []Info
		retention int
		s3        bool
		remove    []string
	}{
		{name: "none", retention: 2},
		{name: "fewer than retention", retention: 5,
			snaps: []Info{snap("s1", sched, h(1)), snap("s2", sched, h(2))}},
		{name: "exactly retention", retention: 2,
			snaps: []Info{snap("s1", sched, h(1)), snap("s2", sched, h(2))}},
		{name: "the newest scheduled are kept, in any order", retention: 2,
			snaps:  []Info{snap("s3", sched, h(3)), snap("s1", sched, h(1)), snap("s4", sched, h(4)), snap("s2", sched, h(2))},
			remove: []string{"s1", "s2"}},
		{name: "mixed kinds: manual never, before-change among themselves", retention: 1,
			snaps: []Info{
				snap("m1", manual, h(0)), snap("s1", sched, h(1)), snap("b1", before, h(2)),
				snap("s2", sched, h(3)), snap("m2", manual, h(4)), snap("b2", before, h(5)), snap("s3", sched, h(6)),
			},
			remove: []string{"s1", "b1", "s2"}},
		{name: "manual ones do not count against retention", retention: 2,
			snaps: []Info{snap("m1", manual, h(5)), snap("m2", manual, h(6)), snap("s1", sched, h(1)), snap("s2", sched, h(2))}},
		{name: "without sidecar: never removed", retention: 1,
			snaps: []Info{snap("rke-1", "", h(1)), snap("rke-2", "", h(2)), snap("s1", sched, h(3))}},
		{name: "safe_timestamp changed: names of both forms count as one kind", retention: 1,
			snaps:  []Info{snap(Name(sched, h(1), false), sched, h(1)), snap(Name(sched, h(2), true), sched, h(2))},
			remove: []string{"2026-11-22T01:00:00Z_etcd"}},
		{name: "RKE's scheduled snapshots go once retention complete ones are newer, its named ones never", retention: 2,
			snaps: []Info{
				snap("2026-11-21T22:00:00Z_etcd.zip", "", h(-2)), snap("2026-11-21T23-00-00Z_etcd.zip", "", h(-1)),
				snap("rke_etcd_snapshot_2026-11-21T23:30:00Z.zip", "", h(-1)), snap("c-h5jxq-rl-7tcp2_2026-11-21T23-40-00Z.zip", "", h(-1)),
				snap(Name(sched, h(1), false), sched, h(1)), snap(Name(sched, h(2), false), sched, h(2)),
			},
			remove: []string{"2026-11-21T22:00:00Z_etcd.zip", "2026-11-21T23-00-00Z_etcd.zip"}},
		{name: "RKE's scheduled snapshots stay while fewer complete ones are newer", retention: 2,
			snaps: []Info{snap("2026-11-21T23:00:00Z_etcd.zip", "", h(-1)), snap(Name(sched, h(1), false), sched, h(1))}},
		{name: "ties in time: the greater name is newer", retention: 1,
			snaps:  []Info{snap("b", sched, h(1)), snap("a", sched, h(1)), snap("c", sched, h(1))},
			remove: []string{"a", "b"}},
		{name: "incomplete ones do not count, and go when older than the kept", retention: 2,
			snaps: []Info{
				snap("s1", sched, h(1)), snap("bad2", sched, h(2), "damaged"), snap("s3", sched, h(3)),
				snap("s4", sched, h(4)), snap("bad5", sched, h(5), "damaged"),
			},
			remove: []string{"s1", "bad2"}},
		{name: "s3-only copies count as complete and are removed as well", retention: 1,
			snaps:  []Info{snap("s1", sched, h(1), "s3"), snap("s2", sched, h(2), "s3")},
			remove: []string{"s1"}},
		{name: "with s3, a snapshot s3 lacks stays until it is uploaded, and counts as kept", retention: 1, s3: true,
			snaps: []Info{
				snap("local1", sched, h(1)), snap("up2", sched, h(2), "nodes+s3"), snap("up3", sched, h(3), "nodes+s3"),
				snap("local4", sched, h(4)),
			},
			remove: []string{"up2", "up3"}},
		{name: "without s3, the same are removed", retention: 1,
			snaps: []Info{
				snap("local1", sched, h(1)), snap("up2", sched, h(2), "nodes+s3"), snap("up3", sched, h(3), "nodes+s3"),
				snap("local4", sched, h(4)),
			},
			remove: []string{"local1", "up2", "up3"}},
		{name: "with s3, snapshots in s3 only go as before", retention: 1, s3: true,
			snaps:  []Info{snap("s1", sched, h(1), "s3"), snap("s2", sched, h(2), "s3")},
			remove: []string{"s1"}},
		{name: "retention 0 removes nothing", retention: 0,
			snaps: []Info{snap("s1", sched, h(1)), snap("s2", sched, h(2))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, si := range Retain(tt.snaps, tt.retention, tt.s3) {
				got = append(got, si.Name)
			}
			if diff := cmp.Diff(tt.remove, got); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTakenInfo: the snapshot just taken counts for retention as a
// listing would find it.
func TestTakenInfo(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	sr := &SaveResult{
		Sidecar: &Sidecar{Name: "s", Kind: KindScheduled, TakenAt: at, Size: 42},
		Copies:  []Copy{{Node: "10.0.0.2"}, {Node: "10.0.0.1"}, {Node: "10.0.0.3", Err: errors.New("unreachable")}},
		S3:      "s3://b/s",
	}
	got := takenInfo(sr)
	want := Info{Name: "s", Sidecar: sr.Sidecar, TakenAt: at, Size: 42, Nodes: []string{"10.0.0.1", "10.0.0.2"}, S3: "s3://b/s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !got.Complete() {
		t.Error("a snapshot just taken is complete")
	}
}
