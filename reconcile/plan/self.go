package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/stall"
)

// CheckSelfRemoval refuses a plan that removes the node rigger itself
// runs on (k.Self: rigger serve deployed into the cluster it reconciles):
// the removal drains and deletes the node's Node, which would stop rigger
// half-way through it, and no other rigger would know to finish it. When
// rigger runs in some cluster but could not tell whether it is this one
// (k.SelfErr), a plan that removes nodes is refused too, to be tried
// again. Nil when the plan removes no node rigger may run on.
func CheckSelfRemoval(p *Plan, k *observe.Kubernetes) error {
	removed := removedNodes(p)
	if len(removed) == 0 || k == nil {
		return nil
	}
	if k.Self == nil && k.SelfErr != nil {
		return stall.Retries(stall.Failed, fmt.Errorf("the plan removes %s, and rigger runs in a cluster but could not tell "+
			"whether it runs on one of them (%w): nothing removed; rigger tries again", strings.Join(removed, ", "), k.SelfErr))
	}
	if k.Self == nil || k.Self.Address == "" {
		return nil
	}
	// Self's address is its Node's label when cluster.yml no longer
	// declares the node.
	i := slices.IndexFunc(removed, func(addr string) bool {
		return addr == k.Self.Address || desired.NodeAddressLabelValue(addr) == k.Self.Address
	})
	if i < 0 {
		return nil
	}
	self := *k.Self
	self.Address = removed[i]
	return stall.Stalls(stall.SelfRemoval, &SelfRemovalError{Self: self})
}

// SelfRemovalError is a plan that removes the node rigger runs on.
type SelfRemovalError struct{ Self observe.Self }

func (e *SelfRemovalError) Error() string {
	ns, name, _ := strings.Cut(e.Self.Pod, "/")
	return fmt.Sprintf("node %s is removed from cluster.yml, and this rigger runs on it (pod %s on Node %s): "+
		"its removal would evict rigger half-way through it. Move rigger off the node first, and the rigger "+
		"that takes the cluster over removes it: kubectl cordon %s; kubectl -n %s delete pod %s "+
		"(another replica, or the pod made in its place on another node, takes the cluster over). "+
		"Or remove the node with rigger apply from outside the cluster",
		e.Self.Address, e.Self.Pod, e.Self.Node, e.Self.Node, ns, name)
}
