package kubenode

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/spec"
)

// TestDrainHeldByBudget: an eviction a PodDisruptionBudget refuses is
// reported once, at once, and counted until the pod goes; the drain then
// finishes, naming the pod gone last.
func TestDrainHeldByBudget(t *testing.T) {
	defer func(d time.Duration) { evictRetry = d }(evictRetry)
	evictRetry = 10 * time.Millisecond
	n1 := node("n1", "10.0.0.1", "True", 0)
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "app",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u", Controller: new(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	cs := fake.NewClientset(&n1, web)
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"}}}}
	refusals := 3
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		if refusals > 0 {
			refusals--
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget web needs 2 healthy pods and has 2 currently"}}
			return true, nil, err
		}
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "app", "web-1")
	})
	var told []string
	got, err := Drain(context.Background(), cs, "n1", spec.NodeDrainInput{Timeout: 30}, nil, func(pod string, err error) {
		told = append(told, pod+": "+err.Error())
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Evicted != 1 || got.Held["app/web-1"] != 3 || got.Last != "app/web-1" || got.Gone < 3*evictRetry {
		t.Errorf("drained %+v, want 1 evicted after 3 refusals of app/web-1, the last gone", got)
	}
	if len(told) != 1 || !strings.Contains(told[0], "app/web-1: Cannot evict pod") || !strings.Contains(told[0], "The disruption budget web needs 2 healthy pods") {
		t.Errorf("told %q, want the first refusal alone", told)
	}
	if want := "app/web-1 3 time(s)"; !strings.Contains(got.DescribeHeld(), want) {
		t.Errorf("DescribeHeld() = %q, want it to say %q", got.DescribeHeld(), want)
	}
}
