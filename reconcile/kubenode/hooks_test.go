package kubenode

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
)

func TestDisruptive(t *testing.T) {
	tests := []struct {
		name  string
		steps []plan.Step
		want  bool
	}{
		{"kubelet replaced", []plan.Step{{Component: desired.Kubelet, Action: plan.Replace}}, true},
		{"kube-proxy restarted", []plan.Step{{Component: desired.KubeProxy, Action: plan.Restart}}, true},
		{"API server replaced", []plan.Step{{Component: desired.KubeAPIServer, Action: plan.Replace}}, true},
		{"kubelet created: the node served nothing", []plan.Step{{Component: desired.Kubelet, Action: plan.Create}}, false},
		{"nginx-proxy replaced", []plan.Step{{Component: desired.NginxProxy, Action: plan.Replace}}, false},
		{"no steps", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Disruptive(tt.steps); got != tt.want {
				t.Errorf("Disruptive = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReconcile: labels set, a Node left cordoned by rigger uncordoned,
// one cordoned by someone else kept, and a stale Node deleted only when
// the plan deletes it (stale_nodes: delete), never a Node a machine owns.
func TestReconcile(t *testing.T) {
	ctx := context.Background()
	ready := func(n corev1.Node) *corev1.Node { return &n }
	n1 := ready(node("n1", "10.0.0.1", "True", 0))
	n1.Spec.Unschedulable = true
	n1.Annotations = map[string]string{AnnotationCordoned: "true"}
	n2 := ready(node("n2", "10.0.0.2", "True", 0))
	n2.Spec.Unschedulable = true
	ghost := ready(node("ghost", "10.0.0.9", "Unknown", 0))
	ms := machines()[:2]
	for _, tc := range []struct {
		name        string
		delete      []string
		wantDeleted bool
	}{
		{"stale_nodes: report", nil, false},
		{"stale_nodes: delete", []string{"ghost"}, true},
		{"a Node the plan deletes is owned now", []string{"n2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(n1.DeepCopy(), n2.DeepCopy(), ghost.DeepCopy())
			r, err := Reconcile(ctx, cs, ms, ReconcileOptions{Delete: tc.delete})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Synced, []string{"n1", "n2"}) || !slices.Equal(r.Uncordoned, []string{"n1"}) {
				t.Errorf("synced %v, uncordoned %v", r.Synced, r.Uncordoned)
			}
			got, _ := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
			if !got.Spec.Unschedulable || got.Labels[LabelRoleWorker] != "true" {
				t.Errorf("n2: unschedulable %v, labels %v", got.Spec.Unschedulable, got.Labels)
			}
			_, err = cs.CoreV1().Nodes().Get(ctx, "ghost", metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted || len(r.Linkage.Stale) != 1 {
				t.Errorf("ghost deleted: %v, stale %v", deleted, r.Linkage.Stale)
			}
			if _, err := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{}); err != nil {
				t.Errorf("n2: %v, want it kept", err)
			}
		})
	}
}

// TestAfterNodeNotReady: a kubelet whose Node never registers stops the
// node's changes with the kubelet's last lines and says the next apply
// looks again.
func TestAfterNodeNotReady(t *testing.T) {
	err := joinNotReady(t, Config{
		Client: fake.NewClientset(), ReadyTimeout: 3 * time.Second,
		Logs: func(_ context.Context, node, component string) string {
			return component + " on " + node + ": Unable to register node with API server"
		},
	})
	for _, want := range []string{"its kubelet registered no Node within", "the next apply checks it again",
		"last lines of kubelet on 10.0.0.2:\nkubelet on 10.0.0.2: Unable to register node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestHooksCordonEachPhase: a node changed in the control-plane and the
// worker phase is cordoned around each: in between, the other nodes'
// changes may need it for their pods.
func TestHooksCordonEachPhase(t *testing.T) {
	ctx := context.Background()
	n1 := node("n1", "10.0.0.1", "True", 0)
	cs := fake.NewClientset(&n1)
	cp := []plan.Step{{Node: "10.0.0.1", Component: desired.KubeAPIServer, Action: plan.Replace, Phase: plan.PhaseControlPlane}}
	worker := []plan.Step{{Node: "10.0.0.1", Component: desired.KubeProxy, Action: plan.Replace, Phase: plan.PhaseWorker}}
	files := []plan.Step{{Node: "10.0.0.1", Component: plan.FilesComponent, Action: plan.WriteFiles, Phase: plan.PhaseFiles}}
	var said []string
	h := NewHooks(Config{Client: cs, Machines: machines(), Say: func(node, msg string) { said = append(said, msg) }},
		&plan.Plan{Steps: slices.Concat(files, cp, worker)})
	unschedulable := func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Unschedulable
	}
	for i, phase := range [][]plan.Step{cp, worker} {
		if err := h.BeforeNode(ctx, "10.0.0.1", phase); err != nil {
			t.Fatal(err)
		}
		if !unschedulable() {
			t.Errorf("phase %d: not cordoned during the changes", i)
		}
		if err := h.AfterNode(ctx, "10.0.0.1", phase); err != nil {
			t.Fatal(err)
		}
		if unschedulable() {
			t.Errorf("phase %d: still cordoned after the changes", i)
		}
	}
	want := []string{"cordoned Node n1", "uncordoned Node n1", "cordoned Node n1", "uncordoned Node n1"}
	if !slices.Equal(said, want) {
		t.Errorf("progress %q, want %q", said, want)
	}
}

// TestHooksUpgradeDrains: a Kubernetes upgrade drains a node before its
// kubelet moves to the newer minor version, without upgrade_strategy.drain,
// and not before its API server does.
func TestHooksUpgradeDrains(t *testing.T) {
	ctx := context.Background()
	n1 := node("n1", "10.0.0.1", "True", 0)
	cs := fake.NewClientset(&n1)
	api := []plan.Step{{Node: "10.0.0.1", Component: desired.KubeAPIServer, Action: plan.Replace, Phase: plan.PhaseAPIServer}}
	kubelet := []plan.Step{{Node: "10.0.0.1", Component: desired.Kubelet, Action: plan.Replace, Phase: plan.PhaseWorker}}
	var said []string
	h := NewHooks(Config{Client: cs, Machines: machines(), Say: func(node, msg string) { said = append(said, msg) }},
		&plan.Plan{Steps: slices.Concat(api, kubelet), Upgrade: &plan.Upgrade{From: "v1.32.13", To: "v1.33.13", Drain: []string{"10.0.0.1"}}})
	drained := func() bool {
		return slices.ContainsFunc(said, func(l string) bool { return strings.HasPrefix(l, "drained Node n1") })
	}
	if err := h.BeforeNode(ctx, "10.0.0.1", api); err != nil {
		t.Fatal(err)
	}
	if drained() {
		t.Errorf("drained before its API server's upgrade: %q", said)
	}
	if err := h.AfterNode(ctx, "10.0.0.1", api); err != nil {
		t.Fatal(err)
	}
	if err := h.BeforeNode(ctx, "10.0.0.1", kubelet); err != nil {
		t.Fatal(err)
	}
	if !drained() {
		t.Errorf("not drained before its kubelet's upgrade: %q", said)
	}
}

func TestChanges(t *testing.T) {
	n1 := node("n1", "10.0.0.1", "True", 0)
	n1.Labels[LabelRoleEtcd], n1.Labels[LabelRoleControlPlane], n1.Labels[LabelRoleWorker] = "true", "true", "true"
	n1.Annotations = map[string]string{AnnotationManagedLabels: LabelRoleControlPlane + "," + LabelRoleEtcd + "," + LabelRoleWorker + "," + desired.NodeAddressLabel}
	n2 := node("n2", "10.0.0.2", "True", 0)
	n2.Spec.Unschedulable = true
	n2.Annotations = map[string]string{AnnotationCordoned: "true"}
	ghost := node("ghost", "10.0.0.9", "Unknown", 0)
	nodes := []corev1.Node{n1, n2, ghost}
	ms := machines()[:2]
	got := Changes(ms, &observe.Kubernetes{Link: Link(ms, nodes)}, spec.StaleNodesDelete, nil)
	want := []Pending{
		{Node: "10.0.0.2", Name: "n2", Change: "label node-role.kubernetes.io/worker=true", Action: PendingSync},
		{Node: "10.0.0.2", Name: "n2", Change: "uncordon (cordoned by an earlier apply)", Action: PendingUncordon},
		{Node: "kubernetes", Name: "ghost", Change: "delete stale Node (its address 10.0.0.9 is not in cluster.yml)", Action: PendingDelete},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Changes = %+v\nwant %+v", got, want)
	}
	if d := Deleted(got); !slices.Equal(d, []string{"ghost"}) {
		t.Errorf("Deleted = %v, want ghost", d)
	}
	if got := Changes(ms, &observe.Kubernetes{Link: Link(ms, nodes)}, spec.StaleNodesReport, nil); len(got) != 2 {
		t.Errorf("with stale_nodes: report: %+v", got)
	}
}

// TestAfterNodeReadyAgain: a Node that was Ready when cordoned and is not
// once its changes are done (the node lifecycle controller marked it
// Unknown while the API server restarted) is uncordoned when its kubelet
// reports Ready again; one that does not within ReadyTimeout, or that was
// not Ready to begin with, stays cordoned for a later apply.
func TestAfterNodeReadyAgain(t *testing.T) {
	ctx := context.Background()
	steps := []plan.Step{{Node: "10.0.0.1", Component: desired.KubeAPIServer, Action: plan.Restart, Phase: plan.PhaseControlPlane}}
	setReady := func(t *testing.T, cs *fake.Clientset, status string) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionStatus(status),
			Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name          string
		before        string
		readyAgain    bool
		unschedulable bool
		said          string
	}{
		{"Ready again", "True", true, false, "uncordoned Node n1"},
		{"not Ready again", "True", false, true, "Node n1 left cordoned: not Ready (Unknown) "},
		{"not Ready before", "False", false, true, "Node n1 left cordoned: not Ready (Unknown)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n1 := node("n1", "10.0.0.1", tt.before, 0)
			cs := fake.NewClientset(&n1)
			var said []string
			h := NewHooks(Config{Client: cs, Machines: machines(), ReadyTimeout: 3 * time.Second,
				Say: func(_, msg string) { said = append(said, msg) }}, &plan.Plan{Steps: steps})
			if err := h.BeforeNode(ctx, "10.0.0.1", steps); err != nil {
				t.Fatal(err)
			}
			setReady(t, cs, "Unknown")
			if tt.readyAgain {
				// Ready again from AfterNode's second look on.
				var lists atomic.Int32
				cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					if lists.Add(1) == 2 {
						n := node("n1", "10.0.0.1", "True", 0)
						n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
						n.Spec.Unschedulable = true
						n.Annotations = map[string]string{AnnotationCordoned: "true"}
						if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), &n, ""); err != nil {
							t.Error(err)
						}
					}
					return false, nil, nil
				})
			}
			if err := h.AfterNode(ctx, "10.0.0.1", steps); err != nil {
				t.Fatal(err)
			}
			got, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if got.Spec.Unschedulable != tt.unschedulable {
				t.Errorf("unschedulable %v, want %v", got.Spec.Unschedulable, tt.unschedulable)
			}
			last := said[len(said)-1]
			if !strings.HasPrefix(last, tt.said) || (last == tt.said) == strings.HasSuffix(tt.said, " ") {
				t.Errorf("progress %q, want %q", said, tt.said)
			}
			// The wait says what the Node's Ready condition was.
			if want := "; it was Unknown: NodeStatusUnknown Kubelet stopped posting node status.)"; tt.readyAgain && !strings.HasSuffix(said[len(said)-2], want) {
				t.Errorf("progress %q, want the Ready again line to end %q", said, want)
			}
		})
	}
}

