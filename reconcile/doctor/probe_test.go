package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/observe"
)

func readyNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "linux"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

func probePod(ds *appsv1.DaemonSet, node string, phase corev1.PodPhase, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + node, Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
	}
}

// TestProbeDaemonSet: the probe runs the pause image on every node,
// tainted or not, without a token or privilege, and its selector picks
// its own pods only.
func TestProbeDaemonSet(t *testing.T) {
	a, b := probeDaemonSet("rancher/mirrored-pause:3.7"), probeDaemonSet("rancher/mirrored-pause:3.7")
	if a.Name == b.Name || !strings.HasPrefix(a.Name, "rigger-doctor-probe-") {
		t.Errorf("names %s %s: want a new one each run", a.Name, b.Name)
	}
	spec := a.Spec.Template.Spec
	if spec.Containers[0].Image != "rancher/mirrored-pause:3.7" || spec.HostNetwork || *spec.AutomountServiceAccountToken ||
		len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("%+v", spec)
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Spec.Selector)
	if err != nil || sel.Matches(labels.Set(b.Spec.Template.Labels)) || !sel.Matches(labels.Set(a.Spec.Template.Labels)) {
		t.Errorf("selector %v: %v", sel, err)
	}
}

// TestWaitProbePods: the wait ends once every Ready Node has a running
// probe pod with an address; NotReady Nodes, Nodes whose engine did not
// answer and Windows Nodes are not waited for.
func TestWaitProbePods(t *testing.T) {
	ds := probeDaemonSet("pause")
	ds.Namespace = metav1.NamespaceSystem
	cs := fake.NewClientset(
		probePod(ds, "n1", corev1.PodRunning, "10.42.0.5"),
		probePod(ds, "n2", corev1.PodRunning, "10.42.1.5"),
		probePod(ds, "n3", corev1.PodPending, ""),
		probePod(probeDaemonSet("pause"), "n3", corev1.PodRunning, "10.42.2.9"), // another run's
	)
	windows := readyNode("n5", corev1.ConditionTrue)
	windows.Labels[corev1.LabelOSStable] = "windows"
	r := &walker{o: &observe.Cluster{
		Kubernetes: &observe.Kubernetes{Link: &observe.Linkage{Owned: map[string]*corev1.Node{
			"10.0.0.1": readyNode("n1", corev1.ConditionTrue),
			"10.0.0.2": readyNode("n2", corev1.ConditionTrue),
			"10.0.0.3": readyNode("n3", corev1.ConditionFalse),
			"10.0.0.4": readyNode("n4", corev1.ConditionTrue), // Ready still, but its engine is down
			"10.0.0.5": windows,
		}}},
		Nodes: map[string]*observe.Node{
			"10.0.0.1": {Reachable: true}, "10.0.0.2": {Reachable: true}, "10.0.0.3": {Reachable: true}, "10.0.0.4": {}, "10.0.0.5": {Reachable: true},
		},
	}}
	pods, missing, err := r.waitProbePods(context.Background(), cs, ds)
	if err != nil || len(missing) != 0 || len(pods) != 2 || pods["n1"].Status.PodIP != "10.42.0.5" || pods["n2"].Status.PodIP != "10.42.1.5" {
		t.Errorf("pods %v, missing %v, %v", pods, missing, err)
	}
}

// TestProbeWaiting: why a Node's probe pod does not run, as the pod says.
func TestProbeWaiting(t *testing.T) {
	ds := probeDaemonSet("pause")
	creating := probePod(ds, "n2", corev1.PodPending, "")
	creating.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ContainerCreating", Message: ""}}}}
	sandbox := probePod(ds, "n3", corev1.PodPending, "")
	sandbox.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse,
		Reason: "SandboxFailed", Message: `failed to set up sandbox: plugin type="flannel" failed: open /run/flannel/subnet.env: no such file or directory`}}
	pods := []corev1.Pod{*creating, *sandbox}
	for node, want := range map[string]string{
		"n2": "waiting: ContainerCreating",
		"n3": "/run/flannel/subnet.env",
		"n4": "no probe pod made for it",
	} {
		if got := probeWaiting(pods, node); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", node, got, want)
		}
	}
}

// TestNodeWatchSaw: an update is the doing of the managers whose last
// write moved; the initial ADDED events are not updates.
func TestNodeWatchSaw(t *testing.T) {
	at := func(sec int) *metav1.Time { tm := metav1.NewTime(time.Unix(int64(1000+sec), 0)); return &tm }
	node := func(fields ...metav1.ManagedFieldsEntry) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: fields}}
	}
	w := &nodeWatch{updates: map[string]*NodeUpdates{}, last: map[string]map[string]time.Time{}}
	w.saw("ADDED", node(metav1.ManagedFieldsEntry{Manager: "kubelet", Time: at(0)}, metav1.ManagedFieldsEntry{Manager: "a", Time: at(0)}))
	w.saw("MODIFIED", node(metav1.ManagedFieldsEntry{Manager: "kubelet", Time: at(0)}, metav1.ManagedFieldsEntry{Manager: "a", Time: at(1)}))
	w.saw("MODIFIED", node(metav1.ManagedFieldsEntry{Manager: "kubelet", Time: at(0)}, metav1.ManagedFieldsEntry{Manager: "a", Time: at(1)}, metav1.ManagedFieldsEntry{Manager: "b", Time: at(1)}))
	// Within the same second: nobody's time moved, the newest are named.
	w.saw("MODIFIED", node(metav1.ManagedFieldsEntry{Manager: "kubelet", Time: at(0)}, metav1.ManagedFieldsEntry{Manager: "a", Time: at(1)}, metav1.ManagedFieldsEntry{Manager: "b", Time: at(1)}))
	u := w.updates["n1"]
	if u == nil || u.Count != 3 || u.Managers["a"] != 2 || u.Managers["b"] != 2 || u.Managers["kubelet"] != 0 {
		t.Errorf("%+v", u)
	}
}

// TestWatchNodesWindowAfterAnswer: the window in which the updates are
// counted starts once the API server has answered the watch, not when it
// was asked: a loaded API server's slow answer must not shorten it.
func TestWatchNodesWindowAfterAnswer(t *testing.T) {
	cs := fake.NewClientset()
	fw := watch.NewFake()
	var answered time.Time
	cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		answered = time.Now() // however late the API server answers, the window begins after
		return true, fw, nil
	})
	r := &walker{o: &observe.Cluster{Kubernetes: &observe.Kubernetes{}}, rd: &Reads{Kube: func() (kubernetes.Interface, error) { return cs, nil }}}
	w := r.watchNodes(context.Background())
	if w == nil {
		t.Fatal("no watch")
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	fw.Add(n)
	for range 4 {
		fw.Modify(n)
	}
	<-w.done
	if w.began.Before(answered) || w.ended.Sub(w.began) < nodeWatchWindow {
		t.Errorf("window %s from %s, answered at %s", w.ended.Sub(w.began), w.began, answered)
	}
	if u := w.updates["n1"]; u == nil || u.Count != 4 {
		t.Errorf("updates %+v", u)
	}
}
