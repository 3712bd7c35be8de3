package kubenode

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

const (
	noNetworkMessage = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is not ready: cni config uninitialized"
	networkSelector  = "rigger.io/addon=rke-network-plugin"
)

// notReadyNode is a Node whose kubelet reports it NotReady with message.
func notReadyNode(name, address, message string) *corev1.Node {
	n := node(name, address, "False", 0)
	n.Status.Conditions[0].Reason, n.Status.Conditions[0].Message = "KubeletNotReady", message
	return &n
}

// networkObjects are the network plugin's DaemonSet and its pod on n2,
// ready when ready.
func networkObjects(ready bool) []runtime.Object {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel", Namespace: "kube-system", Labels: map[string]string{"rigger.io/addon": "rke-network-plugin"}},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "flannel"}}},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-2", Namespace: "kube-system", UID: "uid-2", Labels: map[string]string{"app": "flannel"}},
		Spec:       corev1.PodSpec{NodeName: "n2", HostNetwork: true},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
	return []runtime.Object{ds, pod}
}

// setReady makes the Node name Ready, as its kubelet would.
func setReady(cs *fake.Clientset, name string) {
	n, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", name)
	if err != nil {
		panic(err)
	}
	node := n.(*corev1.Node).DeepCopy()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now()}}
	if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, ""); err != nil {
		panic(err)
	}
}

// TestRepairNodes: a Node of a machine that answers and has no pod network
// while the network plugin's pod there is ready gets that pod recreated
// (after NetworkGrace) and is waited for, then uncordoned when an earlier
// apply left it cordoned; a Node NotReady for another reason, or whose
// plugin pod is still starting, keeps its pods, and one that stays
// NotReady is an error naming it and its condition; a machine that did not
// answer is not waited for. synctest's clock: NetworkGrace and the waits
// take no real time.
func TestRepairNodes(t *testing.T) {
	tests := []struct {
		name     string
		message  string
		podReady bool
		down     []string
		// kubeletHeals makes the Node Ready once the plugin's pod is deleted.
		kubeletHeals bool
		wantDeleted  bool
		wantErr      string
	}{
		{name: "no network, plugin pod ready: recreated", message: noNetworkMessage, podReady: true, kubeletHeals: true, wantDeleted: true},
		{name: "no network, plugin pod still starting: waited for", message: noNetworkMessage, podReady: false,
			wantErr: "node 10.0.0.2 answers, but its Node n2 is not Ready after 2m0s (False: KubeletNotReady container runtime network not ready"},
		{name: "NotReady for another reason: not the network's to repair", message: "PLEG is not healthy: pleg was last seen active 3m0s ago", podReady: true,
			wantErr: "(False: KubeletNotReady PLEG is not healthy"},
		{name: "a machine that did not answer is not waited for", message: noNetworkMessage, podReady: true, down: []string{"10.0.0.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				n1 := node("n1", "10.0.0.1", "True", 0)
				n2 := notReadyNode("n2", "10.0.0.2", tt.message)
				n2.Spec.Unschedulable = true
				n2.Annotations = map[string]string{AnnotationCordoned: "true"}
				cs := fake.NewClientset(append(networkObjects(tt.podReady), &n1, n2)...)
				var mu sync.Mutex
				var deleted []string
				cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					mu.Lock()
					deleted = append(deleted, a.(k8stesting.DeleteAction).GetName())
					mu.Unlock()
					if tt.kubeletHeals {
						setReady(cs, "n2")
					}
					return false, nil, nil
				})
				var said []string
				r, err := Reconcile(ctx, cs, machines()[:2], ReconcileOptions{
					Down: tt.down, NetworkPlugin: networkSelector,
					Say: func(node, msg string) { mu.Lock(); said = append(said, node+": "+msg); mu.Unlock() },
				})
				if got := len(deleted) > 0; got != tt.wantDeleted {
					t.Errorf("plugin pod deleted: %v, want %v (%v)", got, tt.wantDeleted, deleted)
				}
				switch {
				case tt.wantErr == "" && err != nil:
					t.Fatalf("Reconcile: %v", err)
				case tt.wantErr != "":
					var nw *NotWorkingError
					if !errors.As(err, &nw) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("Reconcile: %v\nwant a NotWorkingError with %q", err, tt.wantErr)
					}
					return
				}
				if tt.wantDeleted {
					if !slices.Equal(r.Uncordoned, []string{"n2"}) {
						t.Errorf("uncordoned %v, want [n2]; said %q", r.Uncordoned, said)
					}
					if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "the pod is recreated") }) {
						t.Errorf("progress does not say the pod was recreated: %q", said)
					}
					if _, err := cs.CoreV1().Pods("kube-system").Get(ctx, "kube-flannel-2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Errorf("the plugin pod is still there: %v", err)
					}
				}
			})
		})
	}
}

