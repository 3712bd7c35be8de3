package lock

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rigger/rigger/internal/testwait"
)

const (
	testNS    = "kube-system"
	testLease = "rigger-cluster1"
)

// testTiming keeps lease tests short. A Lease records whole seconds, so
// Duration cannot be shorter.
var testTiming = LeaseTiming{Duration: time.Second, RenewDeadline: 300 * time.Millisecond, RetryPeriod: 30 * time.Millisecond}

// newCluster returns a fake clientset whose Leases honour resourceVersion
// as the API server does (optimistic concurrency), which the fake's tracker
// alone does not: without it a takeover could never be noticed.
func newCluster() *fake.Clientset {
	c := fake.NewClientset()
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	var mu sync.Mutex
	rv := 0
	c.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "create":
			l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			rv++
			l.ResourceVersion = strconv.Itoa(rv)
			if err := c.Tracker().Create(gvr, l, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, l, nil
		case "update":
			l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			cur, err := c.Tracker().Get(gvr, a.GetNamespace(), l.Name)
			if err != nil {
				return true, nil, err
			}
			if cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("the object has been modified"))
			}
			rv++
			l.ResourceVersion = strconv.Itoa(rv)
			if err := c.Tracker().Update(gvr, l, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, l, nil
		case "get":
			obj, err := c.Tracker().Get(gvr, a.GetNamespace(), a.(k8stesting.GetAction).GetName())
			return true, obj, err
		}
		return false, nil, nil
	})
	return c
}

func getLease(t *testing.T, c *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases(testNS).Get(context.Background(), testLease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the lease: %v", err)
	}
	return l
}

func mustLease(t *testing.T, c *fake.Clientset, h Holder) (context.Context, func()) {
	t.Helper()
	held, release, err := Lease(t.Context(), c, testNS, testLease, h, LeaseOptions{Timing: testTiming})
	if err != nil {
		t.Fatalf("Lease for %s: %v", h.ID, err)
	}
	t.Cleanup(release)
	return held, release
}

func TestLeaseRefusedNamesHolder(t *testing.T) {
	c := newCluster()
	first := testHolder("rigger apply on host1 (pid 42)")
	held, _ := mustLease(t, c, first)

	l := getLease(t, c)
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != first.ID {
		t.Errorf("holderIdentity = %q, want %q", got, first.ID)
	}

	start := time.Now()
	_, _, err := Lease(t.Context(), c, testNS, testLease, testHolder("second"), LeaseOptions{Timing: testTiming})
	var heldErr *HeldError
	if !errors.As(err, &heldErr) {
		t.Fatalf("second Lease: got %v, want a *HeldError", err)
	}
	if diff := cmp.Diff(&HeldError{Holder: first, Lock: "lease " + testNS + "/" + testLease}, heldErr, cmpopts.IgnoreFields(HeldError{}, "At", "Expires")); diff != "" {
		t.Errorf("HeldError (-want +got):\n%s", diff)
	}
	if d := time.Since(start); d > testTiming.Duration/2 {
		t.Errorf("refusing took %v, want it at once", d)
	}
	if held.Err() != nil {
		t.Errorf("the first holder's context ended: %v", context.Cause(held))
	}
}

func TestLeaseAfterRelease(t *testing.T) {
	c := newCluster()
	held, release := mustLease(t, c, testHolder("first"))
	release()
	if held.Err() == nil {
		t.Error("held is not cancelled after release")
	}
	l := getLease(t, c)
	if id := ptr.Deref(l.Spec.HolderIdentity, ""); id != "" || l.Annotations[HolderAnnotation] != "" {
		t.Errorf("released lease: holder %q, annotation %q; want both empty", id, l.Annotations[HolderAnnotation])
	}

	start := time.Now()
	mustLease(t, c, testHolder("second"))
	if d := time.Since(start); d > testTiming.Duration/2 {
		t.Errorf("taking a released lease took %v, want it at once", d)
	}
	h, err := parseHolder([]byte(getLease(t, c).Annotations[HolderAnnotation]))
	if err != nil || h.ID != "second" {
		t.Errorf("annotation names %+v (%v), want second", h, err)
	}
}

