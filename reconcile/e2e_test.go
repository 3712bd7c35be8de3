package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/sshtun"
)

// containerIDs are the IDs of the cluster's containers on every node, by
// "address/name".
func containerIDs(ctx context.Context, t *testing.T, s *sandbox.Sandbox) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, n := range s.Nodes {
		cli := sandboxtest.DockerClient(t, n)
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", desired.LabelCluster))})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			ids[n.Address+"/"+strings.TrimPrefix(c.Names[0], "/")] = c.ID
		}
	}
	return ids
}

// TestApplySandbox is the engine end to end on three sandbox nodes with
// every role and a fourth that joins as a worker and leaves again.
func TestApplySandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 17, Nodes: 4, Images: true})
	a := rt.New(t)
	c := rt.Cluster(t, s, rt.Roles(3), rt.NetworkOnly)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	first3 := []string{s.Nodes[0].Address, s.Nodes[1].Address, s.Nodes[2].Address}

	t.Run("each node's Docker client reaches its own engine", func(t *testing.T) { checkSSHReachesNodes(t, s, c) })

	t.Run("no new CA while a node does not answer", func(t *testing.T) {
		sandboxtest.Partition(ctx, t, s, s.Nodes[2].Name)
		sess := a.Session(t, c)
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var newCA *reconcile.NewCAError
		if pl.PKISource.Kind != reconcile.PKINew || !errors.As(pl.Blocked(), &newCA) {
			t.Fatalf("PKI %s, blocked %v", pl.PKISource, pl.Blocked())
		}
		_, err = a.ApplyPlanned(ctx, t, sess, pl)
		if reason, stalled := reconcile.Classify(err); !errors.As(err, &newCA) || reason != reconcile.ReasonNewCABlocked || !stalled {
			t.Fatalf("apply with a node down and no PKI: %v (%s, stalled %v)", err, reason, stalled)
		}
		if _, err := os.Stat(filepath.Join(a.StateDir, "kube-ca.pem")); err == nil {
			t.Error("a CA was saved")
		}
	})

	t.Run("fresh apply converges", func(t *testing.T) {
		pl := a.Apply(ctx, t, c)
		if pl.Plan.Count(plan.Create) != 21 || pl.PKISource.Kind != reconcile.PKINew || !pl.Plan.NewEtcd {
			t.Errorf("fresh plan: %d creates, PKI %s, new etcd %v", pl.Plan.Count(plan.Create), pl.PKISource, pl.Plan.NewEtcd)
		}
		checkHealthy(ctx, t, a, c, first3)
		checkNodes(ctx, t, a, c, s.Nodes[:3])
		st, _, err := a.Session(t, c).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range st.Nodes {
			// Read from the node: a leaf certificate issued now, for a year.
			if e := n.CertsExpire; e == nil || time.Until(*e) < 360*24*time.Hour || time.Until(*e) > 366*24*time.Hour {
				t.Errorf("%s: first certificate expires %v, want in about a year", n.Address, e)
			}
		}
		if e := st.Etcd; e == nil || len(e.Members) != 3 || e.Error != "" {
			t.Errorf("etcd status %+v, want 3 members", e)
		} else {
			for _, n := range first3 {
				if e.Health[n] != "healthy" {
					t.Errorf("etcd on %s: %s", n, e.Health[n])
				}
			}
		}
	})

	t.Run("second apply changes nothing", func(t *testing.T) {
		before := containerIDs(ctx, t, s)
		pl := a.Plan(ctx, t, c)
		if pl.Changes() {
			t.Fatalf("plan after apply: %v, certificates %v, Node changes %v", rt.StepLines(pl.Plan), pl.PKIChanges, pl.NodeChanges)
		}
		a.Apply(ctx, t, c)
		if after := containerIDs(ctx, t, s); !maps.Equal(before, after) {
			t.Errorf("containers changed: %v → %v", before, after)
		}
	})

	t.Run("ignore_docker_version: false checks each node's Docker version as RKE does", func(t *testing.T) {
		checked := rt.Cluster(t, s, rt.Roles(3), rt.NetworkOnly, func(c *spec.Cluster) { c.IgnoreDockerVersion = new(false) })
		// The sandbox's Docker 20.10 is supported for every minor version
		// rigger knows: the plan is made, and the key changes no container.
		pl := a.Plan(ctx, t, checked)
		if pl.Changes() {
			t.Fatalf("plan: %v, certificates %v, Node changes %v", rt.StepLines(pl.Plan), pl.PKIChanges, pl.NodeChanges)
		}
		// For a minor version RKE lists no Docker version for, the same
		// engines are refused, each named with the version it reported.
		checked.KubernetesVersion = "v1.33.1"
		var de *plan.DockerVersionError
		if err := plan.CheckDocker(checked, pl.Observed); !errors.As(err, &de) || len(de.Nodes) != 3 {
			t.Fatalf("Kubernetes 1.33: %v, want the 3 nodes refused", err)
		}
		for i, n := range de.Nodes {
			if v := pl.Observed.Nodes[n.Node].DockerVersion; n.Node != first3[i] || n.Version != v || !strings.HasPrefix(v, "20.10.") || n.Err != nil {
				t.Errorf("refused %+v, observed Docker %q", n, v)
			}
		}
	})

	t.Run("kube-api extra_args replaces the API servers one at a time", func(t *testing.T) {
		before := containerIDs(ctx, t, s)
		changed := rt.Cluster(t, s, rt.Roles(3), rt.NetworkOnly, rt.ExtraArg(rt.KubeAPIArgs, "v", "3"))
		pl := a.Apply(ctx, t, changed)
		want := []string{}
		for _, n := range first3 {
			want = append(want, n+" replace kube-apiserver")
		}
		if got := rt.StepLines(pl.Plan); !slices.Equal(got, want) {
			t.Fatalf("steps %v, want %v", got, want)
		}
		// Node i+1's API server is replaced after node i's is healthy.
		events := a.Events()
		for i := 1; i < 3; i++ {
			healthy := slices.IndexFunc(events, func(e string) bool {
				return strings.HasPrefix(e, first3[i-1]+": kube-apiserver healthy")
			})
			next := slices.IndexFunc(events, func(e string) bool { return strings.HasPrefix(e, first3[i]+": replaced kube-apiserver") })
			if healthy < 0 || next < healthy {
				t.Errorf("%s replaced before %s was healthy:\n%s", first3[i], first3[i-1], strings.Join(events, "\n"))
			}
		}
		after := containerIDs(ctx, t, s)
		for k, id := range before {
			if strings.HasSuffix(k, "/kube-apiserver") == (after[k] == id) {
				t.Errorf("%s: before %s after %s", k, id, after[k])
			}
		}
		c = changed
	})

	t.Run("a container removed by hand is recreated alone", func(t *testing.T) {
		n2 := s.Nodes[1]
		if err := sandboxtest.DockerClient(t, n2).ContainerRemove(ctx, desired.KubeScheduler, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		before := containerIDs(ctx, t, s)
		pl := a.Apply(ctx, t, c)
		if got := rt.StepLines(pl.Plan); !slices.Equal(got, []string{n2.Address + " create kube-scheduler"}) {
			t.Fatalf("steps %v", got)
		}
		after := containerIDs(ctx, t, s)
		for k, id := range before {
			if after[k] != id {
				t.Errorf("%s changed", k)
			}
		}
	})

	t.Run("a worker joins and leaves", func(t *testing.T) {
		n4 := s.Nodes[3]
		withWorker := rt.Cluster(t, s, rt.Roles(3, 3), rt.NetworkOnly, rt.ExtraArg(rt.KubeAPIArgs, "v", "3"))
		before := containerIDs(ctx, t, s)
		pl := a.Apply(ctx, t, withWorker)
		for _, st := range pl.Plan.Steps {
			if st.Node != n4.Address {
				t.Errorf("a step on another node than the new worker: %s %s %s", st.Node, st.Action, st.Component)
			}
		}
		checkNodes(ctx, t, a, withWorker, s.Nodes)
		after := containerIDs(ctx, t, s)
		for k, id := range before {
			if after[k] != id {
				t.Errorf("%s changed when the worker joined", k)
			}
		}

		before = after
		pl = a.Apply(ctx, t, c)
		if !slices.Equal(pl.Plan.RemovedNodes, []string{n4.Address}) {
			t.Fatalf("removed nodes %v", pl.Plan.RemovedNodes)
		}
		after = containerIDs(ctx, t, s)
		for k, id := range before {
			if strings.HasPrefix(k, n4.Address+"/") {
				if _, ok := after[k]; ok {
					t.Errorf("%s left on the removed node", k)
				}
			} else if after[k] != id {
				t.Errorf("%s changed when the worker left", k)
			}
		}
		if left, _ := os.ReadDir(filepath.Join(n4.Dir, "etc-kubernetes")); len(left) > 0 {
			t.Errorf("files left in the removed node's /etc/kubernetes: %v", left)
		}
	})

	t.Run("a partitioned node is reported, not removed", func(t *testing.T) {
		third := s.Nodes[2]
		heal := sandboxtest.Partition(ctx, t, s, third.Name)
		// A change for every node. With the default budget
		// (max_unavailable_worker 10% of 3: 1), the node down uses it up:
		// nothing changes and apply says why.
		changed := rt.Cluster(t, s, rt.Roles(3), rt.NetworkOnly, rt.ExtraArg(rt.KubeAPIArgs, "v", "3"), rt.ExtraArg(rt.KubeletArgs, "v", "3"))
		before := containerIDs(ctx, t, s)
		if _, _, err := a.TryApply(ctx, t, changed); err == nil || !strings.Contains(err.Error(), "max_unavailable_worker allows 1 of the 3 worker nodes") {
			t.Fatalf("apply with the budget used up: %v", err)
		}
		if after := containerIDs(ctx, t, s); !maps.Equal(before, after) {
			t.Errorf("containers changed although the budget was used up")
		}
		// With room for two, the reachable ones converge.
		changed.UpgradeStrategy.MaxUnavailableWorker = "2"
		pl := a.Apply(ctx, t, changed)
		if !slices.Equal(pl.Unreachable(), []string{third.Address}) || pl.Complete() || pl.Plan.Count(plan.Remove) != 0 {
			t.Fatalf("unreachable %+v, %d removals", pl.Plan.Unreachable, pl.Plan.Count(plan.Remove))
		}
		if got := rt.StepLines(pl.Plan); !slices.Equal(got, []string{first3[0] + " replace kubelet", first3[1] + " replace kubelet"}) {
			t.Errorf("steps %v", got)
		}
		heal()
		pl = a.Apply(ctx, t, changed)
		if got := rt.StepLines(pl.Plan); !slices.Equal(got, []string{third.Address + " replace kubelet"}) {
			t.Errorf("after healing: steps %v", got)
		}
		c = changed
	})

	t.Run("a lost state directory is recovered from the nodes", func(t *testing.T) {
		if err := os.RemoveAll(a.StateDir); err != nil {
			t.Fatal(err)
		}
		pl := a.Plan(ctx, t, c)
		if pl.PKISource.Kind != reconcile.PKIRecovered || !pl.Plan.Empty() || len(pl.PKIChanges) > 0 {
			t.Fatalf("PKI %s, steps %v, certificates %v; want recovered and nothing to do", pl.PKISource, rt.StepLines(pl.Plan), pl.PKIChanges)
		}
		a.Apply(ctx, t, c)
		if _, err := os.Stat(filepath.Join(a.StateDir, "kube-ca-key.pem")); err != nil {
			t.Errorf("the recovered PKI was not saved: %v", err)
		}
		checkHealthy(ctx, t, a, c, first3)
		checkNodes(ctx, t, a, c, s.Nodes[:3])
	})
}

