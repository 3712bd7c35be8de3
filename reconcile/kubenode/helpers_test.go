package kubenode

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/spec"
)

// node is a Node named name, labelled with address (none when ""), with
// the Ready condition ready ("" for none), created at minute created.
func node(name, address, ready string, created int) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, created, 0, 0, time.UTC))}}
	if address != "" {
		n.Labels[desired.NodeAddressLabel] = desired.NodeAddressLabelValue(address)
	}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionStatus(ready)}}
	}
	return n
}

func machines() []Machine {
	return []Machine{
		{Address: "10.0.0.1", Hostname: "n1", Roles: []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}},
		{Address: "10.0.0.2", Hostname: "n2", Roles: []string{spec.RoleWorker}},
		{Address: "fd00::3", Hostname: "n3", Roles: []string{spec.RoleWorker}},
	}
}
