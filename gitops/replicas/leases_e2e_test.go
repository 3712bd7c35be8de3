package replicas

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/lock"
)

// TestLeasesOfRemovedClusters (RIGGER_E2E=1: a real API server) gives a
// replica the paths of the cluster.yml files at its head and checks what
// Leases deletes and keeps:
//   - a given-up Lease of a path gone from that head: deleted at once;
//   - one whose holder stopped renewing it: deleted once it stayed
//     unchanged for a lease duration, not before;
//   - the Lease of a path still at that head: kept, given up or stale,
//     and its holder reported;
//   - one held and renewed by a replica that read an older head, where the
//     cluster.yml still is: kept, for longer than a lease duration, and
//     that replica never stops leading; deleted once it gives it up;
//   - another group's Lease: left alone.
func TestLeasesOfRemovedClusters(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	client, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns, group = "rigger-system", "rigger-serve"
	ctx := t.Context()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases(ns)
	timing := lock.LeaseTiming{Duration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	put := func(g, path, holder string) {
		t.Helper()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ClusterLease(g, path), Labels: map[string]string{LabelCluster: g},
			Annotations: map[string]string{AnnotationPath: path}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder,
			RenewTime: &metav1.MicroTime{Time: time.Now().Add(-time.Minute)}}}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(g, path string) bool {
		t.Helper()
		_, err := leases.Get(ctx, ClusterLease(g, path), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	const (
		keepFree, keepDead = "clusters/keep-free/cluster.yml", "clusters/keep-dead/cluster.yml"
		goneFree, goneDead = "clusters/gone-free/cluster.yml", "clusters/gone-dead/cluster.yml"
		old                = "clusters/old/cluster.yml" // at the older head of serve-b only
	)
	put(group, keepFree, "")
	put(group, keepDead, "serve-dead")
	put(group, goneFree, "")
	put(group, goneDead, "serve-dead")
	put("another-group", goneFree, "")

	// serve-b read an older head: it holds old's Lease, renewing it.
	b, err := New(Config{Client: client, Namespace: ns, Group: group, ID: "serve-b", Timing: timing})
	if err != nil {
		t.Fatal(err)
	}
	bctx, stopB := context.WithCancel(ctx)
	var leading, lost atomic.Bool
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		_ = b.Hold(bctx, old, func(ctx context.Context, _ <-chan struct{}) {
			leading.Store(true)
			<-ctx.Done()
			if bctx.Err() == nil {
				lost.Store(true) // the Lease was lost, not given up
			}
		})
	}()
	testwait.For(t, 30*time.Second, "serve-b holding "+old, leading.Load)

	clk := &clock{now: time.Now()}
	a, err := New(Config{Client: client, Namespace: ns, Group: group, ID: "serve-a", Log: slog.New(slog.DiscardHandler),
		Timing: lock.LeaseTiming{Duration: timing.Duration, RenewDeadline: timing.RenewDeadline, RetryPeriod: timing.RetryPeriod, Now: clk.Now}})
	if err != nil {
		t.Fatal(err)
	}
	head := []string{keepFree, keepDead, "clusters/new/cluster.yml"}
	holders, err := a.Leases(ctx, head)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{keepFree: "", keepDead: "serve-dead"}; fmt.Sprint(holders) != fmt.Sprint(want) {
		t.Errorf("holders %v, want %v", holders, want)
	}
	want := func(when string, w map[string]bool) {
		t.Helper()
		for p, keep := range w {
			if got := exists(group, p); got != keep {
				t.Errorf("%s: the Lease of %s exists: %v, want %v", when, p, got, keep)
			}
		}
		if !exists("another-group", goneFree) {
			t.Errorf("%s: another group's Lease was deleted", when)
		}
	}
	want("first look", map[string]bool{keepFree: true, keepDead: true, goneFree: false, goneDead: true, old: true})

	// Just short of a lease duration: the stale one is kept.
	clk.add(timing.Duration - time.Second)
	rv := func() string {
		l, err := leases.Get(ctx, ClusterLease(group, old), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.ResourceVersion
	}
	if _, err := a.Leases(ctx, head); err != nil {
		t.Fatal(err)
	}
	want("a second short of a lease duration", map[string]bool{keepDead: true, goneDead: true, old: true})

	// A lease duration later, by serve-a's clock; serve-b renewed old's
	// Lease meanwhile (a real retry period passed).
	seen := rv()
	testwait.For(t, 10*time.Second, "serve-b renewing "+old, func() bool { return rv() != seen })
	clk.add(time.Second)
	if _, err := a.Leases(ctx, head); err != nil {
		t.Fatal(err)
	}
	want("a lease duration later", map[string]bool{keepFree: true, keepDead: true, goneDead: false, old: true})
	if lost.Load() || !leading.Load() {
		t.Error("serve-b lost the Lease of " + old + ", which it held and renewed")
	}

	// serve-b reads the new head: it stops campaigning, gives the Lease up.
	stopB()
	<-bDone
	if _, err := a.Leases(ctx, head); err != nil {
		t.Fatal(err)
	}
	want("serve-b gave its Lease up", map[string]bool{old: false, keepFree: true, keepDead: true})
}