// checkSSHReachesNodes checks that the SSH transport cluster.yml describes
// reaches each node's own Docker engine.
func checkSSHReachesNodes(t *testing.T, s *sandbox.Sandbox, c *spec.Cluster) {
	tr := transport(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range s.Nodes[:len(c.Nodes)] {
		dc, err := tr.Docker(ctx, n.Address)
		if err != nil {
			t.Fatalf("%s: %v", n.Address, err)
		}
		info, err := dc.Info(ctx)
		if err != nil {
			t.Fatalf("%s: docker info: %v", n.Address, err)
		}
		if info.Name != n.Hostname {
			t.Errorf("%s: the Docker client reached the engine of %q, want %q", n.Address, info.Name, n.Hostname)
		}
	}
}

// transport is the SSH transport of c, closed when the test ends.
func transport(t *testing.T, c *spec.Cluster) *sshtun.Transport {
	t.Helper()
	cfg, err := reconcile.SSHConfig(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sshtun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// checkHealthy probes etcd on every node and the API server.
func checkHealthy(ctx context.Context, t *testing.T, a *rt.Applier, c *spec.Cluster, nodes []string) {
	t.Helper()
	tlsConfig, err := a.Plan(ctx, t, c).PKI.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	chk := &health.Checker{Dial: transport(t, c).Dial, TLS: tlsConfig}
	for _, n := range nodes {
		for _, comp := range []string{desired.Etcd, desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler, desired.Kubelet} {
			// The controller manager and the scheduler restart when they
			// lose their lease (after a partition, say): allow for it.
			if err := chk.Wait(ctx, health.Target{Node: n, InternalAddress: n, Component: comp}, time.Minute); err != nil {
				t.Errorf("%s %s: %v", n, comp, err)
			}
		}
	}
}

// checkNodes lists the Nodes with client-go through the admin kubeconfig
// and waits until those of the sandbox nodes want are Ready.
func checkNodes(ctx context.Context, t *testing.T, a *rt.Applier, c *spec.Cluster, want []sandbox.Node) {
	t.Helper()
	cs := a.Client(ctx, t, c)
	rt.Eventually(ctx, t, 3*time.Minute, "every Node Ready", func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready[n.Name] = true
				}
			}
		}
		var missing []string
		for _, n := range want {
			if !ready[n.Hostname] {
				missing = append(missing, n.Hostname)
			}
		}
		if len(missing) > 0 {
			return false, errors.New("not Ready: " + strings.Join(missing, ", "))
		}
		return true, nil
	})
}

