package reconcile

import (
	"context"
	"errors"
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
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// sandboxYML is the example sandbox cluster on sandbox s: its first nodes
// nodes with every role, and the workers given by index.
func sandboxYML(t testing.TB, s *sandbox.Sandbox, nodes int, workers ...int) string {
	roles := map[int][]string{}
	for i := range nodes {
		roles[i] = []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
	}
	for _, w := range workers {
		roles[w] = []string{spec.RoleWorker}
	}
	return sandboxtest.ClusterYML(t, s, roles)
}

// sandboxCluster is sandboxYML loaded, then changed by each change.
func sandboxCluster(t testing.TB, s *sandbox.Sandbox, nodes int, workers []int, changes ...func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	c := loadYML(t, sandboxYML(t, s, nodes, workers...))
	c.Rigger.SSH.ConnectTimeout = spec.Duration(3 * time.Second)
	for _, change := range changes {
		change(c)
	}
	return c
}

// extraArg sets an extra_args flag of a service.
func extraArg(service func(*spec.Cluster) *map[string]string, flag, value string) func(*spec.Cluster) {
	return func(c *spec.Cluster) {
		m := service(c)
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[flag] = value
	}
}

func kubeAPIArgs(c *spec.Cluster) *map[string]string { return &c.Services.KubeAPI.ExtraArgs }
func kubeletArgs(c *spec.Cluster) *map[string]string { return &c.Services.Kubelet.ExtraArgs }

// loadYML writes yml to a file and loads it.
func loadYML(t testing.TB, yml string) *spec.Cluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, diags, err := spec.Load(path)
	if err != nil {
		t.Fatalf("%v\n%v\n%s", err, diags, yml)
	}
	return c
}

// applier runs plan and apply against the sandbox with one state directory.
type applier struct {
	t        *testing.T
	s        *sandbox.Sandbox
	stateDir string
	events   []string
}

func (a *applier) session(c *spec.Cluster) *Session {
	a.t.Helper()
	sess, err := Open(c, Options{StateDir: a.stateDir})
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { sess.Close() })
	return sess
}

func (a *applier) plan(ctx context.Context, c *spec.Cluster) *Planned {
	a.t.Helper()
	pl, err := a.session(c).Plan(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	return pl
}

// apply plans and applies c, and returns the plan it applied.
func (a *applier) apply(ctx context.Context, c *spec.Cluster) *Planned {
	a.t.Helper()
	sess := a.session(c)
	pl, err := sess.Plan(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	a.events = nil
	res, err := sess.Apply(ctx, pl, ApplyOptions{Hooks: execute.Hooks{
		Step: func(node, msg string, err error) {
			e := node + ": " + msg
			if err != nil {
				e += ": " + err.Error()
			}
			a.events = append(a.events, e)
		},
	}})
	if err != nil {
		var b strings.Builder
		pl.Plan.Render(&b)
		a.t.Fatalf("apply: %v\nplan:\n%s\nprogress:\n%s\nnot run: %d", err, b.String(), strings.Join(a.events, "\n"), len(res.NotRun))
	}
	return pl
}

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

// stepLines are a plan's steps as "node action component".
func stepLines(p *plan.Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.Node+" "+string(s.Action)+" "+s.Component)
	}
	return out
}

