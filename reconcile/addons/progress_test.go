package addons

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// flannelPod is a network plugin pod whose container has restarted
// restarts times and is in state.
func flannelPod(restarts int32, state corev1.ContainerState) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-x", UID: "uid-1"},
		Spec:       corev1.PodSpec{NodeName: "n2"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "kube-flannel", RestartCount: restarts, State: state,
		}}},
	}
}

func backoff(msg string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: msg}}
}

var running = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}

// look is one look of a wait at a time after it began.
type look struct {
	at     time.Duration
	fp     string
	pods   []*corev1.Pod
	goesOn bool
}

// TestProgress: a wait ends once nothing moved for the timeout, measured
// from the last change; a restart back-off the kubelet announced is waited
// out; a container that keeps crashing stops extending the wait; and no
// wait outlasts maxStallFactor timeouts.
func TestProgress(t *testing.T) {
	const timeout = 45 * time.Second
	s := time.Second
	tests := []struct {
		name  string
		looks []look
	}{
		{"nothing moves", []look{
			{at: 0, fp: "a", goesOn: true},
			{at: 44 * s, fp: "a", goesOn: true},
			{at: 45 * s, fp: "a", goesOn: false},
		}},
		{"each change restarts the timeout", []look{
			{at: 0, fp: "a", goesOn: true},
			{at: 40 * s, fp: "b", goesOn: true},
			{at: 84 * s, fp: "b", goesOn: true},
			{at: 85 * s, fp: "b", goesOn: false},
		}},
		{"a restart back-off longer than the timeout is waited out", []look{
			// flannel's first API call timed out (30 s), and the kubelet
			// restarts it after 80 s: nothing else moves meanwhile.
			{at: 0, pods: []*corev1.Pod{flannelPod(3, running)}, goesOn: true},
			{at: 30 * s, pods: []*corev1.Pod{flannelPod(3, backoff("back-off 1m20s restarting failed container=kube-flannel pod=kube-flannel-x_kube-system(uid-1)"))}, goesOn: true},
			{at: 150 * s, pods: []*corev1.Pod{flannelPod(3, backoff("back-off 1m20s restarting failed container=kube-flannel pod=kube-flannel-x_kube-system(uid-1)"))}, goesOn: true},
			{at: 154 * s, pods: []*corev1.Pod{flannelPod(3, backoff("back-off 1m20s restarting failed container=kube-flannel pod=kube-flannel-x_kube-system(uid-1)"))}, goesOn: true},
			{at: 155 * s, pods: []*corev1.Pod{flannelPod(3, backoff("back-off 1m20s restarting failed container=kube-flannel pod=kube-flannel-x_kube-system(uid-1)"))}, goesOn: false},
		}},
		{"a crash loop is followed for a few restarts only", []look{
			{at: 0, pods: []*corev1.Pod{flannelPod(0, running)}, goesOn: true},
			{at: 40 * s, pods: []*corev1.Pod{flannelPod(1, running)}, goesOn: true},
			{at: 80 * s, pods: []*corev1.Pod{flannelPod(2, running)}, goesOn: true},
			{at: 120 * s, pods: []*corev1.Pod{flannelPod(3, running)}, goesOn: true},
			// From the fourth restart on it crash-loops: its restarts and
			// back-offs are no progress, and 45 s later the wait ends.
			{at: 160 * s, pods: []*corev1.Pod{flannelPod(4, running)}, goesOn: true},
			{at: 180 * s, pods: []*corev1.Pod{flannelPod(5, backoff("back-off 5m0s restarting failed container=kube-flannel"))}, goesOn: true},
			{at: 200 * s, pods: []*corev1.Pod{flannelPod(6, running)}, goesOn: true},
			{at: 205 * s, pods: []*corev1.Pod{flannelPod(6, backoff("back-off 5m0s restarting failed container=kube-flannel"))}, goesOn: false},
		}},
		{"an image that cannot be pulled is no progress", []look{
			{at: 0, pods: []*corev1.Pod{flannelPod(0, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})}, goesOn: true},
			{at: 5 * s, pods: []*corev1.Pod{flannelPod(0, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}})}, goesOn: true},
			{at: 20 * s, pods: []*corev1.Pod{flannelPod(0, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}})}, goesOn: true},
			{at: 40 * s, pods: []*corev1.Pod{flannelPod(0, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}})}, goesOn: true},
			{at: 50 * s, pods: []*corev1.Pod{flannelPod(0, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}})}, goesOn: false},
		}},
		{"no wait outlasts maxStallFactor timeouts", []look{
			{at: 0, fp: "0", goesOn: true},
			{at: 440 * s, fp: "1", goesOn: true},
			{at: 449 * s, fp: "2", goesOn: true},
			{at: 450 * s, fp: "3", goesOn: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
			p := newProgress(began, timeout)
			for _, l := range tt.looks {
				now := began.Add(l.at)
				var fp strings.Builder
				fp.WriteString(l.fp)
				p.pods(now, &fp, l.pods)
				if got := p.seen(now, fp.String()); got != l.goesOn {
					t.Fatalf("at %s: the wait goes on: %v, want %v (last change %s, back-off until %s)",
						l.at, got, l.goesOn, p.lastAt.Sub(began), p.backoffUntil.Sub(began))
				}
			}
		})
	}
}

