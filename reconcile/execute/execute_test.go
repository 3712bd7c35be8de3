package execute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
)

// clusterYML has three etcd+controlplane nodes and four workers.
const clusterYML = `cluster_name: test
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane]}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane]}
  - {address: 10.0.0.3, user: u, role: [etcd, controlplane]}
  - {address: 10.0.0.4, user: u, role: [worker]}
  - {address: 10.0.0.5, user: u, role: [worker]}
  - {address: 10.0.0.6, user: u, role: [worker]}
  - {address: 10.0.0.7, user: u, role: [worker]}
`

func build(t *testing.T, yml string) *desired.Cluster {
	t.Helper()
	c, diags := spec.Parse([]byte(yml), "cluster.yml")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	d, err := desired.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range d.Nodes {
		d.Nodes[i].Files = map[string][]byte{desired.KubernetesDir + "/ssl/kube-ca.pem": []byte("ca")}
	}
	return d
}

// empty is an observation of the nodes of d (and extra ones) running nothing.
func empty(d *desired.Cluster, at time.Time, extra ...string) *observe.Cluster {
	o := &observe.Cluster{At: at, Nodes: map[string]*observe.Node{}}
	for _, a := range extra {
		o.Nodes[a] = &observe.Node{Address: a, Reachable: true, FilesRead: true}
	}
	for _, n := range d.Nodes {
		o.Nodes[n.Address] = &observe.Node{Address: n.Address, Reachable: true, FilesRead: true}
	}
	return o
}

// recorder is a fake of the node operations and the health checks that
// logs what happens, in order, and how many worker nodes were busy at once.
type recorder struct {
	mu      sync.Mutex
	events  []string
	failOn  string // "node component" whose step fails
	busy    map[string]bool
	maxBusy int
	cancel  func() // called after the first worker step, when set
}

func (r *recorder) log(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) ops() *nodeOps {
	return &nodeOps{
		apply: func(ctx context.Context, s plan.Step) error {
			if s.Phase == plan.PhaseWorker {
				r.mu.Lock()
				if r.busy == nil {
					r.busy = map[string]bool{}
				}
				r.busy[s.Node] = true
				r.maxBusy = max(r.maxBusy, len(r.busy))
				r.mu.Unlock()
				time.Sleep(5 * time.Millisecond) // let the batch overlap
				if r.cancel != nil {
					r.cancel()
				}
			}
			r.log("%s %s %s", s.Action, s.Node, s.Component)
			if s.Node+" "+s.Component == r.failOn {
				return errors.New("boom")
			}
			return nil
		},
		clean: func(_ context.Context, node string) error {
			r.log("clean %s", node)
			return nil
		},
	}
}

// Wait is the fake health check: healthy at once. A worker node's kubelet
// check ends the node's work in its batch.
func (r *recorder) Wait(_ context.Context, t health.Target, _ time.Duration) error {
	r.log("healthy %s %s", t.Node, t.Component)
	if t.Component == desired.Kubelet {
		r.mu.Lock()
		delete(r.busy, t.Node)
		r.mu.Unlock()
	}
	return nil
}

func index(events []string, prefix string) int {
	return slices.IndexFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

func lastIndex(events []string, prefix string) int {
	for i := len(events) - 1; i >= 0; i-- {
		if strings.HasPrefix(events[i], prefix) {
			return i
		}
	}
	return -1
}

var now = time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)

func options(d *desired.Cluster, r *recorder) Options {
	return Options{Desired: d, Health: r, Budgets: plan.Budgets{WorkerBatch: 2}, Now: func() time.Time { return now }}
}

// replacing is the plan of d's nodes from scratch with the control plane
// and worker steps made replacements, as for a cluster whose containers
// all run with another spec: those phases then roll.
func replacing(d *desired.Cluster) *plan.Plan {
	p := plan.Compute(d, empty(d, now))
	for i, s := range p.Steps {
		if (s.Phase == plan.PhaseControlPlane || s.Phase == plan.PhaseWorker) && s.Action == plan.Create {
			p.Steps[i].Action = plan.Replace
		}
	}
	return p
}

