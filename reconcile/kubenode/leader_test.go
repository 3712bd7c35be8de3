package kubenode

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/plan"
)

// fastLeaderWait makes WaitLeader poll every 10 ms and give up 100 ms
// after twice the Lease's duration, for one test.
func fastLeaderWait(t *testing.T) {
	t.Helper()
	poll, more := leaderPoll, leaderWaitMore
	leaderPoll, leaderWaitMore = 10*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { leaderPoll, leaderWaitMore = poll, more })
}

// controllerLease is ControllerLease held by holder, renewed at renewed,
// for 1 s.
func controllerLease(holder string, renewed time.Time) *coordinationv1.Lease {
	one := int32(1)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: ControllerLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &one,
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// renewAt makes the Lease read as l from its n-th read on.
func renewAt(cs *fake.Clientset, n int32, l *coordinationv1.Lease) {
	var reads atomic.Int32
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if reads.Add(1) < n {
			return false, nil, nil
		}
		return true, l.DeepCopy(), nil
	})
}

// leaseReads counts the reads of the Lease cs was asked.
func leaseReads(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
			n++
		}
	}
	return n
}

// TestWaitLeader: a controller manager leads once the Lease is renewed or
// taken by another; a Lease left by a stopped one is an error naming its
// holder once twice its duration passed; no Lease, no wait.
func TestWaitLeader(t *testing.T) {
	fastLeaderWait(t)
	t0 := time.Now().Add(-500 * time.Millisecond)
	for _, tc := range []struct {
		name      string
		lease     *coordinationv1.Lease
		then      *coordinationv1.Lease
		minWait   time.Duration
		failFirst bool
		wantErr   string
	}{
		{name: "no Lease: no leader election"},
		{name: "renewed by its holder", lease: controllerLease("n1_a", t0), then: controllerLease("n1_a", t0.Add(2*time.Second)),
			minWait: 190 * time.Millisecond},
		{name: "taken by another", lease: controllerLease("n1_a", t0), then: controllerLease("n2_b", t0),
			minWait: 190 * time.Millisecond},
		{name: "released, not yet taken", lease: controllerLease("n1_a", t0), then: controllerLease("", t0.Add(time.Second)),
			minWait: 2 * time.Second, wantErr: `no kube-controller-manager renewed the Lease kube-system/kube-controller-manager in 2s (held by "n1_a", last renewed`},
		{name: "the first read failed, then held by one that stopped", lease: controllerLease("n1_a", t0), failFirst: true,
			minWait: 2 * time.Second, wantErr: `no kube-controller-manager renewed the Lease kube-system/kube-controller-manager in 2s (held by "n1_a", last renewed`},
		{name: "held by one that stopped", lease: controllerLease("n1_a", t0),
			minWait: 2 * time.Second, wantErr: `no kube-controller-manager renewed the Lease kube-system/kube-controller-manager in 2s (held by "n1_a", last renewed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tc.lease != nil {
				cs = fake.NewClientset(tc.lease)
			}
			if tc.then != nil {
				renewAt(cs, 21, tc.then)
			}
			if tc.failFirst {
				var reads atomic.Int32
				cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					if reads.Add(1) == 1 {
						return true, &coordinationv1.Lease{}, errors.New("the API server did not answer")
					}
					return false, nil, nil
				})
			}
			began := time.Now()
			waited, err := WaitLeader(context.Background(), cs)
			took := time.Since(began)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if nl := (*NoLeaderError)(nil); tc.wantErr != "" && (!errors.As(err, &nl) || !strings.Contains(err.Error(), "docker logs kube-controller-manager")) {
				t.Errorf("err %v: want a *NoLeaderError that says where to look", err)
			}
			if took < tc.minWait || waited > took || tc.minWait == 0 && waited != 0 {
				t.Errorf("returned after %s (waited %s), want at least %s", took, waited, tc.minWait)
			}
		})
	}
}

// TestHooksDrainWaitsForControllerLeader: once a node's controller manager
// was replaced, the next drain waits until one leads again (a stopped one
// does not hand its Lease over); one that never does stops the node's
// changes, its Node uncordoned; and without that replacement, or with
// leader election off, a drain does not look at the Lease.
func TestHooksDrainWaitsForControllerLeader(t *testing.T) {
	fastLeaderWait(t)
	ctx := context.Background()
	kcm := []plan.Step{{Node: "10.0.0.1", Component: desired.KubeControllerManager, Action: plan.Replace, Phase: plan.PhaseControlPlane}}
	kubelet := []plan.Step{{Node: "10.0.0.2", Component: desired.Kubelet, Action: plan.Replace, Phase: plan.PhaseWorker}}
	stale := time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name    string
		before  []plan.Step
		leader  bool
		renew   bool
		wantErr string
		wantSay string
	}{
		{name: "a new leader", before: kcm, leader: true, renew: true, wantSay: "a kube-controller-manager leads again (waited"},
		{name: "none", before: kcm, leader: true, wantErr: "no kube-controller-manager renewed the Lease"},
		{name: "no controller manager stopped", leader: true},
		{name: "leader election off", before: kcm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n1, n2 := node("n1", "10.0.0.1", "True", 0), node("n2", "10.0.0.2", "True", 0)
			cs := fake.NewClientset(&n1, &n2, controllerLease("n1_a", stale))
			var said []string
			h := NewHooks(Config{Client: cs, Machines: machines(), Drain: true, ControllerLeader: tc.leader,
				Say: func(node, msg string) { said = append(said, msg) }}, &plan.Plan{Steps: slices.Concat(tc.before, kubelet)})
			if tc.before != nil {
				if err := h.BeforeNode(ctx, "10.0.0.1", tc.before); err != nil {
					t.Fatal(err)
				}
				if err := h.AfterNode(ctx, "10.0.0.1", tc.before); err != nil {
					t.Fatal(err)
				}
			}
			if tc.renew {
				renewAt(cs, 5, controllerLease("n2_b", time.Now()))
			}
			err := h.BeforeNode(ctx, "10.0.0.2", kubelet)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			drained := slices.ContainsFunc(said, func(l string) bool { return strings.HasPrefix(l, "drained Node n2") })
			if drained != (tc.wantErr == "") {
				t.Errorf("drained %v, want %v: %q", drained, tc.wantErr == "", said)
			}
			if tc.wantSay != "" && !slices.ContainsFunc(said, func(l string) bool { return strings.Contains(l, tc.wantSay) }) {
				t.Errorf("said %q, want %q", said, tc.wantSay)
			}
			if reads, waits := leaseReads(cs), tc.renew || tc.wantErr != ""; waits != (reads >= 5) || !waits && reads != 0 {
				t.Errorf("BeforeNode read the Lease %d times: want it to wait for a leader: %v", reads, waits)
			}
			if tc.wantErr != "" {
				if n, err := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
					t.Errorf("n2 after the failed wait: %v, want it uncordoned", err)
				}
			}
		})
	}
}

func TestElectsLeader(t *testing.T) {
	for args, want := range map[string]bool{"": true, "true": true, "false": false, "0": false, "maybe": true} {
		extra := map[string]string{}
		if args != "" {
			extra["leader-elect"] = args
		}
		if got := electsLeader(extra); got != want {
			t.Errorf("leader-elect=%q: %v, want %v", args, got, want)
		}
	}
}
