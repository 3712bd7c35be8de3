package kubenode

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/observe"
)

// FindSelf says whether the pod ref (rigger's own, from the downward API)
// runs in the cluster of cs, and where: nil when that cluster has no pod
// of that name and UID, which is then another cluster than the one rigger
// runs in. link maps the pod's Node to its machine.
func FindSelf(ctx context.Context, cs kubernetes.Interface, ref observe.PodRef, link *observe.Linkage) (*observe.Self, error) {
	pod, err := cs.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look for rigger's own pod %s: %w", ref, err)
	case string(pod.UID) != ref.UID:
		return nil, nil
	}
	self := &observe.Self{Pod: ref.String(), Node: pod.Spec.NodeName}
	if c := metav1.GetControllerOf(pod); c != nil {
		self.Controller = string(c.UID)
	}
	if link != nil {
		for addr, n := range link.Owned {
			if n.Name == self.Node {
				self.Address = addr
			}
		}
		// A Node of a node cluster.yml no longer declares is stale: its
		// address label still names the machine.
		for _, st := range link.Stale {
			if self.Address == "" && st.Name == self.Node {
				self.Address = st.Address
			}
		}
	}
	return self, nil
}