// TestEtcdMembershipSandbox grows a 3-member etcd cluster to 5 and back,
// one member at a time, and refuses to add a member while one is down.
func TestEtcdMembershipSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 16, Nodes: 5, Images: true})
	a := rt.New(t)
	ctx, cancel := untilTestDeadline(t)
	defer cancel()
	withEtcd := func(etcdOnly ...int) *spec.Cluster {
		r := rt.Roles(3)
		for _, i := range etcdOnly {
			r[i] = []string{spec.RoleEtcd}
		}
		return rt.Cluster(t, s, r, rt.NetworkOnly)
	}
	three, five := withEtcd(), withEtcd(3, 4)
	a.Apply(ctx, t, three)

	// Data written before must survive every step: a ConfigMap lives in etcd.
	pl := a.Plan(ctx, t, three)
	cs, err := a.Session(t, three).KubeClient(pl.PKI, pl.Observed)
	if err != nil {
		t.Fatal(err)
	}
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
		pl := a.Apply(ctx, t, five)
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
		var guard *reconcile.RemovalGuardError
		if reason, stalled := reconcile.Classify(err); !errors.As(err, &guard) || !strings.Contains(err.Error(), "--allow-removals") ||
			reason != reconcile.ReasonRemovalGuard || !stalled {
			t.Fatalf("removing 2 of 5 nodes without --allow-removals: %v", err)
		}
		a.Options.AllowRemovals = true
		defer func() { a.Options.AllowRemovals = false }()
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
		sandboxtest.Partition(ctx, t, s, third.Name)
		_, _, err := a.TryApply(ctx, t, withEtcd(3))
		var refused *etcdmember.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "not every member is healthy") || !strings.Contains(err.Error(), third.Hostname) {
			t.Fatalf("adding a member with %s down: %v", third.Name, err)
		}
		checkData(t)
	})
}