func TestLeaseWait(t *testing.T) {
	c := newCluster()
	_, release := mustLease(t, c, testHolder("first"))

	type result struct {
		release func()
		err     error
	}
	got := make(chan result, 1)
	go func() {
		_, r, err := Lease(t.Context(), c, testNS, testLease, testHolder("second"), LeaseOptions{Timing: testTiming, Wait: true})
		got <- result{r, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("waiting Lease returned (%v) while the lease was held", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	r := testwait.Recv(t, got, 5*time.Second, "the waiting Lease getting the released lease", nil)
	if r.err != nil {
		t.Fatalf("waiting Lease: %v", r.err)
	}
	r.release()
}

func TestLeaseWaitCancelled(t *testing.T) {
	c := newCluster()
	mustLease(t, c, testHolder("first"))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, _, err := Lease(ctx, c, testNS, testLease, testHolder("second"), LeaseOptions{Timing: testTiming, Wait: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want it to wrap context.DeadlineExceeded", err)
	}
	var heldErr *HeldError
	if !errors.As(err, &heldErr) || heldErr.Holder.ID != "first" {
		t.Errorf("got %v, want it to wrap a *HeldError naming first", err)
	}
	if id := ptr.Deref(getLease(t, c).Spec.HolderIdentity, ""); id != "first" {
		t.Errorf("after giving up, the lease is held by %q, want first", id)
	}
}

func TestLeaseExpiredTakenOver(t *testing.T) {
	c := newCluster()
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	_, err := c.CoordinationV1().Leases(testNS).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease,
			Annotations: map[string]string{HolderAnnotation: `{"id":"crashed"}`}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("crashed"),
			LeaseDurationSeconds: ptr.To[int32](1),
			AcquireTime:          &old,
			RenewTime:            &old,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustLease(t, c, testHolder("me"))
	l := getLease(t, c)
	if id := ptr.Deref(l.Spec.HolderIdentity, ""); id != "me" {
		t.Errorf("holderIdentity = %q, want me", id)
	}
	if h, err := parseHolder([]byte(l.Annotations[HolderAnnotation])); err != nil || h.ID != "me" {
		t.Errorf("annotation names %+v (%v), want me", h, err)
	}
}

func TestLeaseLostToAnotherHolder(t *testing.T) {
	c := newCluster()
	held, release := mustLease(t, c, testHolder("first"))

	// Someone else takes the lease over, as after a partition.
	l := getLease(t, c)
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity = ptr.To("intruder")
	l.Spec.LeaseDurationSeconds = ptr.To[int32](30)
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	l.Annotations = map[string]string{HolderAnnotation: `{"id":"intruder"}`}
	if err := retryUpdate(t, c, l); err != nil {
		t.Fatal(err)
	}

	testwait.Recv(t, held.Done(), 5*time.Second, "held cancelled after the lease was taken over", nil)
	if !errors.Is(context.Cause(held), ErrLost) {
		t.Errorf("cause = %v, want ErrLost", context.Cause(held))
	}
	release()
	if id := ptr.Deref(getLease(t, c).Spec.HolderIdentity, ""); id != "intruder" {
		t.Errorf("release gave up someone else's lease: holder %q", id)
	}
}

// retryUpdate writes l's spec and annotations over the current lease,
// retrying while the holder's renewals conflict with it.
func retryUpdate(t *testing.T, c *fake.Clientset, l *coordinationv1.Lease) error {
	for range 50 {
		cur := getLease(t, c)
		cur.Spec, cur.Annotations = l.Spec, l.Annotations
		_, err := c.CoordinationV1().Leases(testNS).Update(t.Context(), cur, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("the lease kept changing")
}

func TestLeaseTimingRejected(t *testing.T) {
	tests := []struct {
		name   string
		timing LeaseTiming
	}{
		{"under a second", LeaseTiming{Duration: 500 * time.Millisecond, RenewDeadline: 100 * time.Millisecond, RetryPeriod: 10 * time.Millisecond}},
		{"renew deadline above duration", LeaseTiming{Duration: time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 10 * time.Millisecond}},
		{"retry period above renew deadline", LeaseTiming{Duration: time.Second, RenewDeadline: 100 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Lease(t.Context(), newCluster(), testNS, testLease, testHolder("me"), LeaseOptions{Timing: tt.timing})
			if err == nil {
				t.Fatal("Lease accepted the timing")
			}
			err = RunLeader(t.Context(), newCluster(), testNS, testLease, "me", tt.timing, func(context.Context) {
				t.Error("run ran with a bad timing")
			}, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatal("RunLeader accepted the timing")
			}
		})
	}
}

func TestLeaseTimingDefaults(t *testing.T) {
	got := LeaseTiming{RetryPeriod: time.Second}.withDefaults()
	want := LeaseTiming{Duration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: time.Second}
	if got.Now == nil {
		t.Error("withDefaults left the clock nil")
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(LeaseTiming{}, "Now")); diff != "" {
		t.Errorf("withDefaults (-want +got):\n%s", diff)
	}
}

// TestRunLeaderOneAtATime runs two replicas whose work ends after a while,
// so that leadership moves: their work never overlaps, and each replica
// knows when it leads.
func TestRunLeaderOneAtATime(t *testing.T) {
	c := newCluster()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()

	var active, overlaps, terms atomic.Int32
	var mu sync.Mutex
	ran := map[string]int{}
	electors := map[string]*Elector{}
	for _, id := range []string{"serve-0", "serve-1"} {
		electors[id] = NewElector(c, testNS, testLease, id, testTiming, slog.New(slog.DiscardHandler))
	}
	var wg sync.WaitGroup
	for id, e := range electors {
		wg.Go(func() {
			err := e.Run(ctx, func(workCtx context.Context) {
				if active.Add(1) != 1 {
					overlaps.Add(1)
				}
				defer active.Add(-1)
				terms.Add(1)
				mu.Lock()
				ran[id]++
				mu.Unlock()
				if !e.IsLeader() {
					t.Errorf("%s runs but IsLeader is false", id)
				}
				for other, o := range electors {
					if other != id && o.IsLeader() {
						t.Errorf("%s and %s both say they lead", id, other)
					}
				}
				select {
				case <-workCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			})
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("work overlapped %d times", n)
	}
	if n := terms.Load(); n < 3 {
		t.Errorf("work ran %d times in 3s, want leadership to move several times", n)
	}
	for id, e := range electors {
		if e.IsLeader() {
			t.Errorf("%s still says it leads after Run returned", id)
		}
	}
	t.Logf("terms per replica: %v", ran)
	if id := ptr.Deref(getLease(t, c).Spec.HolderIdentity, ""); id != "" {
		t.Errorf("after both replicas stopped the lease is held by %q", id)
	}
}

// TestLeaseRefusedByServe: an apply refused because serve leads names the
// replica that leads.
func TestLeaseRefusedByServe(t *testing.T) {
	c := newCluster()
	ctx, cancel := context.WithCancel(t.Context())
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- RunLeader(ctx, c, testNS, testLease, "serve-0", testTiming, func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
		}, slog.New(slog.DiscardHandler))
	}()
	testwait.Recv(t, leading, 5*time.Second, "the only replica leading", nil)
	_, _, err := Lease(t.Context(), c, testNS, testLease, testHolder("apply"), LeaseOptions{Timing: testTiming})
	var heldErr *HeldError
	if !errors.As(err, &heldErr) {
		t.Fatalf("Lease while serve leads: got %v, want a *HeldError", err)
	}
	if h := heldErr.Holder; h.ID != "serve-0" || h.Command != "serve" || h.Since.IsZero() {
		t.Errorf("HeldError names %+v, want serve-0, command serve, with a time", h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunLeader: %v", err)
	}
	mustLease(t, c, testHolder("apply"))
}

// leaseOf is a Lease held by h since acquired, renewed at renewed, for
// seconds; h is in the annotation unless annotate is false.
func leaseOf(h Holder, acquired, renewed time.Time, seconds int32, annotate bool) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(h.ID),
			LeaseDurationSeconds: ptr.To(seconds),
			AcquireTime:          ptr.To(metav1.NewMicroTime(acquired)),
			RenewTime:            ptr.To(metav1.NewMicroTime(renewed)),
		},
	}
	if annotate {
		b, _ := json.Marshal(h)
		l.Annotations = map[string]string{HolderAnnotation: string(b)}
	}
	return l
}

// TestJudge is the decision about a Lease found held, with a fake clock
// and a fake machine: a holder is taken over at once only when it is a
// process of this machine that ended, otherwise once it has not renewed
// the lease for its duration as seen here.
func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	crashed := crashedHere()
	elsewhere := Holder{ID: "rigger serve on laptop (pid 7)", Host: "laptop", PID: 7, Command: "serve", Boot: "boot-9", PIDNamespace: "pid:[1]", Start: 3}
	released := leaseOf(Holder{}, t0, t0, 1, false)
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		running map[int]uint64
		now     time.Time
		last    observation
		want    verdict
		holder  string
		stale   bool
		expires time.Time
	}{
		{name: "no lease", now: t0, want: leaseFree},
		{name: "released", lease: released, now: t0, want: leaseFree},
		{name: "held by me", lease: leaseOf(Holder{ID: "me"}, t0, t0, 60, false), now: t0, want: leaseFree},
		{name: "holder here runs", lease: leaseOf(crashed, t0, t0, 60, true), running: map[int]uint64{8443: 500},
			now: t0.Add(2 * time.Second), want: leaseHeld, holder: crashed.ID, expires: t0.Add(62 * time.Second)},
		{name: "holder here crashed", lease: leaseOf(crashed, t0, t0, 60, true),
			now: t0.Add(2 * time.Second), want: leaseGone, holder: crashed.ID, expires: t0.Add(62 * time.Second)},
		{name: "holder here crashed, its pid reused", lease: leaseOf(crashed, t0, t0, 60, true), running: map[int]uint64{8443: 501},
			now: t0.Add(2 * time.Second), want: leaseGone, holder: crashed.ID, expires: t0.Add(62 * time.Second)},
		{name: "annotation of an earlier holder", lease: func() *coordinationv1.Lease {
			l := leaseOf(crashed, t0, t0, 60, true)
			l.Spec.HolderIdentity = ptr.To("serve-1")
			return l
		}(), now: t0.Add(2 * time.Second), want: leaseHeld, holder: "serve-1", expires: t0.Add(62 * time.Second)},
		{name: "holder elsewhere, first seen", lease: leaseOf(elsewhere, t0, t0, 60, true),
			now: t0.Add(2 * time.Second), want: leaseHeld, holder: elsewhere.ID, expires: t0.Add(62 * time.Second)},
		{name: "holder elsewhere, not renewed for less than its duration", lease: leaseOf(elsewhere, t0, t0, 60, true),
			last: observation{holder: elsewhere.ID, renew: t0, at: t0.Add(2 * time.Second)},
			now:  t0.Add(61 * time.Second), want: leaseHeld, holder: elsewhere.ID, stale: true, expires: t0.Add(62 * time.Second)},
		{name: "holder elsewhere, not renewed for its duration", lease: leaseOf(elsewhere, t0, t0, 60, true),
			last: observation{holder: elsewhere.ID, renew: t0, at: t0.Add(2 * time.Second)},
			now:  t0.Add(62 * time.Second), want: leaseExpired, holder: elsewhere.ID, stale: true, expires: t0.Add(62 * time.Second)},
		{name: "holder elsewhere renewed since last seen", lease: leaseOf(elsewhere, t0, t0.Add(50*time.Second), 60, true),
			last: observation{holder: elsewhere.ID, renew: t0, at: t0.Add(2 * time.Second)},
			now:  t0.Add(70 * time.Second), want: leaseHeld, holder: elsewhere.ID, expires: t0.Add(130 * time.Second)},
		{name: "expired by its timestamps, first seen", lease: leaseOf(elsewhere, t0, t0, 60, true),
			now: t0.Add(time.Hour), want: leaseHeld, holder: elsewhere.ID, stale: true, expires: t0.Add(time.Hour + time.Minute)},
		{name: "no duration", lease: leaseOf(elsewhere, t0, t0, 0, true),
			now: t0, want: leaseExpired, holder: elsewhere.ID, stale: true, expires: t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := judge(tt.lease, "me", tt.now, tt.last, here(tt.running))
			if r.verdict != tt.want || r.holder.ID != tt.holder || r.stale != tt.stale || !r.expires.Equal(tt.expires) {
				t.Errorf("judge = verdict %d, holder %q, stale %v, expires %s; want %d, %q, %v, %s",
					r.verdict, r.holder.ID, r.stale, r.expires, tt.want, tt.holder, tt.stale, tt.expires)
			}
		})
	}
}

func TestWaitingReportedAtABoundedRate(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	var got []string
	waiting := func(e *HeldError) { got = append(got, e.Holder.ID+"@"+e.At.Sub(t0).String()) }
	var r reported
	for _, c := range []struct {
		holder string
		after  time.Duration
	}{{"a", 0}, {"a", time.Second}, {"a", WaitReportInterval - time.Second}, {"b", WaitReportInterval}, {"b", 2 * WaitReportInterval}, {"b", 2*WaitReportInterval + time.Second}} {
		now := t0.Add(c.after)
		r.tell(waiting, &HeldError{Holder: Holder{ID: c.holder}, At: now}, now)
	}
	r.tell(waiting, nil, t0.Add(time.Hour))
	r.tell(nil, &HeldError{Holder: Holder{ID: "c"}}, t0)
	want := []string{"a@0s", "b@10s", "b@20s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}
}

// TestLeaseOfCrashedHolderTakenOver: a fresh Lease of a rigger of this
// machine that no longer runs is taken at once, without waiting; one that
// runs, or runs elsewhere, is refused.
func TestLeaseOfCrashedHolderTakenOver(t *testing.T) {
	tests := []struct {
		name    string
		holder  Holder
		running map[int]uint64
		taken   bool
	}{
		{name: "crashed here", holder: crashedHere(), taken: true},
		{name: "runs here", holder: crashedHere(), running: map[int]uint64{8443: 500}},
		{name: "elsewhere", holder: func() Holder { h := crashedHere(); h.Boot = "boot-2"; return h }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster()
			now := time.Now()
			if _, err := c.CoordinationV1().Leases(testNS).Create(t.Context(), leaseOf(tt.holder, now, now, 60, true), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			m := here(tt.running)
			var logged bytes.Buffer
			_, release, err := Lease(t.Context(), c, testNS, testLease, testHolder("me"),
				LeaseOptions{Timing: testTiming, Machine: &m, Log: slog.New(slog.NewTextHandler(&logged, nil))})
			if !tt.taken {
				var held *HeldError
				if !errors.As(err, &held) || held.Holder.ID != tt.holder.ID || held.Expires.IsZero() {
					t.Fatalf("got %v, want a *HeldError naming %s with an expiry", err, tt.holder.ID)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lease over a crashed holder: %v", err)
			}
			defer release()
			l := getLease(t, c)
			if id := ptr.Deref(l.Spec.HolderIdentity, ""); id != "me" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
				t.Errorf("lease held by %q after %d transitions, want me after 1", id, ptr.Deref(l.Spec.LeaseTransitions, 0))
			}
			if h, err := parseHolder([]byte(l.Annotations[HolderAnnotation])); err != nil || h.ID != "me" {
				t.Errorf("annotation names %+v (%v), want me", h, err)
			}
			if !strings.Contains(logged.String(), tt.holder.ID) {
				t.Errorf("the takeover is not logged naming %s: %q", tt.holder.ID, logged.String())
			}
		})
	}
}

// TestLeaseWaitsOutHolderElsewhere: a holder on another machine that stops
// renewing is waited out for the lease's duration, reporting who holds it
// and when it expires.
func TestLeaseWaitsOutHolderElsewhere(t *testing.T) {
	c := newCluster()
	elsewhere := Holder{ID: "rigger apply on laptop (pid 7)", Host: "laptop", PID: 7}
	now := time.Now()
	if _, err := c.CoordinationV1().Leases(testNS).Create(t.Context(), leaseOf(elsewhere, now, now, 1, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []*HeldError
	_, release, err := Lease(t.Context(), c, testNS, testLease, testHolder("me"), LeaseOptions{Timing: testTiming, Wait: true,
		Waiting: func(e *HeldError) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, e)
		}})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	defer release()
	if id := ptr.Deref(getLease(t, c).Spec.HolderIdentity, ""); id != "me" {
		t.Errorf("lease held by %q, want me", id)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || reports[0].Holder.ID != elsewhere.ID || reports[0].Expires.IsZero() || reports[0].Lock != "lease "+testNS+"/"+testLease {
		t.Errorf("reports while waiting: %+v, want the holder elsewhere with its expiry", reports)
	}
}

// TestLeaseNoAnswer: an API server that does not answer the first read is
// a *NoAnswerError; one that answers with a refusal or a failure is not,
// and nothing is taken.
func TestLeaseNoAnswer(t *testing.T) {
	gr := coordinationv1.SchemeGroupVersion.WithResource("leases").GroupResource()
	tests := []struct {
		name     string
		err      error
		noAnswer bool
	}{
		{name: "connection refused", err: &url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: syscall.ECONNREFUSED}, noAnswer: true},
		{name: "no answer in time", err: fmt.Errorf("wrapped: %w", context.DeadlineExceeded), noAnswer: true},
		{name: "forbidden", err: apierrors.NewForbidden(gr, testLease, errors.New("RBAC: no rights"))},
		{name: "server error", err: apierrors.NewInternalError(errors.New("etcd is sick"))},
		{name: "certificate of another server", err: &url.Error{Op: "Get", URL: "https://127.0.0.1:6443",
			Err: &tls.CertificateVerificationError{Err: errors.New("x509: certificate signed by unknown authority")}}},
		{name: "not ours", err: errors.New("decode: garbage")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster()
			c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			_, _, err := Lease(t.Context(), c, testNS, testLease, testHolder("me"), LeaseOptions{Timing: testTiming, Wait: true})
			var na *NoAnswerError
			if err == nil || errors.As(err, &na) != tt.noAnswer || !errors.Is(err, tt.err) {
				t.Fatalf("got %v; want an error wrapping %v, a *NoAnswerError: %v", err, tt.err, tt.noAnswer)
			}
			if !strings.Contains(err.Error(), "lease "+testNS+"/"+testLease) {
				t.Errorf("%q does not name the lease", err)
			}
			for _, a := range c.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("%s %s after a failed read", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// TestLeaseWaitOutlivesAPIServerRestart: once the API server has said who
// holds the lease, a waiting Lease waits on while it does not answer (its
// holder replacing it) instead of going on without the lease.
func TestLeaseWaitOutlivesAPIServerRestart(t *testing.T) {
	c := newCluster()
	var armed atomic.Bool
	var gets atomic.Int32
	restarting := make(chan struct{})
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !armed.Load() {
			return false, nil, nil
		}
		if n := gets.Add(1); n > 1 && n <= 4 {
			if n == 4 {
				close(restarting)
			}
			return true, nil, &url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: syscall.ECONNREFUSED}
		}
		return false, nil, nil
	})
	_, release := mustLease(t, c, testHolder("rigger apply on laptop (pid 7)"))
	armed.Store(true)
	type result struct {
		release func()
		err     error
	}
	got := make(chan result, 1)
	go func() {
		_, r, err := Lease(t.Context(), c, testNS, testLease, testHolder("me"), LeaseOptions{Timing: testTiming, Wait: true})
		got <- result{r, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("Lease returned (%v) while the API server did not answer", r.err)
	case <-restarting:
	}
	release()
	r := <-got
	if r.err != nil {
		t.Fatalf("Lease after the API server came back: %v", r.err)
	}
	r.release()
}

// TestLeaseAPIServerStarting: an API server that answers that it cannot
// serve yet (starting) is asked again for a renew deadline, and the lease
// is taken once it can.
func TestLeaseAPIServerStarting(t *testing.T) {
	c := newCluster()
	var gets atomic.Int32
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) <= 2 {
			return true, nil, apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
		}
		return false, nil, nil
	})
	_, release, err := Lease(t.Context(), c, testNS, testLease, testHolder("me"), LeaseOptions{Timing: testTiming})
	if err != nil {
		t.Fatalf("Lease once the API server serves: %v", err)
	}
	release()
	if n := gets.Load(); n < 3 {
		t.Errorf("%d reads, want the two refused ones and more", n)
	}
}

// TestLeaseNamespaceNotYetThere: a new cluster's first API server answers
// a moment before it has created kube-system, and a Lease cannot be made
// there meanwhile ("namespaces \"kube-system\" not found"): it is asked
// again, and the lease is taken once the namespace is there (an apply
// killed right after the first API server started was refused by the
// next, make chaos).
func TestLeaseNamespaceNotYetThere(t *testing.T) {
	c := newCluster()
	var creates atomic.Int32
	c.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if creates.Add(1) <= 2 {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, testNS)
		}
		return false, nil, nil
	})
	_, release, err := Lease(t.Context(), c, testNS, testLease, testHolder("me"), LeaseOptions{Timing: testTiming})
	if err != nil {
		t.Fatalf("Lease once the namespace is there: %v", err)
	}
	release()
	if n := creates.Load(); n < 3 {
		t.Errorf("%d creates, want the two refused ones and more", n)
	}
}