func TestAnnouncedBackoff(t *testing.T) {
	for msg, want := range map[string]time.Duration{
		"back-off 10s restarting failed container=kube-flannel pod=x": 10 * time.Second,
		"back-off 2m40s restarting failed container=c pod=x":          160 * time.Second,
		"Back-off pulling image":                                      0,
		"":                                                            0,
	} {
		got, ok := announcedBackoff(msg)
		if got != want || ok != (want > 0) {
			t.Errorf("announcedBackoff(%q) = %s, %v; want %s", msg, got, ok, want)
		}
	}
}

// TestWaitNodesFollowsProgress: a Node that takes several timeouts to get
// Ready, moving all the while (NotReady without a network, then Ready
// without flannel's lease, then with it), is waited for; one that stops
// moving fails the wait, naming it and how long nothing moved. The clock
// is synctest's: each poll is 10 s apart, the timeout 30 s.
func TestWaitNodesFollowsProgress(t *testing.T) {
	states := []struct{ ready, message, ann string }{
		{"False", "container runtime network not ready: cni config uninitialized", ""},
		{"False", "PLEG is not healthy", ""},
		{"True", "kubelet is posting ready status", ""},
		{"True", "kubelet is posting ready status", "10.231.0.12"},
	}
	for _, stuck := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nodes: "NodeList", pods: "PodList"})
			dyn.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				// Each state is seen for two polls (20 s): the walk (60 s)
				// is longer than the timeout.
				i := min(int(calls.Add(1)-1)/2, len(states)-1)
				if stuck {
					i = min(i, 1)
				}
				st := states[i]
				n := unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "v1", "kind": "Node",
					"metadata": map[string]any{"name": "n2", "annotations": map[string]any{"net": st.ann}},
					"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": st.ready,
						"reason": "KubeletNotReady", "message": st.message}}},
				}}
				return true, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "NodeList"}, Items: []unstructured.Unstructured{n}}, nil
			})
			e := New(dyn, newStaticMapper(), Options{ReadyTimeout: 30 * time.Second, PollInterval: 10 * time.Second})
			began := time.Now()
			err := e.waitNodes(context.Background(), "net", func(n *unstructured.Unstructured) string {
				if n.GetAnnotations()["net"] == "" {
					return "no lease"
				}
				return ""
			}, nil)
			var nr *NotReadyError
			switch {
			case !stuck && err != nil:
				t.Fatalf("a Node that moves: %v", err)
			case !stuck && time.Since(began) <= 30*time.Second:
				t.Fatalf("the walk took %s, not longer than the timeout: the test shows nothing", time.Since(began))
			case stuck && (!errors.As(err, &nr) || nr.Object.Name != "n2" || !strings.Contains(nr.Error(), "PLEG is not healthy") ||
				!strings.Contains(nr.Error(), "nothing moved in the last 30s")):
				t.Fatalf("a Node that stops moving: %v; want a NotReadyError naming n2, its condition and how long nothing moved", err)
			}
		})
	}
}