// memberHealthTimeout bounds the wait for every etcd member to answer its
// status as a healthy voter after an apply.
const memberHealthTimeout = 3 * time.Minute

// sandboxTeardown is the time a sandbox test leaves, before the test
// binary's deadline, for its cleanup (nodes stopped, namespaces removed).
const sandboxTeardown = 2 * time.Minute

// untilTestDeadline is the context of a sandbox test: it ends before the
// test binary's -timeout does, with sandboxTeardown to spare, rather than
// after a fixed budget, so that a slow machine makes the test slower, not
// failed.
func untilTestDeadline(t *testing.T) (context.Context, context.CancelFunc) {
	if dl, ok := t.Deadline(); ok {
		return context.WithDeadline(t.Context(), dl.Add(-sandboxTeardown))
	}
	return context.WithCancel(t.Context())
}

// checkConfigMap checks that cm is still there as written. An API server
// whose etcd client lost a member (a partition) may fail a call or two
// until the client moves on: it is asked until a deadline.
func checkConfigMap(ctx context.Context, t *testing.T, cs kubernetes.Interface, cm *corev1.ConfigMap) {
	t.Helper()
	rt.Eventually(ctx, t, time.Minute, "the data written before", func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !maps.Equal(got.Data, cm.Data) {
			t.Errorf("the data written before: %v, want %v", got.Data, cm.Data)
		}
		return true, nil
	})
}