// TestAfterNodeNotReadyPods: the error of a Node that stays NotReady names
// the pods on it that are not ready (a network plugin that cannot start),
// with what they restarted or wait for, not those that are ready or on
// other Nodes; and says when no pod is on it.
func TestAfterNodeNotReadyPods(t *testing.T) {
	pod := func(name, node string, restarts int32, waiting string, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Spec: corev1.PodSpec{NodeName: node}}
		p.Status.Phase = corev1.PodPending
		cs := corev1.ContainerStatus{Name: "c", RestartCount: restarts}
		if waiting != "" {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waiting, Message: "back-off 20s\nrestarting"}
		}
		if restarts > 0 {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
		}
		if ready {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return p
	}
	for _, tt := range []struct {
		name string
		pods []runtime.Object
		want string
	}{
		{"pods", []runtime.Object{pod("kube-flannel-a", "n2", 2, "CrashLoopBackOff", false), pod("coredns-b", "n2", 0, "", true),
			pod("metrics-d", "n2", 0, "ContainerCreating", false), pod("kube-flannel-c", "n1", 3, "CrashLoopBackOff", false)},
			"(Ready: False); the next apply checks it again; on the Node: " +
				"Pod kube-system/kube-flannel-a on n2: container c restarted 2 time(s), last exit 1 (Error) at 00:00:00Z; waiting: CrashLoopBackOff: back-off 20s restarting; " +
				"Pod kube-system/metrics-d on n2: Pending; container c waiting: ContainerCreating: back-off 20s restarting"},
		{"no pods", []runtime.Object{pod("kube-flannel-c", "n1", 3, "CrashLoopBackOff", false)},
			"(Ready: False); the next apply checks it again; on the Node: no pods"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n2 := node("n2", "10.0.0.2", "False", 0)
			err := joinNotReady(t, Config{Client: fake.NewClientset(append([]runtime.Object{&n2}, tt.pods...)...), ReadyTimeout: time.Second})
			if !strings.HasSuffix(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to end with:\n%s", err, tt.want)
			}
		})
	}
}

// joinNotReady runs the hooks of cfg (with machines()) around a kubelet
// created on 10.0.0.2 whose Node does not become Ready, and returns
// AfterNode's NotReadyError.
func joinNotReady(t *testing.T, cfg Config) error {
	t.Helper()
	steps := []plan.Step{{Node: "10.0.0.2", Component: desired.Kubelet, Action: plan.Create, Phase: plan.PhaseWorker}}
	cfg.Machines = machines()
	h := NewHooks(cfg, &plan.Plan{Steps: steps})
	ctx := context.Background()
	if err := h.BeforeNode(ctx, "10.0.0.2", steps); err != nil {
		t.Fatal(err)
	}
	err := h.AfterNode(ctx, "10.0.0.2", steps)
	var nr *NotReadyError
	if !errors.As(err, &nr) {
		t.Fatalf("AfterNode = %v, want a NotReadyError", err)
	}
	return err
}
