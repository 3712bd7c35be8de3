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
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/reach"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/sysaddons"
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

// TestClusterSandbox is one cluster's life on five sandbox nodes that have
// nothing but sshd, Docker and empty CNI directories. A converge from
// scratch is the dearest thing a test does on two cores, so there is one,
// and the phases build on the cluster it made, in this order:
//
//   - from scratch: no CA is made while a node does not answer; the
//     example cluster (the kubelet through cri-dockerd, flannel, CoreDNS,
//     metrics-server) converges on three nodes with every role; a second
//     apply changes nothing;
//   - add-ons (testAddons): pods reach each other across nodes, metrics,
//     the user's add-ons, a broken add-on;
//   - engine (testEngine): rolling changes, repairs, a crash loop, a
//     worker that joins and leaves, a partition, a lost state directory;
//   - etcd membership (testEtcdMembership): three members to five and
//     back, and none added while one is down;
//   - external etcd (testExternalEtcd): a second cluster on the fifth
//     node whose API server uses the first cluster's etcd.
//
// A phase run alone (-run 'TestClusterSandbox/engine') converges the
// cluster first.
func TestClusterSandbox(t *testing.T) {
	f := &clusterFixture{s: sandboxtest.Start(t, sandbox.Options{Subnet: 17, Nodes: 5, Images: true}), a: rt.New(t)}
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	// RKE's default addon_job_timeout (45 s), measured from the last
	// progress of what is waited for (docs/addons.md, Readiness).
	f.c = f.cluster(t, rt.Roles(3))
	if !t.Run("from scratch", func(t *testing.T) { testFromScratch(ctx, t, f) }) {
		return
	}
	t.Run("doctor", func(t *testing.T) { testDoctor(ctx, t, f) })
	t.Run("add-ons", func(t *testing.T) { testAddons(ctx, t, f) })
	t.Run("engine", func(t *testing.T) { testEngine(ctx, t, f) })
	t.Run("etcd membership", func(t *testing.T) { testEtcdMembership(ctx, t, f) })
	t.Run("external etcd", func(t *testing.T) { testExternalEtcd(ctx, t, f) })
}

// clusterFixture is the cluster of TestClusterSandbox.
type clusterFixture struct {
	s *sandbox.Sandbox
	a *rt.Applier
	// c is the cluster as the last phase left it, and changes what it
	// changed of the example cluster, for the next phases' clusters.
	c       *spec.Cluster
	changes []func(*spec.Cluster)
	// converged says that c was applied.
	converged bool
}

// cluster is the example cluster on the sandbox nodes roles names, with
// the phases' changes so far and then changes.
func (f *clusterFixture) cluster(t *testing.T, roles map[int][]string, changes ...func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	return rt.Cluster(t, f.s, roles, append(slices.Clone(f.changes), changes...)...)
}

// converge applies the cluster if no phase did yet (a phase run alone).
func (f *clusterFixture) converge(ctx context.Context, t *testing.T) {
	t.Helper()
	if !f.converged {
		f.a.Apply(ctx, t, f.c)
		f.converged = true
	}
}

// first3 are the addresses of the nodes with every role.
func (f *clusterFixture) first3() []string {
	return []string{f.s.Nodes[0].Address, f.s.Nodes[1].Address, f.s.Nodes[2].Address}
}

