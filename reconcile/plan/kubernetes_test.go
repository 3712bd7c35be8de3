package plan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
)

// kubeNode is a Node of the machine at address, labelled with it, Ready
// or not.
func kubeNode(name, address string, ready corev1.ConditionStatus) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{desired.NodeAddressLabel: desired.NodeAddressLabelValue(address)},
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
	}
}

// withNodes adds to o what the API server lists: nodes, linked to the
// machines of d.
func withNodes(d *desired.Cluster, o *observe.Cluster, nodes ...corev1.Node) {
	var machines []observe.Machine
	for _, n := range d.Nodes {
		machines = append(machines, observe.Machine{Address: n.Address, Hostname: n.Hostname})
	}
	o.Kubernetes = &observe.Kubernetes{Nodes: nodes, Link: observe.Link(machines, nodes)}
}

// TestKubernetesNodes: the plan's decisions from the Nodes the API server
// lists.
func TestKubernetesNodes(t *testing.T) {
	d := build(t, baseYML, nil)
	tests := []struct {
		name      string
		observe   func(o *observe.Cluster)
		want      []string
		wantFirst []string
	}{
		{
			name:    "API server not asked: nothing decided",
			observe: func(o *observe.Cluster) {},
		},
		{
			name: "every Node there and Ready",
			observe: func(o *observe.Cluster) {
				withNodes(d, o, kubeNode("a", "10.0.0.1", "True"), kubeNode("b", "10.0.0.2", "True"),
					kubeNode("c", "10.0.0.3", "True"), kubeNode("d", "10.0.0.4", "True"))
			},
		},
		{
			name: "a missing Node restarts the running kubelet; NotReady nodes go first",
			observe: func(o *observe.Cluster) {
				withNodes(d, o, kubeNode("b", "10.0.0.2", "False"), kubeNode("d", "10.0.0.4", "Unknown"))
			},
			// Every node runs a kubelet: each machine without a Node
			// gets its kubelet restarted.
			want: []string{
				"worker 10.0.0.1 restart kubelet (" + ReasonNodeMissing + ")",
				"worker 10.0.0.3 restart kubelet (" + ReasonNodeMissing + ")",
			},
			wantFirst: []string{"10.0.0.2", "10.0.0.4"},
		},
		{
			name: "a kubelet that changes anyway is not restarted too",
			observe: func(o *observe.Cluster) {
				withNodes(d, o, kubeNode("a", "10.0.0.1", "True"), kubeNode("b", "10.0.0.2", "True"), kubeNode("d", "10.0.0.4", "True"))
				setState(o, "10.0.0.3", desired.Kubelet, "exited")
			},
			want: []string{"worker 10.0.0.3 restart kubelet (container exited)"},
		},
		{
			name: "a machine whose kubelet does not run gets no restart for its Node",
			observe: func(o *observe.Cluster) {
				withNodes(d, o, kubeNode("a", "10.0.0.1", "True"), kubeNode("b", "10.0.0.2", "True"), kubeNode("d", "10.0.0.4", "True"))
				delete(o.Nodes["10.0.0.3"].Containers, desired.Kubelet)
			},
			want: []string{"worker 10.0.0.3 create kubelet (container missing)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := asApplied(d)
			tt.observe(o)
			p := Compute(d, o)
			if diff := cmp.Diff(tt.want, lines(p)); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantFirst, p.First); diff != "" {
				t.Errorf("First (-want +got):\n%s", diff)
			}
			checkPointers(t, p)
		})
	}
}

// TestNewEtcd: a plan starts a new etcd cluster only when it creates every
// member.
func TestNewEtcd(t *testing.T) {
	d := build(t, baseYML, nil)
	fresh := asApplied(d)
	for _, n := range fresh.Nodes {
		n.Containers = nil
	}
	if p := Compute(d, fresh); !p.NewEtcd {
		t.Error("a fresh cluster: NewEtcd false")
	}
	one := asApplied(d)
	delete(one.Nodes["10.0.0.3"].Containers, desired.Etcd)
	if p := Compute(d, one); p.NewEtcd {
		t.Error("one member recreated beside running ones: NewEtcd true")
	}
	if p := Compute(d, asApplied(d)); p.NewEtcd {
		t.Error("nothing to create: NewEtcd true")
	}
}
