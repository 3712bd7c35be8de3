package etcdsnap_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rt "github.com/rigger/rigger/reconcile/reconciletest"

	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// fakeClock is a Session's clock that the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// schedulePhase drives the snapshot schedule (TestEtcdSandbox's last
// phase) with a fake clock (interval_hours 1, retention 2): a snapshot
// when there is none, none 10 minutes later, one an hour after each, named
// as RKE names them (without ':' once safe_timestamp is set); retention
// keeps the 2 newest scheduled snapshots on every etcd node, of either
// form, and never a manual one. Then a restore request of cluster.yml is
// carried out once: the keys written after the snapshot are gone, and the
// request is no longer pending for a new session on the same state
// directory. Its keys are under /rigger-schedule/.
func schedulePhase(ctx context.Context, t *testing.T, e *etcdSandbox) {
	s, a := e.s, e.a
	c := e.cluster(t, shortAddonWait, func(c *spec.Cluster) {
		b := c.Services.Etcd.BackupConfig
		on := true
		b.Enabled, b.IntervalHours, b.Retention = &on, 1, 2
	})

	// The schedule's session has the fake clock; the Applier the phases
	// share keeps the real one.
	t0 := time.Now().UTC().Truncate(time.Second)
	clock := &fakeClock{now: t0}
	sess := (&rt.Applier{StateDir: a.StateDir, Now: clock.Now}).Etcd(ctx, t, c)

	// tick runs the schedule at t0+at and checks whether it took a
	// snapshot and what retention deleted; it returns the snapshot's name.
	tick := func(at time.Duration, wantTaken bool, wantDeleted ...string) string {
		t.Helper()
		clock.Set(t0.Add(at))
		res, err := etcdsnap.Scheduled(ctx, sess)
		if err != nil {
			t.Fatalf("+%s: %v", at, err)
		}
		t.Logf("+%s: %s", at, res.Schedule.Reason)
		if res.ListErr != nil || res.CopyErr != nil || res.S3Err != nil || res.RetentionErr != nil {
			t.Errorf("+%s: list %v, copy %v, s3 %v, retention %v", at, res.ListErr, res.CopyErr, res.S3Err, res.RetentionErr)
		}
		if taken := res.Snapshot != nil; taken != wantTaken || res.Schedule.Due != wantTaken {
			t.Fatalf("+%s: due %v, taken %v; want %v (%s)", at, res.Schedule.Due, taken, wantTaken, res.Schedule.Reason)
		}
		if !slices.Equal(res.Deleted, wantDeleted) {
			t.Errorf("+%s: retention deleted %v, want %v", at, res.Deleted, wantDeleted)
		}
		if res.Snapshot == nil {
			return ""
		}
		if !res.Next.Equal(t0.Add(at + time.Hour)) {
			t.Errorf("+%s: next snapshot due %s, want an interval after this one", at, res.Next)
		}
		sc := res.Snapshot.Sidecar
		if sc.Kind != etcdsnap.KindScheduled || !sc.TakenAt.Equal(t0.Add(at)) || sc.Size <= 0 || len(sc.SHA256) != 64 {
			t.Errorf("+%s: sidecar %+v: want a scheduled snapshot taken at %s", at, sc, t0.Add(at))
		}
		return sc.Name
	}

	first := tick(0, true)
	if want := t0.Format(time.RFC3339) + "_etcd"; first != want {
		t.Errorf("first scheduled snapshot %s, want RKE's name %s", first, want)
	}
	clock.Set(t0.Add(10 * time.Minute))
	res, err := etcdsnap.Scheduled(ctx, sess)
	if err != nil || res.Snapshot != nil || res.Schedule.Due || !res.Schedule.Next.Equal(t0.Add(time.Hour)) ||
		res.Schedule.Last == nil || res.Schedule.Last.Name != first {
		t.Fatalf("+10m: %+v, %v: want no snapshot, the next at +1h after %s", res, err, first)
	}
	second := tick(time.Hour, true)
	// A manual snapshot at the same instant as the scheduled one: it does
	// not move the schedule, and retention never removes it.
	const manual = "schedule-e2e-manual"
	if _, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: manual}); err != nil {
		t.Fatalf("manual snapshot: %v", err)
	}
	// safe_timestamp: the next names have no ':', and retention counts
	// the scheduled snapshots of both forms together.
	sess.Backup.SafeTimestamp = true
	third := tick(2*time.Hour, true, first)
	if want := strings.ReplaceAll(t0.Add(2*time.Hour).Format(time.RFC3339), ":", "-") + "_etcd"; third != want {
		t.Errorf("scheduled snapshot with safe_timestamp %s, want %s", third, want)
	}

	// Keys before and after the last snapshot, for the restore.
	n1 := s.Nodes[0]
	etcdctl := etcdctlOn(ctx, t, c, sandboxtest.DockerClient(t, n1), n1.Address)
	etcdctl("put", "/rigger-schedule/before", "v")
	fourth := tick(3*time.Hour, true, second)
	etcdctl("put", "/rigger-schedule/after", "v")

	// On every etcd node: exactly the 2 newest scheduled snapshots, and
	// the manual one.
	for _, n := range s.Nodes {
		dir := snapDir(n)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var scheduled []string
		files := map[string]bool{}
		for _, e := range entries {
			files[e.Name()] = true
			if !strings.HasSuffix(e.Name(), etcdsnap.SidecarSuffix) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			var sc etcdsnap.Sidecar
			if err := json.Unmarshal(b, &sc); err != nil {
				t.Fatalf("%s: %s: %v", n.Name, e.Name(), err)
			}
			if sc.Kind == etcdsnap.KindScheduled {
				scheduled = append(scheduled, sc.Name)
			}
		}
		slices.Sort(scheduled)
		if want := []string{third, fourth}; !slices.Equal(scheduled, want) {
			t.Errorf("%s: scheduled snapshots %v, want %v", n.Name, scheduled, want)
		}
		for _, name := range []string{third, fourth, manual} {
			if !files[name] || !files[name+etcdsnap.SidecarSuffix] {
				t.Errorf("%s: %s or its sidecar is missing: %v", n.Name, name, files)
			}
		}
		for _, name := range []string{first, second} {
			if files[name] || files[name+etcdsnap.SidecarSuffix] {
				t.Errorf("%s: %s is still there after retention", n.Name, name)
			}
		}
	}

	// The restore request of cluster.yml, carried out once.
	c.Restore = spec.Restore{Restore: true, SnapshotName: fourth, ID: "r1"}
	rs := a.Session(t, c)
	req, err := etcdsnap.RequestedRestore(a.StateDir, c.Restore)
	if err != nil || req == nil || req.ID != "r1" || req.SnapshotName != fourth || req.Done != nil {
		t.Fatalf("requested restore %+v, %v: want r1 of %s, pending", req, err, fourth)
	}
	var lines []string
	ec, err := rs.Etcd(ctx, a.Lock(ctx, t, rs))
	if err != nil {
		t.Fatal(err)
	}
	rres, err := etcdsnap.RunRestoreRequest(ctx, ec, a.StateDir, req, etcdsnap.RestoreOptions{
		Phase:    func(title string) { lines = append(lines, "==> "+title) },
		Progress: func(node, msg string) { lines = append(lines, node+": "+msg) },
	})
	if err != nil {
		t.Fatalf("restore request: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if rres == nil || len(rres.Restored) != 3 {
		t.Errorf("restored %+v: want all three members", rres)
	}
	var keys []string
	for _, l := range strings.Split(string(etcdctl("get", "/rigger-schedule/", "--prefix", "--keys-only")), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keys = append(keys, l)
		}
	}
	if !slices.Equal(keys, []string{"/rigger-schedule/before"}) {
		t.Errorf("keys after the restore %v, want only the one written before %s", keys, fourth)
	}

	done, err := etcdsnap.RequestedRestore(a.StateDir, c.Restore)
	if err != nil || done == nil || done.Done == nil || done.Done.Error != "" || done.Done.FinishedAt.IsZero() {
		t.Errorf("requested restore on a new session %+v, %v: want r1 recorded as done", done, err)
	}
	if req, err := etcdsnap.PendingRestore(a.StateDir, c.Restore); err != nil || req != nil {
		t.Errorf("pending restore after r1: %+v, %v; want none", req, err)
	}
}