func TestOrder(t *testing.T) {
	d := build(t, clusterYML)
	p := replacing(d)
	r := &recorder{}
	res, err := run(context.Background(), p, options(d, r), r.ops())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Done) != len(p.Steps) || len(res.NotRun) != 0 {
		t.Fatalf("done %d of %d steps, %d not run", len(res.Done), len(p.Steps), len(res.NotRun))
	}
	ev := r.events
	// Files first, everywhere.
	if last, first := lastIndex(ev, "write-files"), index(ev, "create"); last > first {
		t.Errorf("files written after the first container was created:\n%s", strings.Join(ev, "\n"))
	}
	// A new etcd cluster: every member created before any is waited for.
	if lastCreate, firstWait := lastIndex(ev, "create 10.0.0.3 etcd"), index(ev, "healthy 10.0.0.1 etcd"); lastCreate > firstWait {
		t.Errorf("etcd members waited for before all were created:\n%s", strings.Join(ev, "\n"))
	}
	// Control plane: node 1 healthy before node 2 changes.
	if healthy1, start2 := index(ev, "healthy 10.0.0.1 kube-scheduler"), index(ev, "replace 10.0.0.2 kube-apiserver"); healthy1 < 0 || healthy1 > start2 {
		t.Errorf("controlplane node 2 started before node 1 was healthy:\n%s", strings.Join(ev, "\n"))
	}
	if apiHealthy := index(ev, "healthy 10.0.0.1 kube-apiserver"); apiHealthy > index(ev, "replace 10.0.0.2 kube-apiserver") {
		t.Errorf("API server of node 1 not checked before node 2:\n%s", strings.Join(ev, "\n"))
	}
	// Workers: at most two nodes at once.
	if r.maxBusy != 2 {
		t.Errorf("%d worker nodes changed at once, want 2", r.maxBusy)
	}
	// Every kubelet checked.
	for _, n := range d.Nodes {
		if index(ev, "healthy "+n.Address+" kubelet") < 0 {
			t.Errorf("kubelet of %s never checked", n.Address)
		}
	}
}

func TestStopsAtFailure(t *testing.T) {
	d := build(t, clusterYML)
	p := replacing(d)
	r := &recorder{failOn: "10.0.0.2 kube-apiserver"}
	res, err := run(context.Background(), p, options(d, r), r.ops())
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error %v, want the failed step's", err)
	}
	if index(r.events, "replace 10.0.0.3 kube-apiserver") >= 0 || index(r.events, "replace 10.0.0.4") >= 0 {
		t.Errorf("went on after the failure:\n%s", strings.Join(r.events, "\n"))
	}
	if len(res.Failed()) != 1 || res.Failed()[0].Step.Node != "10.0.0.2" {
		t.Errorf("failed outcomes %+v", res.Failed())
	}
	if len(res.Done)+len(res.NotRun) != len(p.Steps) {
		t.Errorf("done %d + not run %d != %d steps", len(res.Done), len(res.NotRun), len(p.Steps))
	}
	notRun := map[string]bool{}
	for _, s := range res.NotRun {
		notRun[s.Node+" "+s.Component] = true
	}
	if !notRun["10.0.0.3 kube-apiserver"] || !notRun["10.0.0.4 kubelet"] {
		t.Errorf("not run %v, want node 3's control plane and the workers", notRun)
	}
}