// testFromScratch converges the cluster on the bare nodes (no CA is made
// while one does not answer: it may hold the cluster's) and applies it again.
func testFromScratch(ctx context.Context, t *testing.T, f *clusterFixture) {
	s, a, c := f.s, f.a, f.c
	t.Run("each node's Docker client reaches its own engine", func(t *testing.T) { checkSSHReachesNodes(t, s, c) })

	t.Run("no new CA while a node does not answer", func(t *testing.T) {
		sandboxtest.Partition(ctx, t, s, s.Nodes[2].Name)
		sess := a.Session(t, c)
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var newCA *pkisource.NewCAError
		if pl.PKISource.Kind != pkisource.New || !errors.As(pl.Blocked(), &newCA) {
			t.Fatalf("PKI %s, blocked %v", pl.PKISource, pl.Blocked())
		}
		_, err = a.ApplyPlanned(ctx, t, sess, pl)
		if reason, stalled := stall.Classify(err); !errors.As(err, &newCA) || reason != stall.NewCABlocked || !stalled {
			t.Fatalf("apply with a node down and no PKI: %v (%s, stalled %v)", err, reason, stalled)
		}
		if _, err := os.Stat(filepath.Join(a.StateDir, "kube-ca.pem")); err == nil {
			t.Error("a CA was saved")
		}
	})

	ok := t.Run("converges with cri-dockerd, flannel, CoreDNS and metrics-server", func(t *testing.T) {
		if !*c.EnableCRIDockerd || c.Network.Plugin != "flannel" {
			t.Fatalf("the example cluster runs cri-dockerd %v, network %s: want RKE's defaults", *c.EnableCRIDockerd, c.Network.Plugin)
		}
		// Fault injection: on the second node, kube-proxy is created only
		// once flannel there holds the node's subnet lease, so flannel
		// always starts before kube-proxy has programmed the `kubernetes`
		// Service there (docs/addons.md, The network plugin's path to the
		// API server). The converge must succeed the first time all the same.
		held := make(chan struct{})
		a.Open = rt.HoldKubeProxy(t, s.Nodes[1].Address, s.Nodes[1].Hostname, held)
		pl := a.Apply(ctx, t, c)
		a.Open = nil
		f.converged = true
		select {
		case <-held:
		default:
			t.Errorf("kube-proxy on %s was never held back: the fault was not injected", s.Nodes[1].Hostname)
		}
		if pl.Plan.Count(plan.Create) != 21 || pl.PKISource.Kind != pkisource.New || !pl.Plan.NewEtcd {
			t.Errorf("fresh plan: %d creates, PKI %s, new etcd %v", pl.Plan.Count(plan.Create), pl.PKISource, pl.Plan.NewEtcd)
		}
		if pl.Addons != nil {
			t.Errorf("a fresh cluster's add-ons were planned (%v): the API server did not run yet", pl.Addons)
		}
		events := strings.Join(a.Events(), "\n")
		for _, want := range []string{"addon " + sysaddons.NetworkPlugin + ": ", "addon " + sysaddons.CoreDNS + ": ", "addon " + sysaddons.MetricsServer + ": "} {
			if !strings.Contains(events, want) {
				t.Errorf("no progress line of %q:\n%s", want, events)
			}
		}
		checkHealthy(ctx, t, a, c, f.first3())
		checkNodes(ctx, t, a, c, s.Nodes[:3])
		cs := a.Client(ctx, t, c)
		for _, n := range s.Nodes[:3] {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Hostname, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "docker://") {
				t.Errorf("%s runs pods with %s, want docker:// (cri-dockerd)", n.Hostname, rt)
			}
		}
		st := a.Plan(ctx, t, c).Status()
		for _, n := range st.Nodes {
			// Read from the node: a leaf certificate issued now, for a year.
			if e := n.CertsExpire; e == nil || time.Until(*e) < 360*24*time.Hour || time.Until(*e) > 366*24*time.Hour {
				t.Errorf("%s: first certificate expires %v, want in about a year", n.Address, e)
			}
		}
		if e := st.Etcd; e == nil || len(e.Members) != 3 || e.Error != "" {
			t.Errorf("etcd status %+v, want 3 members", e)
		} else {
			for _, n := range f.first3() {
				if e.Health[n] != "healthy" {
					t.Errorf("etcd on %s: %s", n, e.Health[n])
				}
			}
		}
		for _, name := range []string{sysaddons.NetworkPlugin, sysaddons.CoreDNS, sysaddons.MetricsServer} {
			i := slices.IndexFunc(st.Addons, func(as report.AddonStatus) bool { return as.Name == name })
			if i < 0 || !st.Addons[i].Ready || st.Addons[i].Pending != 0 {
				t.Errorf("status of %s: %+v (all: %+v)", name, st.Addons, st.Addons)
			}
		}
	})
	if !ok {
		t.FailNow()
	}

	t.Run("second apply changes nothing", func(t *testing.T) {
		before := containerIDs(ctx, t, s)
		pl := a.Plan(ctx, t, c)
		if pl.Changes() {
			t.Fatalf("plan after apply: %v, certificates %v, Node changes %v, add-ons %+v", rt.StepLines(pl.Plan), pl.PKIChanges, pl.NodeChanges, pl.Addons)
		}
		a.Apply(ctx, t, c)
		if after := containerIDs(ctx, t, s); !maps.Equal(before, after) {
			t.Errorf("containers changed: %v → %v", before, after)
		}
	})
}

