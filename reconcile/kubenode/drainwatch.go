package kubenode

import (
	"context"
	"errors"
	"fmt"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
)

// evictionsWatched is a client whose evictions (policy/v1, which every
// Kubernetes rigger runs serves) report each refusal a PodDisruptionBudget
// makes (429 Too Many Requests) to refused, with the pod's namespace and
// name: kubectl's drain only prints them.
type evictionsWatched struct {
	kubernetes.Interface
	refused func(namespace, pod string, err error)
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
