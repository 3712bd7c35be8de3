package etcdsnap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// memSlots is a SlotStore in memory with etcd's compare-and-swap
// semantics: one revision counter, a key's modification revision.
type memSlots struct {
	mu    sync.Mutex
	rev   int64
	val   map[string][]byte
	mod   map[string]int64
	GetFn func() error
}

func newMemSlots() *memSlots { return &memSlots{val: map[string][]byte{}, mod: map[string]int64{}} }

func (m *memSlots) Get(_ context.Context, key string) ([]byte, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.GetFn != nil {
		if err := m.GetFn(); err != nil {
			return nil, 0, err
		}
	}
	return m.val[key], m.mod[key], nil
}

func (m *memSlots) PutIf(_ context.Context, key string, rev int64, value []byte) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mod[key] != rev {
		return m.rev, false, nil
	}
	m.rev++
	m.val[key], m.mod[key] = value, m.rev
	return m.rev, true, nil
}

func (m *memSlots) record(t *testing.T, cluster string) *SlotRecord {
	t.Helper()
	v, _, _ := m.Get(t.Context(), SlotKey(cluster))
	if v == nil {
		return nil
	}
	var r SlotRecord
	if err := json.Unmarshal(v, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestDecideSlot(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const interval = 12 * time.Hour
	due := Schedule{Enabled: true, Due: true, Next: t0.Add(-time.Hour), Reason: "listing: due"}
	notDue := Schedule{Enabled: true, Next: t0.Add(2 * time.Hour), Reason: "listing: not due"}
	for _, tc := range []struct {
		name      string
		s         Schedule
		rec       *SlotRecord
		wantNext  time.Time
		wantClaim bool
		reason    string
	}{
		{"disabled", Schedule{Reason: "off"}, nil, time.Time{}, false, "off"},
		{"no record: the listing decides", due, nil, due.Next, true, "listing: due"},
		{"no record, not due", notDue, nil, notDue.Next, false, "listing: not due"},
		{"taken by another less than an interval ago", due,
			&SlotRecord{State: SlotTaken, Taker: "etcd-rolling-snapshots on 10.0.0.2", Snapshot: "s1", At: t0.Add(-time.Hour)},
			t0.Add(11 * time.Hour), false, "etcd-rolling-snapshots on 10.0.0.2 took the last scheduled snapshot, s1"},
		{"taken an interval ago", due,
			&SlotRecord{State: SlotTaken, Taker: "rigger serve", Snapshot: "s1", At: t0.Add(-interval)},
			t0, true, "rigger serve took the last scheduled snapshot, s1"},
		{"the record never advances the listing", notDue,
			&SlotRecord{State: SlotTaken, Taker: "rigger serve", Snapshot: "s0", At: t0.Add(-3 * interval)},
			notDue.Next, false, "listing: not due"},
		{"claimed, the claim holds", due,
			&SlotRecord{State: SlotClaimed, Taker: "rigger serve", At: t0.Add(-time.Minute), Until: t0.Add(9 * time.Minute)},
			t0.Add(9 * time.Minute), false, "rigger serve claimed the scheduled snapshot's slot"},
		{"claimed, the claim lapsed", due,
			&SlotRecord{State: SlotClaimed, Taker: "rigger serve", At: t0.Add(-time.Hour), Until: t0.Add(-50 * time.Minute)},
			t0.Add(-50 * time.Minute), true, "rigger serve claimed"},
		{"failed less than a minute ago", due,
			&SlotRecord{State: SlotFailed, Taker: "rigger serve", At: t0.Add(-30 * time.Second), Until: t0.Add(30 * time.Second)},
			t0.Add(30 * time.Second), false, "failed to take the scheduled snapshot"},
		{"failed a minute ago: retried", due,
			&SlotRecord{State: SlotFailed, Taker: "rigger serve", At: t0.Add(-time.Minute), Until: t0},
			t0, true, "rigger serve failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, claim, reason := decideSlot(tc.s, tc.rec, interval, t0)
			if !next.Equal(tc.wantNext) || claim != tc.wantClaim || !strings.Contains(reason, tc.reason) {
				t.Errorf("decideSlot = %s, %v, %q; want %s, %v, a reason with %q", next, claim, reason, tc.wantNext, tc.wantClaim, tc.reason)
			}
		})
	}
}

// TestSlotsNeverTakenTwice runs four takers of one cluster's schedule at
// once, each minute of two simulated days: `rigger serve`, which lists the
// snapshots of every node, and the container of each of three etcd nodes,
// which lists its own node only (no S3). Each decides from its listing
// with NextSnapshot and claims the slot with claimSlot, as Scheduled does,
// on one store. Exactly one of them takes each scheduled snapshot, every
// interval, even though the containers never see each other's; a taker
// that fails is followed by a retry a minute later, by whichever taker.
func TestSlotsNeverTakenTwice(t *testing.T) {
	on := true
	b := &spec.BackupConfig{Enabled: &on, IntervalHours: 12, Retention: 6, Timeout: 300}
	store := newMemSlots()
	t0 := time.Date(2026, 11, 26, 0, 0, 30, 0, time.UTC)
	takers := []string{"rigger serve", "etcd-rolling-snapshots on 10.0.0.1", "etcd-rolling-snapshots on 10.0.0.2", "etcd-rolling-snapshots on 10.0.0.3"}
	var mu sync.Mutex
	type taken struct {
		by string
		at time.Time
	}
	var all []taken
	seen := map[string][]Info{} // what each taker lists
	failOnce := map[time.Time]bool{t0.Add(24 * time.Hour): true}
	for now := t0; now.Before(t0.Add(48 * time.Hour)); now = now.Add(time.Minute) {
		var wg sync.WaitGroup
		for _, who := range takers {
			wg.Go(func() {
				cl := &Cluster{Name: "c", Backup: b, Taker: who, Log: slog.New(slog.DiscardHandler)}
				mu.Lock()
				s := NextSnapshot(b, seen[who], now)
				mu.Unlock()
				if !s.Due {
					return
				}
				s, claim, err := cl.claimSlot(t.Context(), store, s, now)
				if err != nil {
					t.Error(err)
					return
				}
				if claim == nil {
					if s.Due {
						t.Errorf("%s at %s: due without a claim", who, now)
					}
					return
				}
				mu.Lock()
				fail := failOnce[now]
				delete(failOnce, now)
				if !fail {
					all = append(all, taken{who, now})
					name := now.Format(time.RFC3339) + "_etcd"
					si := Info{Name: name, TakenAt: now, Size: 1, Nodes: []string{who},
						Sidecar: &Sidecar{Name: name, Kind: KindScheduled, TakenAt: now, Size: 1}}
					seen[who] = append(seen[who], si)
					if who != "rigger serve" {
						seen["rigger serve"] = append(seen["rigger serve"], si)
					}
				}
				mu.Unlock()
				name := ""
				if !fail {
					name = "x"
				}
				if err := claim.settle(t.Context(), name, now); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	want := []time.Time{t0, t0.Add(12 * time.Hour), t0.Add(24*time.Hour + time.Minute), t0.Add(36*time.Hour + time.Minute)}
	var got []time.Time
	for _, tk := range all {
		got = append(got, tk.at)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scheduled snapshots taken at %v (by %v), want one at each of %v", got, all, want)
	}
	if r := store.record(t, "c"); r == nil || r.State != SlotTaken || !r.At.Equal(want[3]) {
		t.Errorf("slot record %+v, want taken at %s", r, want[3])
	}
}

// TestClaimLostToAnotherTaker: two takers read the same record; the one
// whose transaction comes second is told it is not due, and does not take.
func TestClaimLostToAnotherTaker(t *testing.T) {
	on := true
	b := &spec.BackupConfig{Enabled: &on, IntervalHours: 1, Timeout: 60}
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	store := newMemSlots()
	// The second taker's read happens before the first one's claim.
	var stale []byte
	var staleRev int64
	a := &Cluster{Name: "c", Backup: b, Taker: "a"}
	s := NextSnapshot(b, nil, t0)
	stale, staleRev, _ = store.Get(t.Context(), SlotKey("c"))
	if _, claim, err := a.claimSlot(t.Context(), store, s, t0); err != nil || claim == nil {
		t.Fatalf("first claim: %v, %v", claim, err)
	}
	late := &staleStore{memSlots: store, val: stale, rev: staleRev}
	bcl := &Cluster{Name: "c", Backup: b, Taker: "b"}
	got, claim, err := bcl.claimSlot(t.Context(), late, s, t0)
	if err != nil || claim != nil || got.Due || !strings.Contains(got.Reason, "another taker claimed") {
		t.Errorf("second claim: %+v, %v, %v; want not due, lost to the first", got, claim, err)
	}
	if r := store.record(t, "c"); r == nil || r.Taker != "a" || r.State != SlotClaimed {
		t.Errorf("record %+v, want a's claim", r)
	}
}

// staleStore answers Get with what was read before another taker wrote.
type staleStore struct {
	*memSlots
	val []byte
	rev int64
}

func (s *staleStore) Get(context.Context, string) ([]byte, int64, error) { return s.val, s.rev, nil }

// TestSnapshotterLoop drives RunSnapshotter with an injected clock: the
// waits it asks for follow the schedule (the slot record another taker
// wrote), RetryAfter after a failure, RecheckInterval when nothing is
// scheduled; a configuration error ends it, and so does ctx.
func TestSnapshotterLoop(t *testing.T) {
	on, off := true, false
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	store := newMemSlots()
	put := func(r SlotRecord) {
		b, _ := json.Marshal(r)
		_, rev, _ := store.Get(t.Context(), SlotKey("c"))
		if _, ok, _ := store.PutIf(t.Context(), SlotKey("c"), rev, b); !ok {
			t.Fatal("put record")
		}
	}
	d := &desired.Cluster{Name: "c", Nodes: []desired.Node{{Address: "10.0.0.1", InternalAddress: "10.0.0.1", Roles: []string{"etcd"},
		Containers: []desired.Container{{Name: desired.Etcd, Image: "etcd"}}}}}
	noDocker := func(context.Context, string) (dockerop.Engine, error) { return nil, errors.New("no docker here") }
	cluster := func(backup *spec.BackupConfig) *Cluster {
		return &Cluster{Name: "c", Desired: d, Backup: backup, Engine: noDocker, PKI: &pki.Set{}, HelperImage: "alpine", MaxParallel: 1,
			Now: func() time.Time { return t0 }, Taker: "etcd-rolling-snapshots on 10.0.0.1",
			Slots: func(context.Context) (SlotStore, func(), error) { return store, func() {}, nil }}
	}
	enabled := &spec.BackupConfig{Enabled: &on, IntervalHours: 12, Retention: 6, Timeout: 60}

	for _, tc := range []struct {
		name   string
		setup  func()
		load   func(ctx context.Context) (*Cluster, func(), error)
		want   time.Duration
		ends   bool
		errHas string
	}{
		{name: "backup disabled: recheck later", load: func(context.Context) (*Cluster, func(), error) {
			return cluster(&spec.BackupConfig{Enabled: &off}), func() {}, nil
		}, want: RecheckInterval},
		{name: "another taker took it an hour ago: recheck, no spinning",
			setup: func() {
				put(SlotRecord{State: SlotTaken, Taker: "rigger serve", Snapshot: "s", At: t0.Add(-time.Hour)})
			},
			load: func(context.Context) (*Cluster, func(), error) { return cluster(enabled), func() {}, nil },
			want: RecheckInterval},
		{name: "another taker holds the claim 12 s more",
			setup: func() {
				put(SlotRecord{State: SlotClaimed, Taker: "rigger serve", At: t0.Add(-time.Minute), Until: t0.Add(12 * time.Second)})
			},
			load: func(context.Context) (*Cluster, func(), error) { return cluster(enabled), func() {}, nil },
			want: 12 * time.Second},
		{name: "another taker holds the claim 9 minutes more: look again in 15 s",
			setup: func() {
				put(SlotRecord{State: SlotClaimed, Taker: "rigger serve", At: t0.Add(-time.Minute), Until: t0.Add(9 * time.Minute)})
			},
			load: func(context.Context) (*Cluster, func(), error) { return cluster(enabled), func() {}, nil },
			want: claimRecheck},
		{name: "a claim about to lapse: at least minWait",
			setup: func() {
				put(SlotRecord{State: SlotClaimed, Taker: "rigger serve", At: t0.Add(-time.Minute), Until: t0.Add(time.Second)})
			},
			load: func(context.Context) (*Cluster, func(), error) { return cluster(enabled), func() {}, nil },
			want: minWait},
		{name: "due, the snapshot fails (no docker): retried after a minute, the slot marked failed",
			setup: func() {
				put(SlotRecord{State: SlotTaken, Taker: "rigger serve", Snapshot: "s", At: t0.Add(-13 * time.Hour)})
			},
			load: func(context.Context) (*Cluster, func(), error) { return cluster(enabled), func() {}, nil },
			want: RetryAfter},
		{name: "the configuration cannot be read yet: retried after a minute",
			load: func(context.Context) (*Cluster, func(), error) {
				return nil, nil, errors.New("open config: no such file")
			},
			want: RetryAfter},
		{name: "a configuration error ends the loop",
			load: func(context.Context) (*Cluster, func(), error) {
				return nil, nil, &ConfigError{Err: errors.New("config.json: invalid character")}
			},
			ends: true, errHas: "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var waits []time.Duration
			err := RunSnapshotter(ctx, SnapshotterOptions{
				Load: tc.load,
				Now:  func() time.Time { return t0 },
				Wait: func(ctx context.Context, d time.Duration) error {
					waits = append(waits, d)
					if len(waits) == 2 {
						cancel()
						return ctx.Err()
					}
					return nil
				},
			})
			if tc.ends {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) || len(waits) != 0 {
					t.Fatalf("RunSnapshotter = %v after waits %v; want the configuration error at once", err, waits)
				}
				return
			}
			if err != nil {
				t.Fatalf("RunSnapshotter = %v, want nil when ctx ends", err)
			}
			if len(waits) != 2 || waits[0] != tc.want || waits[1] != tc.want {
				t.Errorf("waits %v, want %s twice", waits, tc.want)
			}
		})
	}
	if r := store.record(t, "c"); r == nil || r.State != SlotFailed || r.Taker != "etcd-rolling-snapshots on 10.0.0.1" || !r.Until.Equal(t0.Add(RetryAfter)) {
		t.Errorf("slot record after the failed snapshot %+v, want failed, retried from %s", r, t0.Add(RetryAfter))
	}
}