// TestChangesRepair: plan and status show a Node of a machine that answers
// and is not Ready as a change to make, naming its condition, and not one
// of a machine that did not answer.
func TestChangesRepair(t *testing.T) {
	n1 := node("n1", "10.0.0.1", "True", 0)
	n2 := notReadyNode("n2", "10.0.0.2", noNetworkMessage)
	ms := machines()[:2]
	for _, n := range []*corev1.Node{&n1, n2} {
		n.Labels, n.Annotations = nil, nil
		want, taints := Wanted(ms[slices.IndexFunc(ms, func(m Machine) bool { return m.Hostname == n.Name })])
		n.Labels, n.Spec.Taints = want, taints
	}
	l := Link(ms, []corev1.Node{n1, *n2})
	got := Changes(ms, &observe.Kubernetes{Link: l}, spec.StaleNodesReport, nil)
	var repairs []Pending
	for _, p := range got {
		if strings.HasPrefix(p.Change, "repair:") {
			repairs = append(repairs, p)
		}
	}
	if len(repairs) != 1 || repairs[0].Node != "10.0.0.2" || !strings.Contains(repairs[0].Change, "cni config uninitialized") ||
		!strings.Contains(repairs[0].Change, "recreate the network plugin's pod") {
		t.Errorf("repairs %+v; want one for 10.0.0.2 that names its condition", repairs)
	}
	for _, p := range Changes(ms, &observe.Kubernetes{Link: l}, spec.StaleNodesReport, []string{"10.0.0.2"}) {
		if strings.HasPrefix(p.Change, "repair:") {
			t.Errorf("a machine that did not answer: %+v", p)
		}
	}
	// A Ready Node with the network plugin's pod of an earlier Node of its
	// name: the plan says the apply recreates it.
	n1.Spec.PodCIDR = "10.42.7.0/24"
	k := &observe.Kubernetes{Link: Link(ms, []corev1.Node{n1}), StalePods: map[string][]string{"n1": {"kube-system/kube-flannel-1"}}}
	repairs = nil
	for _, p := range Changes(ms, k, spec.StaleNodesReport, nil) {
		if p.Action == PendingRepair {
			repairs = append(repairs, p)
		}
	}
	if len(repairs) != 1 || repairs[0].Node != "10.0.0.1" ||
		!strings.Contains(repairs[0].Change, "kube-system/kube-flannel-1 was made for an earlier Node") || !strings.Contains(repairs[0].Change, "10.42.7.0/24") {
		t.Errorf("repairs %+v; want the stale pod's on 10.0.0.1", repairs)
	}
	n1.Spec.PodCIDR = "" // not assigned yet
	k.Link = Link(ms, []corev1.Node{n1})
	for _, p := range Changes(ms, k, spec.StaleNodesReport, nil) {
		if p.Action == PendingRepair && !strings.HasSuffix(p.Change, "follows the Node made again (no pod subnet assigned yet)") {
			t.Errorf("a Node without a pod subnet yet: %q", p.Change)
		}
	}
	for _, p := range Changes(ms, k, spec.StaleNodesReport, []string{"10.0.0.1"}) {
		if p.Action == PendingRepair {
			t.Errorf("a machine that did not answer: %+v", p)
		}
	}
}

// TestStalePluginPods: once a Node made again (deleted, and registered
// again by its restarted kubelet) is Ready, the network plugin's pod made
// for the earlier Node of that name is recreated, once; a pod made after
// the Node, and the pods of a Node older than RecentNode, are left alone.
// TestRepairNodesReadyMadeAgain: a Node its kubelet registered again
// before the apply, Ready already, still has the network plugin's pod of
// the earlier Node: the repair recreates it without waiting for anything.
func TestRepairNodesReadyMadeAgain(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	objs := networkObjects(true)
	pod := objs[1].(*corev1.Pod)
	pod.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	n1 := node("n1", "10.0.0.1", "True", 0)
	n2 := node("n2", "10.0.0.2", "True", 0)
	n2.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
	n2.Spec.PodCIDR = "10.42.0.0/24"
	cs := fake.NewClientset(append(objs, &n1, &n2)...)
	var said []string
	if err := RepairNodes(ctx, cs, machines()[:2], ReconcileOptions{NetworkPlugin: networkSelector,
		Say: func(node, msg string) { said = append(said, node+": "+msg) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod of the earlier Node is still there: %v", err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "10.0.0.2: the network plugin's pod kube-system/kube-flannel-2 was made for an earlier Node n2") {
		t.Errorf("said %q", said)
	}
}

func TestStalePluginPods(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name        string
		nodeMade    time.Duration // before now
		podMade     time.Duration // before now
		wantDeleted bool
	}{
		{"pod of an earlier Node", time.Minute, time.Hour, true},
		{"pod of this Node", time.Hour / 2, time.Minute, false},
		{"an old Node", 2 * RecentNode, 3 * RecentNode, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := networkObjects(true)
			pod := objs[1].(*corev1.Pod)
			pod.CreationTimestamp = metav1.NewTime(now.Add(-tc.podMade))
			n2 := node("n2", "10.0.0.2", "True", 0)
			n2.CreationTimestamp = metav1.NewTime(now.Add(-tc.nodeMade))
			n2.Spec.PodCIDR = "10.42.3.0/24"
			cs := fake.NewClientset(append(objs, &n2)...)
			// The plan sees what the apply recreates.
			stale, err := StalePluginPods(context.Background(), cs, networkSelector, []corev1.Node{n2}, now.Time)
			if err != nil {
				t.Fatal(err)
			}
			if planned := len(stale["n2"]) == 1 && stale["n2"][0] == "kube-system/"+pod.Name; planned != tc.wantDeleted || len(stale) > 1 {
				t.Errorf("StalePluginPods = %v, want the pod: %v", stale, tc.wantDeleted)
			}
			var said []string
			r := newNetworkRepair(cs, networkSelector, true, func(node, msg string) { said = append(said, msg) })
			r.now = func() time.Time { return now.Time }
			for range 2 {
				r.stale(context.Background(), "10.0.0.2", &n2, time.Minute)
			}
			_, err = cs.CoreV1().Pods("kube-system").Get(context.Background(), pod.Name, metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Fatalf("deleted %v, want %v (%v)", deleted, tc.wantDeleted, err)
			}
			if tc.wantDeleted && (len(said) != 1 || !strings.Contains(said[0], "pod subnet 10.42.3.0/24")) {
				t.Errorf("said %q", said)
			}
		})
	}
}
