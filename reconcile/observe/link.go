package observe

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/desired"
)

// Machine is a node of cluster.yml as its Kubernetes Node is found:
// by the address label its kubelet sets, or by its hostname.
type Machine struct {
	// Address is the node's address in cluster.yml, its identity.
	Address string
	// Hostname is the name its kubelet registers (hostname_override).
	Hostname string
}

// Stale is a Node that no machine of cluster.yml owns.
type Stale struct {
	Name string `json:"name"`
	// Address is the value of its address label ("" without one).
	Address string `json:"address,omitempty"`
	// Reason says why it is stale, for people.
	Reason string `json:"reason"`
	// Ready is its Ready condition: True, False or Unknown.
	Ready string `json:"ready"`
}

// Duplicate is an address more than one Node claims.
type Duplicate struct {
	Address string `json:"address"`
	// Owner is the Node that counts as the machine's.
	Owner string `json:"owner"`
	// Others are the other Nodes with the address, by name.
	Others []string `json:"others"`
}

// Linkage ties the Nodes the API server lists to the machines of
// cluster.yml.
type Linkage struct {
	// Owned is each machine's Node, by address.
	Owned map[string]*corev1.Node
	// Adopted are the machines whose Node has no address label yet (a
	// kubelet registered before rigger labelled Nodes) and was matched by
	// name; the label sync adds the label. By address.
	Adopted []string
	// Missing are the machines with no Node, in cluster.yml order.
	Missing []string
	// Stale are the Nodes no machine owns, by name.
	Stale []Stale
	// Duplicates are the addresses claimed by more than one Node, by
	// address. The Nodes that lost are also in Stale.
	Duplicates []Duplicate
}

// Link decides which Node belongs to which machine. A machine owns the
// Node labelled with its address (desired.NodeAddressLabel); a Node
// without that label is adopted by the machine whose hostname is its
// name, when that machine has no labelled Node. Of several Nodes with one
// address, the one named as the machine's hostname wins, then a Ready one,
// then the newest. The rest are stale: no label and no machine of that
// name, an address not in cluster.yml, or the loser of a duplicate.
func Link(machines []Machine, nodes []corev1.Node) *Linkage {
	l := &Linkage{Owned: map[string]*corev1.Node{}}
	byValue := map[string]*Machine{}
	byName := map[string]*Machine{}
	for i := range machines {
		byValue[desired.NodeAddressLabelValue(machines[i].Address)] = &machines[i]
		byName[machines[i].Hostname] = &machines[i]
	}
	claims := map[string][]*corev1.Node{}
	var unlabelled []*corev1.Node
	for i := range nodes {
		n := &nodes[i]
		v, ok := n.Labels[desired.NodeAddressLabel]
		switch {
		case !ok:
			unlabelled = append(unlabelled, n)
		case byValue[v] == nil:
			l.Stale = append(l.Stale, Stale{Name: n.Name, Address: v, Ready: Ready(n),
				Reason: "its address " + v + " is not in cluster.yml"})
		default:
			claims[byValue[v].Address] = append(claims[byValue[v].Address], n)
		}
	}
	for _, m := range machines {
		c := claims[m.Address]
		if len(c) == 0 {
			continue
		}
		slices.SortStableFunc(c, func(a, b *corev1.Node) int { return better(m, a, b) })
		l.Owned[m.Address] = c[0]
		if len(c) > 1 {
			d := Duplicate{Address: m.Address, Owner: c[0].Name}
			for _, n := range c[1:] {
				d.Others = append(d.Others, n.Name)
				l.Stale = append(l.Stale, Stale{Name: n.Name, Address: n.Labels[desired.NodeAddressLabel], Ready: Ready(n),
					Reason: "another Node, " + c[0].Name + ", has the same address"})
			}
			l.Duplicates = append(l.Duplicates, d)
		}
	}
	for _, n := range unlabelled {
		m := byName[n.Name]
		if m != nil && l.Owned[m.Address] == nil {
			l.Owned[m.Address] = n
			l.Adopted = append(l.Adopted, m.Address)
			continue
		}
		reason := "no " + desired.NodeAddressLabel + " label and no node of cluster.yml has its name"
		if m != nil {
			reason = "no " + desired.NodeAddressLabel + " label, and " + l.Owned[m.Address].Name + " is the Node of " + m.Address
		}
		l.Stale = append(l.Stale, Stale{Name: n.Name, Ready: Ready(n), Reason: reason})
	}
	for _, m := range machines {
		if l.Owned[m.Address] == nil {
			l.Missing = append(l.Missing, m.Address)
		}
	}
	slices.Sort(l.Adopted)
	slices.SortFunc(l.Stale, func(a, b Stale) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(l.Duplicates, func(a, b Duplicate) int { return strings.Compare(a.Address, b.Address) })
	return l
}

// better orders the Nodes claiming machine m's address, best first.
func better(m Machine, a, b *corev1.Node) int {
	rank := func(n *corev1.Node) int {
		r := 0
		if n.Name == m.Hostname {
			r -= 2
		}
		if Ready(n) == string(corev1.ConditionTrue) {
			r--
		}
		return r
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	// The newest first.
	return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
}

// Ready is a Node's Ready condition: True, False or Unknown (also when the
// kubelet never reported one).
func Ready(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return string(corev1.ConditionUnknown)
}
