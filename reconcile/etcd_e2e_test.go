package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// testEtcdMembership grows the 3-member etcd cluster to 5 and back, one
// member at a time (the worker the engine phase removed comes back as an
// etcd node), and refuses to add a member while one is down.
func testEtcdMembership(ctx context.Context, t *testing.T, f *clusterFixture) {
	f.converge(ctx, t)
	s, a := f.s, f.a
	withEtcd := func(etcdOnly ...int) *spec.Cluster {
		r := rt.Roles(3)
		for _, i := range etcdOnly {
			r[i] = []string{spec.RoleEtcd}
		}
		return f.cluster(t, r)
	}
	three, five := withEtcd(), withEtcd(3, 4)

	// Data written before must survive every step: a ConfigMap lives in etcd.
	cs := a.Client(ctx, t, three)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-membership", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkData := func(t *testing.T) {
		t.Helper()
		checkConfigMap(ctx, t, cs, cm)
	}
	// members are the names of the members once all are healthy voters:
	// a member's status may take long to come on a loaded machine.
	members := func(t *testing.T, c *spec.Cluster) []string {
		t.Helper()
		var names []string
		rt.Eventually(ctx, t, memberHealthTimeout, "every etcd member healthy and voting", func(ctx context.Context) (bool, error) {
			sess, err := reconcile.Open(c, reconcile.Options{StateDir: a.StateDir, Now: a.Now})
			if err != nil {
				return false, err
			}
			defer sess.Close()
			pl, err := sess.Plan(ctx)
			if err != nil {
				return false, err
			}
			if pl.Observed.Etcd == nil {
				return false, fmt.Errorf("no etcd membership observed: %w", pl.Observed.EtcdErr)
			}
			names = nil
			var sick []string
			for _, m := range pl.Observed.Etcd.Members {
				if !m.Healthy || m.IsLearner {
					sick = append(sick, fmt.Sprintf("%s: healthy %v learner %v %s", m, m.Healthy, m.IsLearner, m.Error))
				}
				names = append(names, m.Name)
			}
			slices.Sort(names)
			if len(sick) > 0 {
				return false, errors.New(strings.Join(sick, "; "))
			}
			return true, nil
		})
		return names
	}
	etcdIDs := func() map[string]string {
		ids := map[string]string{}
		for k, id := range containerIDs(ctx, t, s) {
			if strings.HasSuffix(k, "/"+desired.Etcd) {
				ids[k] = id
			}
		}
		return ids
	}

	t.Run("grow to five, one member at a time", func(t *testing.T) {
		before := etcdIDs()
		pl, _, err := a.TryApply(ctx, t, five)
		if nr := (*kubenode.NotReadyError)(nil); errors.As(err, &nr) {
			// Under make test's load a joining node's Node has twice
			// stayed NotReady past the Ready wait ("cni config
			// uninitialized"); the apply then says that the next apply
			// checks it again, and so does this test, once. The error
			// names the pods on the Node that were not ready.
			t.Logf("apply: %v\nthe next apply checks the Node again", err)
			a.Apply(ctx, t, five)
		} else if err != nil {
			t.Fatalf("apply: %v", err)
		}
		if got := pl.Plan.Count(plan.AddMember); got != 2 {
			t.Errorf("%d members added, want 2: %v", got, rt.StepLines(pl.Plan))
		}
		if got := members(t, five); len(got) != 5 {
			t.Errorf("members %v, want 5", got)
		}
		list, err := etcdsnap.List(ctx, a.Etcd(ctx, t, five), false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(list.Snapshots, func(i etcdsnap.Info) bool {
			return i.Sidecar != nil && i.Sidecar.Kind == etcdsnap.KindBeforeChange
		}) {
			t.Errorf("no snapshot taken before the membership change: %+v", list.Snapshots)
		}
		after := etcdIDs()
		for k, id := range before {
			if after[k] != id {
				t.Errorf("%s was restarted", k)
			}
		}
		checkData(t)
	})

	t.Run("shrink back to three", func(t *testing.T) {
		before := etcdIDs()
		_, _, err := a.TryApply(ctx, t, three)
		var guard *plan.RemovalGuardError
		if reason, stalled := stall.Classify(err); !errors.As(err, &guard) || !strings.Contains(err.Error(), "--allow-removals") ||
			reason != stall.RemovalGuard || !stalled {
			t.Fatalf("removing 2 of 5 nodes without --allow-removals: %v", err)
		}
		a.AllowRemovals = true
		defer func() { a.AllowRemovals = false }()
		pl := a.Apply(ctx, t, three)
		if got := pl.Plan.Count(plan.RemoveMember); got != 2 {
			t.Errorf("%d members removed, want 2: %v", got, rt.StepLines(pl.Plan))
		}
		if got := members(t, three); len(got) != 3 {
			t.Errorf("members %v, want 3", got)
		}
		after := etcdIDs()
		for k, id := range before {
			if strings.HasPrefix(k, s.Nodes[3].Address+"/") || strings.HasPrefix(k, s.Nodes[4].Address+"/") {
				if _, ok := after[k]; ok {
					t.Errorf("%s left on a removed node", k)
				}
			} else if after[k] != id {
				t.Errorf("%s was restarted", k)
			}
		}
		checkData(t)
	})

	t.Run("no member is added while one is down", func(t *testing.T) {
		third := s.Nodes[2]
		heal := sandboxtest.Partition(ctx, t, s, third.Name)
		_, _, err := a.TryApply(ctx, t, withEtcd(3))
		var refused *etcdmember.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "not every member is healthy") || !strings.Contains(err.Error(), third.Hostname) {
			t.Fatalf("adding a member with %s down: %v", third.Name, err)
		}
		checkData(t)
		// The member back elects again for a while ("etcdserver: leader
		// changed"): an API server started meanwhile, as the next phase's,
		// fails its first check of the Service addresses and exits a
		// minute later.
		heal()
		etcdSettled(ctx, t, a.StateDir, f.first3())
	})
}

// etcdSettled waits until the etcd members at addresses all answer with
// one leader and term, the same for longer than an election timeout
// (RKE's 5 s).
func etcdSettled(ctx context.Context, t *testing.T, stateDir string, addresses []string) {
	t.Helper()
	set, err := pki.Load(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := set.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, addr := range addresses {
		endpoints = append(endpoints, "https://"+net.JoinHostPort(addr, health.EtcdClientPort))
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type view struct{ leader, term uint64 }
	var last view
	var since time.Time
	rt.Eventually(ctx, t, 2*time.Minute, "the etcd members agreeing on one leader for 6 s", func(ctx context.Context) (bool, error) {
		var now view
		for _, ep := range endpoints {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			st, err := cl.Status(sctx, ep)
			cancel()
			if err != nil {
				return false, fmt.Errorf("%s: %w", ep, err)
			}
			v := view{st.Leader, st.RaftTerm}
			if v.leader == 0 || now != (view{}) && v != now {
				return false, fmt.Errorf("%s: leader %x term %d, another member: leader %x term %d", ep, v.leader, v.term, now.leader, now.term)
			}
			now = v
		}
		if now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) > 6*time.Second, fmt.Errorf("leader %x term %d for %s", now.leader, now.term, time.Since(since).Round(time.Second))
	})
}
