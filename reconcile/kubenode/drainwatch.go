package kubenode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"

	"github.com/rigger/rigger/reconcile/observe"
)

// evictionsWatched is a client whose evictions (policy/v1, which every
// Kubernetes rigger runs serves) report each refusal a PodDisruptionBudget
// makes (429 Too Many Requests) to refused, with the pod's namespace and
// name: kubectl's drain only prints them. With self (rigger's own pod,
// in the cluster it drains), its lists of pods leave self's pod out, and
// call kept when they do: the drain does not see it, so that none of its
// filters (local storage, no controller) refuses the drain for it either.
// They show the other pods of self's controller (rigger's other replicas)
// without their emptyDir volumes: those are rigger's caches (its working
// copy of the state, its clone), made again where the pod starts, so that
// they are evicted without upgrade_strategy.node_drain_input's
// delete_local_data, which the cluster's own pods may need.
type evictionsWatched struct {
	kubernetes.Interface
	refused func(namespace, pod string, err error)
	self    *observe.Self
	kept    func()
}

func (c evictionsWatched) CoreV1() corev1client.CoreV1Interface {
	if c.self == nil {
		return c.Interface.CoreV1()
	}
	return coreSelf{c.Interface.CoreV1(), *c.self, c.kept}
}

type coreSelf struct {
	corev1client.CoreV1Interface
	self observe.Self
	kept func()
}

func (c coreSelf) Pods(namespace string) corev1client.PodInterface {
	return podsSelf{c.CoreV1Interface.Pods(namespace), c.self, c.kept}
}

type podsSelf struct {
	corev1client.PodInterface
	self observe.Self
	kept func()
}

func (p podsSelf) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	l, err := p.PodInterface.List(ctx, opts)
	if err != nil {
		return l, err
	}
	l.Items = slices.DeleteFunc(l.Items, func(pod corev1.Pod) bool {
		if pod.Namespace+"/"+pod.Name != p.self.Pod {
			return false
		}
		p.kept()
		return true
	})
	for i := range l.Items {
		pod := &l.Items[i]
		if c := metav1.GetControllerOf(pod); c != nil && p.self.Controller != "" && string(c.UID) == p.self.Controller {
			pod.Spec.Volumes = slices.DeleteFunc(slices.Clone(pod.Spec.Volumes), func(v corev1.Volume) bool { return v.EmptyDir != nil })
		}
	}
	return l, nil
}

func (c evictionsWatched) PolicyV1() policyv1client.PolicyV1Interface {
	return policyWatched{c.Interface.PolicyV1(), c.refused}
}

type policyWatched struct {
	policyv1client.PolicyV1Interface
	refused func(namespace, pod string, err error)
}

func (p policyWatched) Evictions(namespace string) policyv1client.EvictionInterface {
	return evictionWatched{p.PolicyV1Interface.Evictions(namespace), namespace, p.refused}
}

type evictionWatched struct {
	policyv1client.EvictionInterface
	namespace string
	refused   func(namespace, pod string, err error)
}

func (e evictionWatched) Evict(ctx context.Context, eviction *policyv1.Eviction) error {
	err := e.EvictionInterface.Evict(ctx, eviction)
	if apierrors.IsTooManyRequests(err) {
		e.refused(e.namespace, eviction.Name, refusal(err))
	}
	return err
}

// refusal is err with the causes the API server gives ("The disruption
// budget web needs 2 healthy pods and has 2 currently"), which its
// message leaves out.
func refusal(err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return err
	}
	var causes []string
	for _, c := range status.Status().Details.Causes {
		if c.Message != "" {
			causes = append(causes, c.Message)
		}
	}
	if len(causes) == 0 {
		return err
	}
	return fmt.Errorf("%w: %s", err, strings.Join(causes, "; "))
}