// testEngine checks the nodes' Docker version as RKE does, then changes
// the running cluster: one flag, a container removed by hand, a component
// made to crash-loop, a worker that joins and leaves, a partitioned node, a
// lost state directory.
func testEngine(ctx context.Context, t *testing.T, f *clusterFixture) {
	f.converge(ctx, t)
	s, a, c, first3 := f.s, f.a, f.c, f.first3()
	defer func() { f.c = c }()

	t.Run("each node's Docker version is checked as rke up checks it", func(t *testing.T) {
		checked := f.cluster(t, rt.Roles(3), func(c *spec.Cluster) { c.IgnoreDockerVersion = new(true) })
		// The sandbox's Docker 20.10 is supported for every minor version
		// rigger knows: the plan is made (ignore_docker_version in the file
		// plays no part, as in rke up), and the key changes no container.
		pl := a.Plan(ctx, t, checked)
		if pl.Changes() {
			t.Fatalf("plan: %v, certificates %v, Node changes %v", rt.StepLines(pl.Plan), pl.PKIChanges, pl.NodeChanges)
		}
		// For a minor version no Docker version is listed for (past RKE's
		// table and rigger's, whose 1.33 to 1.37 keep RKE's list of 1.32),
		// the same engines are refused, each named with the version it
		// reported.
		checked.KubernetesVersion = "v1.38.1"
		var de *plan.DockerVersionError
		if err := plan.CheckDocker(checked, pl.Observed, false); !errors.As(err, &de) || len(de.Nodes) != 3 {
			t.Fatalf("Kubernetes 1.38: %v, want the 3 nodes refused", err)
		}
		for i, n := range de.Nodes {
			if v := pl.Observed.Nodes[n.Node].DockerVersion; n.Node != first3[i] || n.Version != v || !strings.HasPrefix(v, "20.10.") || n.Err != nil {
				t.Errorf("refused %+v, observed Docker %q", n, v)
			}
		}
		if err := plan.CheckDocker(checked, pl.Observed, true); err != nil {
			t.Errorf("--ignore-docker-version: %v", err)
		}
	})

	t.Run("kube-api extra_args replaces the API servers one at a time", func(t *testing.T) {
		before := containerIDs(ctx, t, s)
		apiV3 := rt.ExtraArg(rt.KubeAPIArgs, "v", "3")
		changed := f.cluster(t, rt.Roles(3), apiV3)
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
		c, f.changes = changed, append(f.changes, apiV3)
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

	t.Run("a component made to crash-loop", func(t *testing.T) {
		logRestarts(ctx, t, s)
		n2 := s.Nodes[1]
		cli := sandboxtest.DockerClient(t, n2)
		// Something that is not rigger's takes the scheduler's port on the
		// node while the scheduler is stopped: started again, it cannot
		// bind, exits, and Docker restarts it over and over. Nothing rigger
		// manages differs, and a new container does not help.
		const blocker = "rigger-e2e-port-10259"
		stopTimeout := 30
		if err := cli.ContainerStop(ctx, desired.KubeScheduler, container.StopOptions{Timeout: &stopTimeout}); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ContainerCreate(ctx, &container.Config{Image: sandbox.ToolsImage, Entrypoint: []string{"busybox", "httpd", "-f", "-p", health.SchedulerPort}},
			&container.HostConfig{NetworkMode: "host"}, nil, nil, blocker); err != nil {
			t.Fatal(err)
		}
		removeBlocker := func() {
			if err := cli.ContainerRemove(context.WithoutCancel(ctx), blocker, container.RemoveOptions{Force: true}); err != nil {
				t.Errorf("remove %s: %v", blocker, err)
			}
		}
		defer func() {
			if t.Failed() {
				removeBlocker()
			}
		}()
		for _, name := range []string{blocker, desired.KubeScheduler} {
			if err := cli.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
				t.Fatal(err)
			}
		}

		// plan and status: not in sync, and why. A plan sees the loop when
		// Docker's state is "restarting" as it looks (between two restarts
		// the container runs): planned until it does, as Docker's back-off
		// grows.
		sess := a.Session(t, c)
		var pl *decide.Planned
		rt.Eventually(ctx, t, 2*time.Minute, "a plan that replaces the crash-looping scheduler", func(ctx context.Context) (bool, error) {
			var err error
			pl, err = sess.Plan(ctx)
			return err == nil && slices.Equal(rt.StepLines(pl.Plan), []string{n2.Address + " replace kube-scheduler"}), err
		})
		reason := pl.Plan.Steps[0].Reason
		if !strings.HasPrefix(reason, "container restarting (crash loop): exited 1, restarted ") {
			t.Errorf("reason %q", reason)
		}
		st := pl.Status()
		if !hasProblem(st.Problems, n2.Address, doctor.CheckContainers, doctor.Fail) {
			t.Errorf("status problems %+v: no failed containers check of %s", st.Problems, n2.Address)
		}
		for _, ns := range st.Nodes {
			for _, cs := range ns.Containers {
				if inSync := !(ns.Address == n2.Address && cs.Name == desired.KubeScheduler); cs.InSync != inSync {
					t.Errorf("status: %s %s in sync %v, want %v", ns.Address, cs.Name, cs.InSync, inSync)
				}
			}
		}

		// doctor: n2's walk stops at its containers, with the loop's
		// last lines.
		rt.Eventually(ctx, t, time.Minute, "doctor finding the scheduler's crash loop", func(ctx context.Context) (bool, error) {
			found, err := sess.Doctor(ctx, doctor.RunOptions{Nodes: []string{n2.Address}})
			for _, fd := range found {
				if fd.Level == doctor.Fail {
					return fd.Check == doctor.CheckContainers && strings.Contains(fd.Found, "kube-scheduler restarting (a crash loop)") &&
						strings.Contains(fd.Found, "address already in use"), err
				}
			}
			return false, err
		})

		// apply: the new scheduler loops as the old one did, and apply
		// fails naming the node, the component, the exit code and its
		// last lines.
		began := time.Now()
		res, err := a.ApplyPlanned(ctx, t, sess, pl)
		if err == nil {
			t.Fatal("apply succeeded while the scheduler restart-loops")
		}
		var crash *dockerop.CrashLoopError
		if !errors.As(err, &crash) || crash.Node != n2.Address || crash.Container != desired.KubeScheduler || crash.ExitCode != 1 ||
			!strings.Contains(err.Error(), "node "+n2.Address+": kube-scheduler does not stay up: exited with code 1") ||
			!strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("apply: %v\nwant a crash loop of %s's kube-scheduler with its exit code and last lines", err, n2.Address)
		}
		if took := time.Since(began); took > time.Minute {
			t.Errorf("apply took %s to find the crash loop", took)
		}
		if failed := res.Failed(); len(failed) != 0 {
			t.Errorf("failed steps %+v: the replace itself succeeded", failed)
		}
		t.Logf("apply failed as it should, after %s: %v", time.Since(began).Round(time.Second), err)

		// The port free again: one apply converges, and nothing is left.
		removeBlocker()
		a.Apply(ctx, t, c)
		a.InSync(ctx, t, c)
	})

	t.Run("a component that stops 5 s after its start stops a rolling change before the third node; a restart after the apply is named by the next", func(t *testing.T) {
		n1, n3 := s.Nodes[0], s.Nodes[2]
		before := containerIDs(ctx, t, s)
		// Every run of n1's new kube-proxy is killed once it has run 5 s:
		// healthy and held by then, it is watched on while n2's changes.
		stop := killRuns(ctx, t, n1, desired.KubeProxy, before[n1.Address+"/"+desired.KubeProxy], false,
			func(started time.Time) bool { return time.Since(started) >= 5*time.Second })
		proxyV3 := rt.ExtraArg(rt.KubeProxyArgs, "v", "3")
		changed := f.cluster(t, rt.Roles(3), proxyV3)
		sess := a.Session(t, changed)
		pl := a.Plan(ctx, t, changed)
		began := time.Now()
		res, err := a.ApplyPlanned(ctx, t, sess, pl)
		kills := stop()
		var crash *dockerop.CrashLoopError
		if !errors.As(err, &crash) || crash.Node != n1.Address || crash.Container != desired.KubeProxy ||
			!strings.Contains(err.Error(), "node "+n1.Address+": kube-proxy does not stay up: ") ||
			!strings.Contains(err.Error(), "last lines of kube-proxy on "+n1.Address) {
			t.Fatalf("apply (%d runs killed): %v\nwant n1's kube-proxy named, with its last lines", kills, err)
		}
		if crash.ExitCode != 137 && crash.ExitCode != -1 {
			t.Errorf("exit code %d, want 137 (SIGKILL) or not seen", crash.ExitCode)
		}
		t.Logf("apply failed after %s, %d runs killed: %v", time.Since(began).Round(time.Second), kills, err)
		replaced := map[string]bool{}
		for _, o := range res.Done {
			replaced[o.Step.Node] = true
		}
		if !replaced[n1.Address] || replaced[n3.Address] {
			t.Errorf("kube-proxy replaced on %v: want n1's (and n2's, beside n1's watch), not n3's", slices.Sorted(maps.Keys(replaced)))
		}
		if after := containerIDs(ctx, t, s); after[n3.Address+"/"+desired.KubeProxy] != before[n3.Address+"/"+desired.KubeProxy] {
			t.Errorf("n3's kube-proxy was replaced")
		}

		// The killing over, an apply completes the change.
		a.Apply(ctx, t, changed)
		c, f.changes = changed, append(f.changes, proxyV3)

		// Killed once, a few seconds after the apply (the list's uptimes
		// are whole seconds), Docker starts it again: the next plan names
		// it, and the apply after it (nothing to change) does not any more.
		ids := containerIDs(ctx, t, s)
		applied := time.Now()
		stop = killRuns(ctx, t, n1, desired.KubeProxy, "", true, func(time.Time) bool { return time.Since(applied) >= 3*time.Second })
		var once *decide.Planned
		rt.Eventually(ctx, t, time.Minute, "a plan that names n1's kube-proxy started again", func(ctx context.Context) (bool, error) {
			once = a.Plan(ctx, t, c)
			return len(once.Plan.Restarted) > 0, nil
		})
		stop()
		if got := once.Plan.Restarted; len(got) != 1 || got[0].Node != n1.Address || got[0].Component != desired.KubeProxy || got[0].Restarts < 1 {
			t.Errorf("restarted %+v, want n1's kube-proxy, restarted by Docker", got)
		}
		if once.Changes() {
			t.Errorf("plan: %v: a restart is a notice, not a change", rt.StepLines(once.Plan))
		}
		if after := containerIDs(ctx, t, s); !maps.Equal(ids, after) {
			t.Errorf("containers changed: %v → %v", ids, after)
		}
		a.Apply(ctx, t, c)
		if again := a.Plan(ctx, t, c); len(again.Plan.Restarted) != 0 {
			t.Errorf("after an apply: restarted %+v, want none", again.Plan.Restarted)
		}
	})

	t.Run("a worker joins, gets the network plugin and becomes Ready, and leaves", func(t *testing.T) {
		n4 := s.Nodes[3]
		withWorker := f.cluster(t, rt.Roles(3, 3))
		before := containerIDs(ctx, t, s)
		pl := a.Apply(ctx, t, withWorker)
		for _, st := range pl.Plan.Steps {
			if st.Node != n4.Address {
				t.Errorf("a step on another node than the new worker: %s %s %s", st.Node, st.Action, st.Component)
			}
		}
		checkNodes(ctx, t, a, withWorker, s.Nodes[:4])
		a.InSync(ctx, t, withWorker)
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
		// As RKE's CleanUpAll: rigger's files and the network plugin's
		// CNI configuration, binaries and state.
		for _, dir := range []string{"etc-kubernetes", "etc-cni", "opt-cni", "var-lib-cni"} {
			if left, _ := os.ReadDir(filepath.Join(n4.Dir, dir)); len(left) > 0 {
				t.Errorf("files left in the removed node's %s: %v", dir, left)
			}
		}
	})

	t.Run("a partitioned node is reported, not removed", func(t *testing.T) {
		third := s.Nodes[2]
		heal := sandboxtest.Partition(ctx, t, s, third.Name)
		// A change for every node. With the default budget
		// (max_unavailable_worker 10% of 3: 1), the node down uses it up:
		// nothing changes and apply says why.
		kubeletV3 := rt.ExtraArg(rt.KubeletArgs, "v", "3")
		changed := f.cluster(t, rt.Roles(3), kubeletV3)
		before := containerIDs(ctx, t, s)
		pl, _, err := a.TryApply(ctx, t, changed)
		if err == nil || !strings.Contains(err.Error(), "max_unavailable_worker allows 1 of the 3 worker nodes") {
			t.Fatalf("apply with the budget used up: %v", err)
		}
		// A partition disturbs the others too: a controller manager
		// that loses its API server's answers for a while exits, and
		// Docker restarts it. Such a crash loop is repaired whatever the
		// budget (plan.Step.Repair); nothing else changes.
		repaired := repairs(t, pl.Plan)
		after := containerIDs(ctx, t, s)
		maps.DeleteFunc(before, func(k, _ string) bool { return repaired[k] })
		maps.DeleteFunc(after, func(k, _ string) bool { return repaired[k] })
		if !maps.Equal(before, after) {
			t.Errorf("containers changed although the budget was used up")
		}
		// With room for two, the reachable ones converge.
		changed.UpgradeStrategy.MaxUnavailableWorker = "2"
		pl = a.Apply(ctx, t, changed)
		if !slices.Equal(pl.Unreachable(), []string{third.Address}) || pl.Complete() || pl.Plan.Count(plan.Remove) != 0 {
			t.Fatalf("unreachable %+v, %d removals", pl.Plan.Unreachable, pl.Plan.Count(plan.Remove))
		}
		repairs(t, pl.Plan)
		if got := changes(pl.Plan); !slices.Equal(got, []string{first3[0] + " replace kubelet", first3[1] + " replace kubelet"}) {
			t.Errorf("steps %v", got)
		}
		heal()
		pl = a.Apply(ctx, t, changed)
		repairs(t, pl.Plan)
		if got := changes(pl.Plan); !slices.Equal(got, []string{third.Address + " replace kubelet"}) {
			t.Errorf("after healing: steps %v", got)
		}
		c, f.changes = changed, append(f.changes, kubeletV3)
	})

	t.Run("a lost state directory is recovered from the nodes", func(t *testing.T) {
		if err := os.RemoveAll(a.StateDir); err != nil {
			t.Fatal(err)
		}
		pl := a.Plan(ctx, t, c)
		if pl.PKISource.Kind != pkisource.Recovered || !pl.Plan.Empty() || len(pl.PKIChanges) > 0 {
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

// repairs are the containers ("address/name") p repairs (plan.Step.Repair),
// logged.
func repairs(t *testing.T, p *plan.Plan) map[string]bool {
	out := map[string]bool{}
	for _, s := range p.Steps {
		if s.Repair() {
			t.Logf("repaired on %s: %s (%s)", s.Node, s.Component, s.Reason)
			out[s.Node+"/"+s.Component] = true
		}
	}
	return out
}

// changes are the step lines (reconciletest.StepLines) of p but its repairs.
func changes(p *plan.Plan) []string {
	return rt.StepLines(&plan.Plan{Steps: slices.DeleteFunc(slices.Clone(p.Steps), plan.Step.Repair)})
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
	cfg, err := reach.SSHConfig(c, nil)
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
	rt.NodesReady(ctx, t, a.Client(ctx, t, c), want)
}

// memberHealthTimeout bounds the wait for every etcd member to answer its
// status as a healthy voter after an apply.
const memberHealthTimeout = 3 * time.Minute

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

// killRuns kills the runs of the container name on node n for which kill
// says so (from when the run started), but those of a container whose ID
// is skip, with SIGKILL from the machine (the node's processes are the
// machine's), as a crash or the kernel's OOM killer ends a process:
// Docker's restart policy starts it again. With once, it stops after the
// first. stop ends it and returns how many runs it killed.
func killRuns(ctx context.Context, t *testing.T, n sandbox.Node, name, skip string, once bool, kill func(started time.Time) bool) (stop func() int) {
	t.Helper()
	cli := sandboxtest.DockerClient(t, n)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	kills := 0
	go func() {
		defer close(done)
		killed := map[string]bool{} // StartedAt of the runs killed
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			in, err := cli.ContainerInspect(ctx, name)
			if err != nil || in.ContainerJSONBase == nil || in.ID == skip || in.State == nil || !in.State.Running || in.State.Pid == 0 {
				continue
			}
			started, err := time.Parse(time.RFC3339Nano, in.State.StartedAt)
			if err != nil || killed[in.State.StartedAt] || !kill(started) {
				continue
			}
			if err := syscall.Kill(in.State.Pid, syscall.SIGKILL); err != nil {
				t.Errorf("kill %s on %s (pid %d): %v", name, n.Address, in.State.Pid, err)
				return
			}
			killed[in.State.StartedAt] = true
			kills++
			if once {
				return
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		return kills
	}
}

// logRestarts logs how many times Docker restarted each of the cluster's
// containers since it was last started through the API: what a cluster's
// components do by themselves while what they need comes up.
func logRestarts(ctx context.Context, t *testing.T, s *sandbox.Sandbox) {
	t.Helper()
	var lines []string
	for _, n := range s.Nodes {
		cli := sandboxtest.DockerClient(t, n)
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", desired.LabelCluster))})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			in, err := cli.ContainerInspect(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprintf("%s %s: %s, restarted %d times", n.Address, strings.TrimPrefix(c.Names[0], "/"), c.Status, in.RestartCount))
		}
	}
	t.Logf("the cluster's containers:\n%s", strings.Join(lines, "\n"))
}