// TestApplySandbox is the engine end to end on three sandbox nodes with
// every role and a fourth that joins as a worker and leaves again.
func TestApplySandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 3, Nodes: 4, Images: true})
	a := &applier{t: t, s: s, stateDir: filepath.Join(t.TempDir(), "state")}
	c := sandboxCluster(t, s, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	first3 := []string{s.Nodes[0].Address, s.Nodes[1].Address, s.Nodes[2].Address}

	t.Run("each node's Docker client reaches its own engine", func(t *testing.T) { checkSSHReachesNodes(t, s, c) })

	t.Run("no new CA while a node does not answer", func(t *testing.T) {
		a.t = t
		third := s.Nodes[2]
		sandboxtest.Partition(ctx, t, s, third.Name)
		sess := a.session(c)
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var newCA *NewCAError
		if !strings.HasPrefix(pl.PKISource, "new, for this plan only") || !errors.As(pl.Blocked(), &newCA) {
			t.Fatalf("PKI %q, blocked %v", pl.PKISource, pl.Blocked())
		}
		if _, err := sess.Apply(ctx, pl, ApplyOptions{}); !errors.As(err, &newCA) {
			t.Fatalf("apply with a node down and no PKI: %v", err)
		}
		if _, err := os.Stat(filepath.Join(a.stateDir, "kube-ca.pem")); err == nil {
			t.Error("a CA was saved")
		}
	})

	t.Run("fresh apply converges", func(t *testing.T) {
		a.t = t
		pl := a.apply(ctx, c)
		if pl.Plan.Count(plan.Create) != 18 || !strings.HasPrefix(pl.PKISource, "new") {
			t.Errorf("fresh plan: %d creates, PKI %q", pl.Plan.Count(plan.Create), pl.PKISource)
		}
		checkHealthy(ctx, t, a, c, first3)
		checkNodes(ctx, t, a, c, s.Nodes[:3])
		st, _, err := a.session(c).Status(ctx)
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
		a.t = t
		before := containerIDs(ctx, t, s)
		pl := a.plan(ctx, c)
		if !pl.Plan.Empty() || len(pl.PKIChanges) > 0 {
			t.Fatalf("plan after apply: %v, certificates %v", stepLines(pl.Plan), pl.PKIChanges)
		}
		a.apply(ctx, c)
		if after := containerIDs(ctx, t, s); !mapsEqual(before, after) {
			t.Errorf("containers changed: %v → %v", before, after)
		}
	})

	t.Run("kube-api extra_args replaces the API servers one at a time", func(t *testing.T) {
		a.t = t
		before := containerIDs(ctx, t, s)
		changed := sandboxCluster(t, s, 3, nil, extraArg(kubeAPIArgs, "v", "3"))
		pl := a.apply(ctx, changed)
		want := []string{}
		for _, n := range first3 {
			want = append(want, n+" replace kube-apiserver")
		}
		if got := stepLines(pl.Plan); !slices.Equal(got, want) {
			t.Fatalf("steps %v, want %v", got, want)
		}
		// Node i+1's API server is replaced after node i's is healthy.
		for i := 1; i < 3; i++ {
			healthy := slices.IndexFunc(a.events, func(e string) bool {
				return strings.HasPrefix(e, first3[i-1]+": kube-apiserver healthy")
			})
			next := slices.IndexFunc(a.events, func(e string) bool { return strings.HasPrefix(e, first3[i]+": replaced kube-apiserver") })
			if healthy < 0 || next < healthy {
				t.Errorf("%s replaced before %s was healthy:\n%s", first3[i], first3[i-1], strings.Join(a.events, "\n"))
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
		a.t = t
		n2 := s.Nodes[1]
		if err := sandboxtest.DockerClient(t, n2).ContainerRemove(ctx, desired.KubeScheduler, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		before := containerIDs(ctx, t, s)
		pl := a.apply(ctx, c)
		if got := stepLines(pl.Plan); !slices.Equal(got, []string{n2.Address + " create kube-scheduler"}) {
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
		a.t = t
		n4 := s.Nodes[3]
		withWorker := sandboxCluster(t, s, 3, []int{3}, extraArg(kubeAPIArgs, "v", "3"))
		before := containerIDs(ctx, t, s)
		pl := a.apply(ctx, withWorker)
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
		pl = a.apply(ctx, c)
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
		a.t = t
		third := s.Nodes[2]
		heal := sandboxtest.Partition(ctx, t, s, third.Name)
		// A change for every node. With the default budget
		// (max_unavailable_worker 10% of 3: 1), the node down uses it up:
		// nothing changes and apply says why.
		changed := sandboxCluster(t, s, 3, nil, extraArg(kubeAPIArgs, "v", "3"), extraArg(kubeletArgs, "v", "3"))
		before := containerIDs(ctx, t, s)
		sess := a.session(changed)
		blocked, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sess.Apply(ctx, blocked, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "max_unavailable_worker allows 1 of the 3 worker nodes") {
			t.Fatalf("apply with the budget used up: %v", err)
		}
		if after := containerIDs(ctx, t, s); !mapsEqual(before, after) {
			t.Errorf("containers changed although the budget was used up")
		}
		// With room for two, the reachable ones converge.
		changed.UpgradeStrategy.MaxUnavailableWorker = "2"
		pl := a.apply(ctx, changed)
		if len(pl.Plan.Unreachable) != 1 || pl.Plan.Unreachable[0].Node != third.Address || pl.Plan.Count(plan.Remove) != 0 {
			t.Fatalf("unreachable %+v, %d removals", pl.Plan.Unreachable, pl.Plan.Count(plan.Remove))
		}
		if got := stepLines(pl.Plan); !slices.Equal(got, []string{first3[0] + " replace kubelet", first3[1] + " replace kubelet"}) {
			t.Errorf("steps %v", got)
		}
		heal()
		pl = a.apply(ctx, changed)
		if got := stepLines(pl.Plan); !slices.Equal(got, []string{third.Address + " replace kubelet"}) {
			t.Errorf("after healing: steps %v", got)
		}
		c = changed
	})

	t.Run("a lost state directory is recovered from the nodes", func(t *testing.T) {
		a.t = t
		if err := os.RemoveAll(a.stateDir); err != nil {
			t.Fatal(err)
		}
		pl := a.plan(ctx, c)
		if !strings.HasPrefix(pl.PKISource, "recovered from node") || !pl.Plan.Empty() || len(pl.PKIChanges) > 0 {
			t.Fatalf("PKI %q, steps %v, certificates %v; want recovered and nothing to do", pl.PKISource, stepLines(pl.Plan), pl.PKIChanges)
		}
		a.apply(ctx, c)
		if _, err := os.Stat(filepath.Join(a.stateDir, "kube-ca-key.pem")); err != nil {
			t.Errorf("the recovered PKI was not saved: %v", err)
		}
		checkHealthy(ctx, t, a, c, first3)
		checkNodes(ctx, t, a, c, s.Nodes[:3])
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkHealthy probes etcd on every node and the API server.
func checkHealthy(ctx context.Context, t *testing.T, a *applier, c *spec.Cluster, nodes []string) {
	t.Helper()
	pl := a.plan(ctx, c)
	sess := a.session(c)
	chk, err := sess.checker(pl.PKI)
	if err != nil {
		t.Fatal(err)
	}
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
func checkNodes(ctx context.Context, t *testing.T, a *applier, c *spec.Cluster, want []sandbox.Node) {
	t.Helper()
	kc, err := a.session(c).Kubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := map[string]bool{}
		if err == nil {
			for _, n := range nodes.Items {
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready[n.Name] = true
					}
				}
			}
		}
		missing := []string{}
		for _, n := range want {
			if !ready[n.Hostname] {
				missing = append(missing, n.Hostname)
			}
		}
		if err == nil && len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Nodes not Ready: %v (ready: %v), err %v", missing, ready, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// TestEtcdMembershipSandbox grows a 3-member etcd cluster to 5 and back,
// one member at a time, and refuses to add a member while one is down.
func TestEtcdMembershipSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 3, Nodes: 5, Images: true})
	a := &applier{t: t, s: s, stateDir: filepath.Join(t.TempDir(), "state")}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	roles := func(etcdOnly ...int) *spec.Cluster {
		r := map[int][]string{}
		for i := range 3 {
			r[i] = []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
		}
		for _, i := range etcdOnly {
			r[i] = []string{spec.RoleEtcd}
		}
		c := loadYML(t, sandboxtest.ClusterYML(t, s, r))
		c.Rigger.SSH.ConnectTimeout = spec.Duration(3 * time.Second)
		return c
	}
	three, five := roles(), roles(3, 4)
	a.apply(ctx, three)

	// Data written before must survive every step: a ConfigMap lives in etcd.
	sess := a.session(three)
	pl := a.plan(ctx, three)
	cs, err := sess.KubeClient(pl.PKI, pl.Observed)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-membership", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkData := func(t *testing.T) {
		t.Helper()
		var err error
		// An API server whose etcd client lost a member (a partition) may
		// fail a call or two until the client moves on.
		for range 10 {
			var got *corev1.ConfigMap
			if got, err = cs.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{}); err == nil {
				if got.Data["k"] != "v" {
					t.Errorf("the data written before: %v", got.Data)
				}
				return
			}
			time.Sleep(3 * time.Second)
		}
		t.Errorf("the data written before: %v", err)
	}
	members := func(t *testing.T, c *spec.Cluster) []string {
		t.Helper()
		pl := a.plan(ctx, c)
		if pl.Observed.Etcd == nil {
			t.Fatal("no etcd membership observed")
		}
		var names []string
		for _, m := range pl.Observed.Etcd.Members {
			if !m.Healthy || m.IsLearner {
				t.Errorf("member %s: healthy %v learner %v %s", m, m.Healthy, m.IsLearner, m.Error)
			}
			names = append(names, m.Name)
		}
		slices.Sort(names)
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
		a.t = t
		before := etcdIDs()
		pl := a.apply(ctx, five)
		if got := pl.Plan.Count(plan.AddMember); got != 2 {
			t.Errorf("%d members added, want 2: %v", got, stepLines(pl.Plan))
		}
		if got := members(t, five); len(got) != 5 {
			t.Errorf("members %v, want 5", got)
		}
		list, err := a.session(five).ListSnapshots(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(list.Snapshots, func(i SnapshotInfo) bool {
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
		a.t = t
		before := etcdIDs()
		sess := a.session(three)
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sess.Apply(ctx, pl, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "--allow-removals") {
			t.Fatalf("removing 2 of 5 nodes without --allow-removals: %v", err)
		}
		pl, err = sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := pl.Plan.Count(plan.RemoveMember); got != 2 {
			t.Errorf("%d members to remove, want 2: %v", got, stepLines(pl.Plan))
		}
		if _, err := sess.Apply(ctx, pl, ApplyOptions{AllowRemovals: true}); err != nil {
			t.Fatal(err)
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
		a.t = t
		third := s.Nodes[2]
		sandboxtest.Partition(ctx, t, s, third.Name)
		four := roles(3)
		sess := a.session(four)
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sess.Apply(ctx, pl, ApplyOptions{})
		var refused *etcdmember.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "not every member is healthy") || !strings.Contains(err.Error(), third.Hostname) {
			t.Fatalf("adding a member with %s down: %v", third.Name, err)
		}
		checkData(t)
	})
}
