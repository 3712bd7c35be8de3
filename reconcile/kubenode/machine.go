package kubenode

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// Machine is a node of cluster.yml as the Kubernetes side sees it.
type Machine struct {
	// Address is the node's address in cluster.yml, its identity.
	Address string
	// Hostname is the name its kubelet registers (hostname_override).
	Hostname string
	Roles    []string
	// Labels and Taints are those cluster.yml gives the node.
	Labels map[string]string
	Taints []spec.Taint
}

// Machines are the nodes of c, in cluster.yml order.
func Machines(c *spec.Cluster) []Machine {
	out := make([]Machine, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		out = append(out, Machine{
			Address: n.Address, Hostname: n.HostnameOverride, Roles: slices.Clone(n.Role),
			Labels: maps.Clone(n.Labels), Taints: slices.Clone(n.Taints),
		})
	}
	return out
}

// Link links the Nodes to the machines (observe.Link).
func Link(machines []Machine, nodes []corev1.Node) *observe.Linkage {
	refs := make([]observe.Machine, len(machines))
	for i, m := range machines {
		refs[i] = observe.Machine{Address: m.Address, Hostname: m.Hostname}
	}
	return observe.Link(refs, nodes)
}
