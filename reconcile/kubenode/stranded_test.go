package kubenode

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/observe"
)

// TestStrandedPods: on a Node made again with another pod subnet, a pod
// left with an address of the old one is listed for the plan and, once
// the network plugin's pod there is the Node's and ready, deleted when a
// controller makes it again; a pod without a controller is said, not
// deleted; pods inside the subnet, on the host's network or without an
// address stay. A plugin's pod of the old Node is recreated and its new
// one waited for first: one apply leaves no pod stranded; while none is
// made, nothing is deleted, and that is said. Nothing is done with a
// plugin that does not give pods their Node's addresses. synctest's clock:
// the wait takes no real time.
func TestStrandedPods(t *testing.T) {
	now := metav1.Now()
	n2 := node("n2", "10.0.0.2", "True", 0)
	n2.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
	n2.Spec.PodCIDR, n2.Spec.PodCIDRs = "10.42.3.0/24", []string{"10.42.3.0/24"}
	pod := func(name, ip string, owned bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs", UID: "rs", Controller: new(true)}}
		}
		return p
	}
	hostNet := pod("host", "10.0.0.2", true)
	hostNet.Spec.HostNetwork = true
	// Made after the Node, not started yet; and one running since
	// before it, whose address its kubelet, restarted, has not said again.
	starting := pod("starting", "", true)
	starting.CreationTimestamp, starting.Status.Phase = now, corev1.PodPending
	unsaid := pod("unsaid", "", true)
	unsaid.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	apps := []runtime.Object{pod("old", "10.42.2.5", true), pod("naked", "10.42.2.6", false), pod("new", "10.42.3.7", true),
		starting, unsaid, pod("v6", "fd00::5", true), hostNet}

	for _, tc := range []struct {
		name       string
		pluginMade time.Duration // before now
		remade     bool          // its DaemonSet makes the plugin's pod again once deleted
		subnets    bool          // the plugin follows the Node's subnet
		done       bool          // the apply recreated it already, while it waited for the Node (check)
		want       bool          // old deleted
	}{
		{"the plugin's pod the Node's", time.Second * 30, false, true, false, true},
		{"the plugin's pod the earlier Node's: recreated, and waited for", time.Hour, true, true, false, true},
		{"the plugin's pod recreated by this apply while the Node had no network", time.Second * 30, false, true, true, true},
		{"the plugin's pod the earlier Node's, not made again", time.Hour, false, true, false, false},
		{"a plugin with its own address management (calico)", time.Second * 30, false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				objs := networkObjects(true)
				plugin := objs[1].(*corev1.Pod)
				plugin.CreationTimestamp = metav1.NewTime(now.Add(-tc.pluginMade))
				for _, o := range apps {
					objs = append(objs, o.DeepCopyObject())
				}
				cs := fake.NewClientset(append(objs, &n2)...)
				cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if a.(k8stesting.DeleteAction).GetName() == plugin.Name && tc.remade {
						// Made at once, ready 5 s later.
						again := plugin.DeepCopy()
						again.Name, again.UID, again.CreationTimestamp = "kube-flannel-3", "uid-3", now
						again.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
						if err := cs.Tracker().Add(again); err != nil {
							t.Error(err)
						}
						go func() {
							time.Sleep(5 * time.Second)
							ready := again.DeepCopy()
							ready.Status.Conditions[0].Status = corev1.ConditionTrue
							if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), ready, ready.Namespace); err != nil {
								t.Error(err)
							}
						}()
					}
					return false, nil, nil
				})
				planned, err := StrandedPods(context.Background(), cs, []corev1.Node{n2}, now.Time)
				if err != nil {
					t.Fatal(err)
				}
				unknown := "unknown, of the earlier Node's subnet (its kubelet has not said it again; the pod runs since before the Node was made)"
				if got := planned["n2"]; !slices.Equal(got, []string{"app/naked (10.42.2.6)", "app/old (10.42.2.5)", "app/unsaid (" + unknown + ")"}) || len(planned) != 1 {
					t.Errorf("StrandedPods = %v, want app/naked, app/old and app/unsaid on n2", planned)
				}
				var said []string
				r := newNetworkRepair(cs, networkSelector, tc.subnets, func(node, msg string) { said = append(said, msg) })
				r.now = func() time.Time { return now.Time }
				r.done["n2"] = tc.done
				r.stale(context.Background(), "10.0.0.2", &n2, time.Minute)
				for _, name := range []string{"old", "unsaid", "naked", "new", "starting", "v6", "host"} {
					_, err := cs.CoreV1().Pods("app").Get(context.Background(), name, metav1.GetOptions{})
					if deleted := apierrors.IsNotFound(err); deleted != (tc.want && (name == "old" || name == "unsaid")) {
						t.Errorf("pod %s deleted: %v", name, deleted)
					}
				}
				all := strings.Join(said, "\n")
				if !tc.want {
					if tc.subnets && !strings.Contains(all, "is not ready after 1m0s (no pod): the pods outside the Node's pod subnet 10.42.3.0/24 are left") {
						t.Errorf("said:\n%s", all)
					}
					return
				}
				if !strings.Contains(all, "pod app/old had address 10.42.2.5, outside Node n2's pod subnet 10.42.3.0/24") ||
					!strings.Contains(all, "pod app/unsaid had address "+unknown+", outside") ||
					!strings.Contains(all, "pod app/naked has address 10.42.2.6") || !strings.Contains(all, "no controller") {
					t.Errorf("said:\n%s", all)
				}
			})
		})
	}
	// The plan says it.
	k := &observe.Kubernetes{Link: Link([]Machine{{Address: "10.0.0.2", Hostname: "n2"}}, []corev1.Node{n2}),
		StrandedPods: map[string][]string{"n2": {"app/old (10.42.2.5)"}}}
	changes := Changes([]Machine{{Address: "10.0.0.2", Hostname: "n2"}}, k, "", nil)
	if !slices.ContainsFunc(changes, func(p Pending) bool {
		return p.Action == PendingRepair && strings.Contains(p.Change, "pods outside the Node's pod subnet 10.42.3.0/24") && strings.Contains(p.Change, "app/old (10.42.2.5)")
	}) {
		t.Errorf("Changes = %+v, want the stranded pod's repair", changes)
	}
}
