package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
)

// holdDrain makes the next apply's drains meet a PodDisruptionBudget that
// holds one back: the Deployment held in upgrade-load runs two pods
// (spread over the nodes) behind a budget of two available, so that no eviction of them
// passes, until the apply says that a drain waits for it; then the test
// scales held to three, the budget allows one eviction and the drain goes
// on. The check it returns, called after the apply, fails unless the apply
// reported the wait, and the drain its refusals.
func holdDrain(ctx context.Context, t *testing.T, a *rt.Applier, cs kubernetes.Interface) (check func()) {
	t.Helper()
	const ns, name = "upgrade-load", "held"
	labels := map[string]string{"app": name}
	grace := int64(5)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
					Containers: []corev1.Container{{
						Name: "sleep", Image: sandbox.ToolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/bin/busybox", "sh", "-c", "trap 'exit 0' TERM; while :; do /bin/busybox sleep 1; done"},
					}},
				},
			},
		},
	}
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = scale(ctx, cs, ns, name, 2)
	}
	if err != nil {
		t.Fatal(err)
	}
	all := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &all, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The budget must have seen both pods and no third: else the first
	// eviction passes.
	rt.Eventually(ctx, t, 2*time.Minute, "the held Deployment's two pods ready and its budget allowing no eviction", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		b, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 2 && b.Status.ObservedGeneration == b.Generation &&
			b.Status.CurrentHealthy == 2 && b.Status.DisruptionsAllowed == 0, nil
	})
	var (
		once   sync.Once
		scaled error
		waited bool
	)
	a.Watch = func(node, msg string) {
		if strings.Contains(msg, "waits for its PodDisruptionBudget") && strings.Contains(msg, ns+"/"+name+"-") {
			once.Do(func() {
				waited = true
				scaled = scale(ctx, cs, ns, name, 3)
			})
		}
	}
	return func() {
		t.Helper()
		a.Watch = nil
		if !waited || scaled != nil {
			t.Errorf("no drain said it waited for the held pods' PodDisruptionBudget (scaled: %v):\n%s", scaled, strings.Join(a.Events(), "\n"))
			return
		}
		if !slices.ContainsFunc(a.Events(), func(l string) bool {
			return strings.Contains(l, "drained Node") && strings.Contains(l, "evictions refused by a PodDisruptionBudget") && strings.Contains(l, ns+"/"+name+"-")
		}) {
			t.Errorf("no drain reported the refusals of the held pods' evictions:\n%s", strings.Join(a.Events(), "\n"))
		}
	}
}

// scale sets the replicas of Deployment ns/name.
func scale(ctx context.Context, cs kubernetes.Interface, ns, name string, replicas int32) error {
	s, err := cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.Replicas = replicas
	_, err = cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
	return err
}
