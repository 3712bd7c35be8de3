package replicas

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rigger/rigger/reconcile/lock"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// renew writes id's membership Lease as renewed at at.
func renew(t *testing.T, s *Set, id string, at time.Time) {
	t.Helper()
	leases := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace)
	name := s.memberLease(id)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelReplica: s.cfg.Group}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &metav1.MicroTime{Time: at}}}
	ctx := context.Background()
	if _, err := leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSetJudgesReplicas drives a Set's reads of the membership Leases with
// a clock of its own: it campaigns for nothing until it has read its own
// Lease back; then for its clusters and those it succeeds to; it hands a
// cluster whose replica renews over, and runs it once that replica has not
// renewed for a renew deadline and a retry period; once that replica has
// not renewed for a lease duration it is gone, and the clusters are
// assigned again (Changed).
func TestSetJudgesReplicas(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	timing := lock.LeaseTiming{Duration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond, Now: clk.Now}
	s, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", Group: "g", ID: "a", Timing: timing})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var paths []string
	for i := range 9 {
		paths = append(paths, fmt.Sprintf("clusters/c%d/cluster.yml", i))
	}
	renew(t, s, "b", clk.Now())
	renew(t, s, "c", clk.Now())
	s.read(ctx)
	if got := s.Campaigns(paths); len(got) != 0 {
		t.Fatalf("campaigns %v before its own Lease was read back, want none", got)
	}

	renew(t, s, "a", clk.Now())
	s.read(ctx)
	<-s.Changed() // settled: the campaigns changed
	all := []string{"a", "b", "c"}
	assigned := Assign(all, paths)
	want := map[string]bool{}
	var ofB []string
	for _, p := range paths {
		if assigned[p] == "a" || Successor(all, paths, p) == "a" {
			want[p] = true
		}
		if assigned[p] == "b" {
			ofB = append(ofB, p)
		}
	}
	if got := s.Campaigns(paths); !maps.Equal(got, want) {
		t.Fatalf("campaigns %v, want its clusters and those it succeeds to: %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	if len(want) == len(paths) || len(want) < 3 {
		t.Fatalf("campaigns for %d of %d clusters: want its 3 and some it succeeds to", len(want), len(paths))
	}
	for _, p := range paths {
		if ok, owner, _ := s.mayRun(p); ok != (assigned[p] == "a") {
			t.Errorf("%s (of %s): runs it %v, want only its own while every replica renews", p, owner, ok)
		}
	}

	// b stops renewing; c goes on.
	for range 8 {
		clk.add(timing.RetryPeriod)
		renew(t, s, "a", clk.Now())
		renew(t, s, "c", clk.Now())
		s.read(ctx)
	}
	for _, p := range ofB {
		if ok, _, _ := s.mayRun(p); !ok {
			t.Errorf("%s of b, silent for %s: not run once its Lease is held, want it run", p, 8*timing.RetryPeriod)
		}
	}
	select {
	case <-s.Changed():
		t.Fatal("campaigns changed while b is not a lease duration silent")
	default:
	}
	for range 5 {
		clk.add(timing.RetryPeriod)
		renew(t, s, "a", clk.Now())
		renew(t, s, "c", clk.Now())
		s.read(ctx)
	}
	select {
	case <-s.Changed():
	default:
		t.Fatalf("b silent for %s, over the lease duration: the campaigns did not change", 13*timing.RetryPeriod)
	}
	if got := Assign([]string{"a", "c"}, paths); !maps.Equal(s.assigned, got) {
		t.Errorf("assigned %v, want %v: over a and c", s.assigned, got)
	}
	if got := s.Members(); len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Errorf("members %v, want a and c", got)
	}

	// An hour later, b's Lease is deleted; a's and c's are kept.
	clk.add(gcAfter)
	renew(t, s, "a", clk.Now())
	renew(t, s, "c", clk.Now())
	s.read(ctx)
	leases, err := s.cfg.Client.CoordinationV1().Leases("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, l := range leases.Items {
		left = append(left, *l.Spec.HolderIdentity)
	}
	if slices.Sort(left); !slices.Equal(left, []string{"a", "c"}) {
		t.Errorf("membership Leases of %v left, want a's and c's: b's, silent for over %s, deleted", left, gcAfter)
	}
}

// TestNewRefusesTiming: a lease duration that does not outlast a renew
// deadline and three retry periods is refused.
func TestNewRefusesTiming(t *testing.T) {
	_, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", Group: "g", ID: "a",
		Timing: lock.LeaseTiming{Duration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: time.Second}})
	if err == nil {
		t.Fatal("New accepted a lease duration of 10s with a renew deadline of 8s and a retry period of 1s")
	}
}