func TestCancelStopsBetweenBatches(t *testing.T) {
	d := build(t, clusterYML)
	p := replacing(d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{cancel: cancel}
	res, err := run(ctx, p, options(d, r), r.ops())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	for _, n := range []string{"10.0.0.6", "10.0.0.7"} {
		if index(r.events, "replace "+n) >= 0 {
			t.Errorf("the second worker batch (%s) ran after cancel:\n%s", n, strings.Join(r.events, "\n"))
		}
	}
	if len(res.NotRun) == 0 {
		t.Error("nothing reported as not run")
	}
}

func TestStalePlanRefused(t *testing.T) {
	d := build(t, clusterYML)
	p := plan.Compute(d, empty(d, now.Add(-time.Hour)))
	r := &recorder{}
	o := options(d, r)
	o.MaxPlanAge = 15 * time.Minute
	res, err := run(context.Background(), p, o, r.ops())
	var stale *StaleError
	if !errors.As(err, &stale) || len(r.events) != 0 || len(res.NotRun) != len(p.Steps) {
		t.Fatalf("err %v, events %v; want a StaleError and nothing done", err, r.events)
	}
}

func TestRemovedNodesCleaned(t *testing.T) {
	d := build(t, clusterYML)
	o := empty(d, now, "10.0.0.9", "10.0.0.8")
	o.Nodes["10.0.0.9"].Containers = map[string]observe.Container{desired.Kubelet: {ID: "k", Name: desired.Kubelet, State: "running"}}
	applied := plan.Compute(d, o)
	r := &recorder{}
	if _, err := run(context.Background(), applied, options(d, r), r.ops()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"remove 10.0.0.9 kubelet", "clean 10.0.0.9", "clean 10.0.0.8"} {
		if index(r.events, want) < 0 {
			t.Errorf("no %q in:\n%s", want, strings.Join(r.events, "\n"))
		}
	}
	if index(r.events, "clean 10.0.0.9") < index(r.events, "remove 10.0.0.9 kubelet") {
		t.Error("cleaned before the containers were removed")
	}
}

// TestNodeHooks: BeforeNode runs before a node's first step and AfterNode
// after its components are healthy, for every node of the control-plane
// and worker phases; a failing BeforeNode stops the phase before the node
// changes.
func TestNodeHooks(t *testing.T) {
	d := build(t, clusterYML)
	p := plan.Compute(d, empty(d, now))
	r := &recorder{}
	o := options(d, r)
	o.BeforeNode = func(_ context.Context, node string, _ []plan.Step) error {
		r.log("before %s", node)
		if node == "10.0.0.6" {
			return errors.New("drain timed out")
		}
		return nil
	}
	o.AfterNode = func(_ context.Context, node string, _ []plan.Step) error {
		r.log("after %s", node)
		return nil
	}
	_, err := run(context.Background(), p, o, r.ops())
	if err == nil || !strings.Contains(err.Error(), "drain timed out") {
		t.Fatalf("error %v", err)
	}
	ev := r.events
	for _, tc := range []struct{ node, first, healthy string }{
		{"10.0.0.1", "kube-apiserver", "kube-scheduler"}, // its control-plane phase
		{"10.0.0.4", "kubelet", "kube-proxy"},
	} {
		n := tc.node
		before, first := index(ev, "before "+n), index(ev, "create "+n+" "+tc.first)
		healthy, after := index(ev, "healthy "+n+" "+tc.healthy), index(ev, "after "+n)
		if before < 0 || !(before < first && first < healthy && healthy < after) {
			t.Errorf("%s: before %d, first step %d, healthy %d, after %d:\n%s", n, before, first, healthy, after, strings.Join(ev, "\n"))
		}
	}
	if index(ev, "create 10.0.0.6") >= 0 {
		t.Errorf("10.0.0.6 changed although BeforeNode failed:\n%s", strings.Join(ev, "\n"))
	}
}

// TestTimeline: with a Timeline, each step, health wait and node hook is
// a span, named for its node, in the order they ran.
func TestTimeline(t *testing.T) {
	d := build(t, clusterYML)
	p := plan.Compute(d, empty(d, now))
	r := &recorder{}
	o := options(d, r)
	o.BeforeNode = func(context.Context, string, []plan.Step) error { return nil }
	o.AfterNode = o.BeforeNode
	o.Timeline = timeline.New()
	if _, err := run(context.Background(), p, o, r.ops()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range o.Timeline.Spans() {
		names = append(names, sp.Name)
	}
	n := "10.0.0.4"
	before, step := index(names, "apply "+n+": before its changes"), index(names, "apply "+n+": create kubelet")
	healthy, after := index(names, "apply "+n+": kubelet healthy"), index(names, "apply "+n+": after its changes")
	if before < 0 || !(before <= step && step <= healthy && healthy <= after) {
		t.Errorf("%s: before %d, step %d, healthy %d, after %d:\n%s", n, before, step, healthy, after, strings.Join(names, "\n"))
	}
}

// TestSnapshotBeforeEtcdChange: a running etcd cluster gets one snapshot
// before its first membership change, and none changes if it fails.
func TestSnapshotBeforeEtcdChange(t *testing.T) {
	d := build(t, clusterYML)
	etcd, _ := d.Nodes[0].Container(desired.Etcd)
	member := &etcdmember.Member{Name: "etcd-new", PeerURLs: []string{"https://10.0.0.8:2380"}, IsLearner: true}
	p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{
		{Node: "10.0.0.9", Component: plan.EtcdMemberComponent, Action: plan.RemoveMember, Phase: plan.PhaseEtcd, Member: member},
		{Node: "10.0.0.1", Component: desired.Etcd, Action: plan.Restart, Phase: plan.PhaseEtcd, After: etcd},
		{Node: "10.0.0.1", Component: desired.Etcd, Action: plan.Replace, Phase: plan.PhaseEtcd, After: etcd},
	}}
	for _, fail := range []bool{false, true} {
		r := &recorder{}
		o := options(d, r)
		o.Snapshot = func(context.Context) error {
			r.log("snapshot")
			if fail {
				return errors.New("no healthy member")
			}
			return nil
		}
		_, err := run(context.Background(), p, o, r.ops())
		snapshots := 0
		for _, e := range r.events {
			if e == "snapshot" {
				snapshots++
			}
		}
		if snapshots != 1 || r.events[0] != "snapshot" {
			t.Errorf("fail=%v: events %v, want one snapshot first", fail, r.events)
		}
		if fail && (err == nil || len(r.events) != 1) {
			t.Errorf("a failed snapshot: error %v, events %v; want nothing changed", err, r.events)
		}
	}
}

// TestWriteAgainBeforeUpgrade: the objects of a plan's WriteAgain are
// written again after the upgrade's snapshot and before any step, each
// resource in turn; a failure changes nothing on the nodes.
func TestWriteAgainBeforeUpgrade(t *testing.T) {
	d := build(t, clusterYML)
	etcd, _ := d.Nodes[0].Container(desired.Etcd)
	p := &plan.Plan{ObservedAt: now, Upgrade: &plan.Upgrade{From: "v1.36.3", To: "v1.37.2"},
		WriteAgain: []plan.WriteAgain{{Resource: "ipaddresses.networking.k8s.io", At: "networking.k8s.io/v1"}, {Resource: "servicecidrs.networking.k8s.io", At: "networking.k8s.io/v1"}},
		Steps:      []plan.Step{{Node: "10.0.0.1", Component: desired.Etcd, Action: plan.Replace, Phase: plan.PhaseEtcd, After: etcd}}}
	for _, fail := range []bool{false, true} {
		r := &recorder{}
		o := options(d, r)
		o.Snapshot = func(context.Context) error { r.log("snapshot"); return nil }
		o.WriteAgain = func(_ context.Context, w plan.WriteAgain) (int, error) {
			r.log("write again %s", w.Resource)
			if fail {
				return 0, errors.New("list ipaddresses: the server could not find the requested resource")
			}
			return 3, nil
		}
		res, err := run(context.Background(), p, o, r.ops())
		want := []string{"snapshot", "write again ipaddresses.networking.k8s.io", "write again servicecidrs.networking.k8s.io", "replace 10.0.0.1 etcd"}
		if fail {
			want = want[:2]
			if err == nil || !strings.Contains(err.Error(), "write the objects of ipaddresses.networking.k8s.io again before upgrading Kubernetes (no node was changed)") || len(res.NotRun) != 1 {
				t.Errorf("a failed write: error %v, not run %v", err, res.NotRun)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if got := r.events[:min(len(r.events), len(want))]; !slices.Equal(got, want) || (fail && len(r.events) != len(want)) {
			t.Errorf("fail=%v: events %v, want %v first", fail, r.events, want)
		}
	}
}

// TestSnapshotEtcdLogsFirst: a plan that moves etcd members to 3.7 makes
// every member save a snapshot of its log once, after the data's
// snapshot and before the first of them moves; when that fails, no
// member moves.
func TestSnapshotEtcdLogsFirst(t *testing.T) {
	d := build(t, clusterYML)
	var steps []plan.Step
	var nodes []string
	for _, n := range d.Nodes {
		if c, ok := n.Container(desired.Etcd); ok {
			steps = append(steps, plan.Step{Node: n.Address, Component: desired.Etcd, Action: plan.Replace, Phase: plan.PhaseEtcd, After: c})
			nodes = append(nodes, n.Address)
		}
	}
	if len(nodes) < 2 {
		t.Fatalf("clusterYML has %d etcd nodes", len(nodes))
	}
	p := &plan.Plan{ObservedAt: now, Steps: steps, SnapshotEtcdLogs: &plan.SnapshotEtcdLogs{From: "3.6", To: "3.7", Nodes: nodes}}
	for _, fail := range []bool{false, true} {
		r := &recorder{}
		o := options(d, r)
		o.Snapshot = func(context.Context) error { r.log("snapshot"); return nil }
		fake := &membersFake{via: map[string][]string{}, logs: r}
		if fail {
			fake.logsErr = errors.New("etcd member etcd-b: has applied entry 9 of 12 after a minute")
		}
		o.Etcd = func(context.Context) (Membership, error) { return fake, nil }
		res, err := run(context.Background(), p, o, r.ops())
		want := []string{"snapshot", "snapshot logs of 3.6"}
		if fail {
			if err == nil || !strings.Contains(err.Error(), "before moving etcd to 3.7 (no member was changed for it): etcd member etcd-b") || len(res.NotRun) != len(steps) {
				t.Errorf("a failed snapshot of the logs: error %v, not run %v", err, res.NotRun)
			}
		} else {
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes {
				want = append(want, "replace "+n+" etcd")
			}
		}
		got := slices.DeleteFunc(slices.Clone(r.events), func(e string) bool { return strings.HasPrefix(e, "healthy ") })
		if !slices.Equal(got, want) {
			t.Errorf("fail=%v: events %v, want %v", fail, got, want)
		}
	}
}

// TestNotReadyFirst: the nodes of Plan.First change before the others.
func TestNotReadyFirst(t *testing.T) {
	d := build(t, clusterYML)
	p := replacing(d)
	r := &recorder{}
	o := options(d, r)
	o.Budgets.WorkerBatch = 1
	p.First = []string{"10.0.0.7", "10.0.0.3"}
	if _, err := run(context.Background(), p, o, r.ops()); err != nil {
		t.Fatal(err)
	}
	ev := r.events
	if !(index(ev, "replace 10.0.0.3 kube-apiserver") < index(ev, "replace 10.0.0.1 kube-apiserver")) {
		t.Errorf("controlplane: 10.0.0.3 not first:\n%s", strings.Join(ev, "\n"))
	}
	first := index(ev, "replace 10.0.0.1 kubelet")
	if !(index(ev, "replace 10.0.0.7 kubelet") < first && index(ev, "replace 10.0.0.3 kubelet") < first) {
		t.Errorf("workers: 10.0.0.7 and 10.0.0.3 not first:\n%s", strings.Join(ev, "\n"))
	}
}

// TestAddonsPhase: the add-ons go after the workers and before the removed
// nodes are cleaned; their failure is the result's AddonsErr, not Run's
// error, and the removed nodes are cleaned all the same.
func TestAddonsPhase(t *testing.T) {
	d := build(t, clusterYML)
	o := empty(d, now)
	o.Nodes["10.0.0.9"] = &observe.Node{Address: "10.0.0.9", Reachable: true}
	p := plan.Compute(d, o)
	for _, fail := range []bool{false, true} {
		r := &recorder{}
		opts := options(d, r)
		opts.Addons = func(context.Context) error {
			r.log("addons")
			if fail {
				return errors.New("DaemonSet kube-system/kube-flannel not ready")
			}
			return nil
		}
		res, err := run(context.Background(), p, opts, r.ops())
		if err != nil || (res.AddonsErr != nil) != fail {
			t.Fatalf("fail=%v: err %v, add-ons error %v", fail, err, res.AddonsErr)
		}
		ev := r.events
		at := index(ev, "addons")
		if at < 0 || at < lastIndex(ev, "create 10.0.0.7 kubelet") || at < lastIndex(ev, "healthy 10.0.0.7 kubelet") {
			t.Errorf("fail=%v: add-ons not after the workers:\n%s", fail, strings.Join(ev, "\n"))
		}
		clean := index(ev, "clean 10.0.0.9")
		if clean < at {
			t.Errorf("fail=%v: removed node cleaned at %d, add-ons at %d:\n%s", fail, clean, at, strings.Join(ev, "\n"))
		}
	}
}

// membersFake is the etcd cluster of a membership test: its members, and
// the members each change was sent through.
type membersFake struct {
	members []etcdmember.Member
	via     map[string][]string
	// logs records SnapshotLogs' calls with r; logsErr is their error.
	logs    *recorder
	logsErr error
	// handOff answers HandOff (nil: handOffErr, or not the leader).
	handOff    func(peer string) (*etcdmember.Member, error)
	handOffErr error
}

func (f *membersFake) SnapshotLogs(_ context.Context, minor string) (etcdmember.LogSnapshots, error) {
	if f.logs != nil {
		f.logs.log("snapshot logs of %s", minor)
	}
	return etcdmember.LogSnapshots{Members: []string{"etcd-a"}, Written: 10001}, f.logsErr
}

func (f *membersFake) Members(context.Context) ([]etcdmember.Member, error) { return f.members, nil }

func (f *membersFake) HandOff(_ context.Context, peer string) (*etcdmember.Member, error) {
	f.via["hand off "+peer] = nil
	if f.handOff == nil {
		return nil, f.handOffErr
	}
	return f.handOff(peer)
}

func (f *membersFake) AddLearner(_ context.Context, via []string, peer string) (etcdmember.Member, error) {
	f.via["add "+peer] = via
	return etcdmember.Member{ID: 99, PeerURLs: []string{peer}, IsLearner: true}, nil
}

func (f *membersFake) Promote(_ context.Context, via []string, id uint64) error {
	f.via[fmt.Sprintf("promote %d", id)] = via
	return nil
}

func (f *membersFake) Remove(_ context.Context, via []string, id uint64) error {
	f.via[fmt.Sprintf("remove %d", id)] = via
	return nil
}

// TestMembershipVia: a plan that replaces member b sends the addition
// through the members it keeps first, and the removal of b never through
// b itself (which would answer "server stopped").
func TestMembershipVia(t *testing.T) {
	d := build(t, clusterYML)
	m := func(id uint64, host string) etcdmember.Member {
		return etcdmember.Member{ID: id, Name: "etcd-" + host, PeerURLs: []string{"https://" + host + ":2380"},
			ClientURLs: []string{"https://" + host + ":2379"}, Healthy: true}
	}
	a, b, c := m(1, "10.0.0.1"), m(2, "10.0.0.2"), m(3, "10.0.0.3")
	fake := &membersFake{members: []etcdmember.Member{a, b, c}, via: map[string][]string{}}
	p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{
		{Node: "10.0.0.8", Component: plan.EtcdMemberComponent, Action: plan.AddMember, Phase: plan.PhaseEtcd,
			Member: &etcdmember.Member{Name: "etcd-new", PeerURLs: []string{"https://10.0.0.8:2380"}, IsLearner: true}},
		{Node: "10.0.0.2", Component: plan.EtcdMemberComponent, Action: plan.RemoveMember, Phase: plan.PhaseEtcd, Member: &b},
	}}
	o := options(d, &recorder{})
	o.Etcd = func(context.Context) (Membership, error) { return fake, nil }
	if _, err := run(context.Background(), p, o, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"add https://10.0.0.8:2380": {"https://10.0.0.1:2379", "https://10.0.0.3:2379", "https://10.0.0.2:2379"},
		"remove 2":                  {"https://10.0.0.1:2379", "https://10.0.0.3:2379"},
	}
	if diff := cmp.Diff(want, fake.via); diff != "" {
		t.Errorf("changes sent through (-want +got):\n%s", diff)
	}
}

// TestCrashPoints: RIGGER_FAULT (package crashpoint) can name the start
// and the end of every phase of Run, and the steps of those with steps.
func TestCrashPoints(t *testing.T) {
	points := crashpoint.Points()
	for _, ph := range []plan.Phase{plan.PhaseFiles, plan.PhaseEtcd, plan.PhaseControlPlane, phaseKubernetes, plan.PhaseWorker, phaseAddons, plan.PhaseRemovedNodes} {
		want := []string{crashpoint.PhaseStart(string(ph)), crashpoint.PhaseDone(string(ph))}
		if ph != phaseKubernetes && ph != phaseAddons {
			want = append(want, crashpoint.Step(string(ph)))
		}
		for _, p := range want {
			if !slices.Contains(points, p) {
				t.Errorf("phase %s: no point %s in crashpoint.Points()", ph, p)
			}
		}
	}
}

// TestLearnerPromotedWithoutCreate: a learner that an earlier apply added
// and started (its container runs; the plan adds it again to resume it)
// is promoted; one whose container the plan creates is promoted after it.
func TestLearnerPromotedWithoutCreate(t *testing.T) {
	d := build(t, clusterYML)
	m := func(id uint64, host string, learner bool) etcdmember.Member {
		return etcdmember.Member{ID: id, Name: "etcd-" + host, PeerURLs: []string{"https://" + host + ":2380"},
			ClientURLs: []string{"https://" + host + ":2379"}, Healthy: !learner, IsLearner: learner}
	}
	a, b, c := m(1, "10.0.0.1", false), m(2, "10.0.0.2", false), m(3, "10.0.0.3", true)
	fake := &membersFake{members: []etcdmember.Member{a, b, c}, via: map[string][]string{}}
	p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{
		{Node: "10.0.0.3", Component: plan.EtcdMemberComponent, Action: plan.AddMember, Phase: plan.PhaseEtcd, Member: &c},
	}}
	o := options(d, &recorder{})
	o.Etcd = func(context.Context) (Membership, error) { return fake, nil }
	if _, err := run(context.Background(), p, o, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := fake.via["promote 3"]; !ok {
		t.Errorf("the started learner was not promoted: changes %v", fake.via)
	}
	if _, ok := fake.via["add https://10.0.0.3:2380"]; ok {
		t.Error("the learner was added a second time")
	}
}

// TestCreatesAtOnce: the nodes where the control plane or the workers are
// only created (a new cluster) go all at once, at most MaxParallel, and
// before the nodes whose containers are replaced, which still roll.
func TestCreatesAtOnce(t *testing.T) {
	d := build(t, clusterYML)
	for _, tc := range []struct {
		name        string
		maxParallel int
		want        map[plan.Phase]int // nodes started at once
	}{
		{"unbounded", 0, map[plan.Phase]int{plan.PhaseControlPlane: 3, plan.PhaseWorker: 7}},
		{"MaxParallel 3", 3, map[plan.Phase]int{plan.PhaseControlPlane: 3, plan.PhaseWorker: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan.Compute(d, empty(d, now))
			r := &recorder{}
			o := options(d, r)
			o.MaxParallel = tc.maxParallel
			// Each node's steps of a phase wait until want[phase] nodes
			// have started theirs: nodes taken one at a time (the control
			// plane) or two at a time (Budgets.WorkerBatch) never get there.
			var mu sync.Mutex
			started := map[plan.Phase]map[string]bool{}
			all := map[plan.Phase]chan struct{}{}
			for ph := range tc.want {
				started[ph], all[ph] = map[string]bool{}, make(chan struct{})
			}
			ops := r.ops()
			apply := ops.apply
			ops.apply = func(ctx context.Context, s plan.Step) error {
				if want, ok := tc.want[s.Phase]; ok {
					mu.Lock()
					if !started[s.Phase][s.Node] {
						started[s.Phase][s.Node] = true
						if len(started[s.Phase]) == want {
							close(all[s.Phase])
						}
					}
					mu.Unlock()
					select {
					case <-all[s.Phase]:
					case <-time.After(10 * time.Second):
						return fmt.Errorf("%s: fewer than %d %s nodes started at once", s.Node, want, s.Phase)
					}
				}
				return apply(ctx, s)
			}
			if _, err := run(context.Background(), p, o, ops); err != nil {
				t.Fatal(err)
			}
			if want := tc.want[plan.PhaseWorker]; r.maxBusy > want {
				t.Errorf("%d worker nodes at once, more than %d", r.maxBusy, want)
			}
		})
	}

	t.Run("created nodes before replaced ones", func(t *testing.T) {
		p := replacing(d)
		for i, s := range p.Steps {
			if s.Node == "10.0.0.3" && s.Phase == plan.PhaseControlPlane || s.Node == "10.0.0.7" && s.Phase == plan.PhaseWorker {
				p.Steps[i].Action = plan.Create
			}
		}
		r := &recorder{}
		if _, err := run(context.Background(), p, options(d, r), r.ops()); err != nil {
			t.Fatal(err)
		}
		ev := r.events
		if !(lastIndex(ev, "healthy 10.0.0.3 kube-scheduler") < index(ev, "replace 10.0.0.1 kube-apiserver")) {
			t.Errorf("controlplane: 10.0.0.3's creates not done before the replacements:\n%s", strings.Join(ev, "\n"))
		}
		if !(lastIndex(ev, "healthy 10.0.0.7 kubelet") < index(ev, "replace 10.0.0.1 kubelet")) {
			t.Errorf("workers: 10.0.0.7's creates not done before the replacements:\n%s", strings.Join(ev, "\n"))
		}
		if healthy1, start2 := index(ev, "healthy 10.0.0.1 kube-scheduler"), index(ev, "replace 10.0.0.2 kube-apiserver"); healthy1 < 0 || healthy1 > start2 {
			t.Errorf("the replacements did not roll:\n%s", strings.Join(ev, "\n"))
		}
	})
}

// TestBlockedPhaseRepairs: a rolling phase its budget stops still repairs
// the nodes it only repairs (a crash loop), first, and changes no other.
func TestBlockedPhaseRepairs(t *testing.T) {
	d := build(t, clusterYML)
	p := replacing(d)
	var steps []plan.Step
	for _, s := range p.Steps {
		if s.Phase != plan.PhaseControlPlane {
			steps = append(steps, s)
			continue
		}
		if s.Node == "10.0.0.2" && s.Component == desired.KubeControllerManager {
			// A crash loop: the container as desired, restarting.
			s.Before = &observe.Container{Name: s.Component, State: "restarting", SpecHash: s.After.Hash()}
			steps = append(steps, s)
		} else if s.Node == "10.0.0.1" {
			steps = append(steps, s)
		}
	}
	p.Steps = steps
	r := &recorder{}
	o := options(d, r)
	budgetErr := errors.New("max_unavailable_controlplane used up")
	o.Budgets.ControlPlaneBlocked = budgetErr
	if _, err := run(context.Background(), p, o, r.ops()); !errors.Is(err, budgetErr) {
		t.Fatalf("run: %v, want the budget's error", err)
	}
	ev := r.events
	if index(ev, "replace 10.0.0.2 kube-controller-manager") < 0 || index(ev, "healthy 10.0.0.2 kube-controller-manager") < 0 {
		t.Errorf("the crash loop on 10.0.0.2 was not repaired:\n%s", strings.Join(ev, "\n"))
	}
	if i := index(ev, "replace 10.0.0.1"); i >= 0 {
		t.Errorf("10.0.0.1 changed although the budget stops the phase:\n%s", strings.Join(ev, "\n"))
	}
	if i := index(ev, "replace 10.0.0.4"); i >= 0 {
		t.Errorf("the workers changed after the control plane's phase stopped:\n%s", strings.Join(ev, "\n"))
	}
	if got := o.Budgets.Blocked(p); got[plan.PhaseControlPlane] == nil {
		t.Errorf("Blocked = %v, want the control plane (10.0.0.1's changes)", got)
	}
}

// TestStopGrace: an etcd member of a running cluster hands its leadership
// off before it stops and then gets etcdStopGrace; an API server that
// does not end its watches when it stops gets apiServerStopGrace; one that
// could not hand it off, the only voter, a member of a new cluster and
// every other component stop as they stop themselves (dockerop.StopTimeout).
func TestStopGrace(t *testing.T) {
	d := build(t, clusterYML)
	var etcdNode string
	for _, n := range d.Nodes {
		if _, ok := n.Container(desired.Etcd); ok {
			etcdNode = n.Address
			break
		}
	}
	dn, _ := d.Node(etcdNode)
	peer := desired.EtcdPeerURL(dn.InternalAddress)
	etcdStep := plan.Step{Node: etcdNode, Component: desired.Etcd, Action: plan.Replace}
	for _, tc := range []struct {
		name    string
		step    plan.Step
		etcdNew bool
		handOff func(string) (*etcdmember.Member, error)
		err     error
		want    time.Duration
		said    string
	}{
		{name: "the leader", step: etcdStep, want: etcdStopGrace,
			handOff: func(p string) (*etcdmember.Member, error) {
				return &etcdmember.Member{ID: 2, Name: "etcd-b", PeerURLs: []string{"https://10.0.0.2:2380"}}, nil
			}, said: "etcd's leadership handed off to etcd-b https://10.0.0.2:2380 before the member stops"},
		{name: "a follower", step: etcdStep, want: etcdStopGrace},
		{name: "the only voter", step: etcdStep, err: etcdmember.ErrNoOtherVoter},
		{name: "etcd does not answer", step: etcdStep, err: errors.New("context deadline exceeded"),
			said: "etcd's leadership not handed off (context deadline exceeded): the member stops as etcd stops itself, in up to 30s"},
		{name: "a new cluster", step: etcdStep, etcdNew: true},
		{name: "another component", step: plan.Step{Node: etcdNode, Component: desired.KubeControllerManager, Action: plan.Replace,
			Before: &observe.Container{Name: desired.KubeControllerManager, RKE: true}}},
		{name: "an API server that ends its watches", step: plan.Step{Node: etcdNode, Component: desired.KubeAPIServer, Action: plan.Replace,
			Before: &observe.Container{Name: desired.KubeAPIServer, Spec: apiServerSpec("--shutdown-watch-termination-grace-period=25s")}}},
		{name: "RKE's API server", step: plan.Step{Node: etcdNode, Component: desired.KubeAPIServer, Action: plan.Replace,
			Before: &observe.Container{Name: desired.KubeAPIServer, RKE: true}}, want: apiServerStopGrace},
		{name: "an API server whose watches' grace is 0", step: plan.Step{Node: etcdNode, Component: desired.KubeAPIServer, Action: plan.Restart,
			Before: &observe.Container{Name: desired.KubeAPIServer, Spec: apiServerSpec("--shutdown-watch-termination-grace-period=0s")}}, want: apiServerStopGrace},
		{name: "an API server without the flag", step: plan.Step{Node: etcdNode, Component: desired.KubeAPIServer, Action: plan.Replace,
			Before: &observe.Container{Name: desired.KubeAPIServer, Spec: apiServerSpec("--v=2")}}, want: apiServerStopGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var said []string
			fake := &membersFake{via: map[string][]string{}, handOff: tc.handOff, handOffErr: tc.err}
			o := options(d, &recorder{})
			o.Etcd = func(context.Context) (Membership, error) { return fake, nil }
			o.Hooks.Step = func(node, msg string, err error) { said = append(said, msg) }
			r := &runner{o: o, etcdNew: tc.etcdNew}
			if got := r.stopGrace(context.Background(), tc.step); got != tc.want {
				t.Errorf("grace %s, want %s", got, tc.want)
			}
			_, asked := fake.via["hand off "+peer]
			if wantAsked := tc.step.Component == desired.Etcd && !tc.etcdNew; asked != wantAsked {
				t.Errorf("hand off asked: %v, want %v", asked, wantAsked)
			}
			if want := []string{tc.said}; tc.said == "" && len(said) != 0 || tc.said != "" && !slices.Equal(said, want) {
				t.Errorf("said %q, want %q", said, tc.said)
			}
		})
	}
}

// apiServerSpec is the LabelSpec of an API server container with args.
func apiServerSpec(args ...string) string {
	return desired.Container{Name: desired.KubeAPIServer, Image: "k8s", Args: args}.SpecJSON()
}
