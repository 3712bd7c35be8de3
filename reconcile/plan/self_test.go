package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/stall"
)

// TestCheckSelfRemoval: a plan that removes the node rigger runs on is
// refused with what to do; one that removes another node, or rigger
// running elsewhere, is not; rigger unsure where it runs refuses to
// remove, to try again.
func TestCheckSelfRemoval(t *testing.T) {
	self := &observe.Self{Pod: "rigger-system/rigger-7d-abc", Node: "n2", Address: "10.0.0.2"}
	for _, tc := range []struct {
		name string
		p    *Plan
		k    *observe.Kubernetes
		want string // "" for no refusal; else a part of the error, and stalls when it says "kubectl"
	}{
		{"no removal", &Plan{}, &observe.Kubernetes{Self: self}, ""},
		{"another node removed", &Plan{RemovedNodes: []string{"10.0.0.3"}}, &observe.Kubernetes{Self: self}, ""},
		{"not in this cluster", &Plan{RemovedNodes: []string{"10.0.0.2"}}, &observe.Kubernetes{}, ""},
		{"no Kubernetes side", &Plan{RemovedNodes: []string{"10.0.0.2"}}, nil, ""},
		{"its node removed", &Plan{RemovedNodes: []string{"10.0.0.3", "10.0.0.2"}}, &observe.Kubernetes{Self: self},
			"node 10.0.0.2 is removed from cluster.yml, and this rigger runs on it (pod rigger-system/rigger-7d-abc on Node n2): " +
				"its removal would evict rigger half-way through it. Move rigger off the node first, and the rigger that takes " +
				"the cluster over removes it: kubectl cordon n2; kubectl -n rigger-system delete pod rigger-7d-abc"},
		{"its node, no longer in cluster.yml, removed (an IPv6 address, as its Node's label names it)", &Plan{RemovedNodes: []string{"fd00::2"}},
			&observe.Kubernetes{Self: &observe.Self{Pod: "rigger-system/rigger-7d-abc", Node: "n2", Address: "fd00__2"}},
			"node fd00::2 is removed from cluster.yml, and this rigger runs on it (pod rigger-system/rigger-7d-abc on Node n2): its removal would evict rigger half-way through it. Move rigger off the node first, and the rigger that takes the cluster over removes it: kubectl cordon n2"},
		{"its node removed while unreachable", &Plan{Unreachable: []Unreachable{{Node: "10.0.0.2", Removed: true}}}, &observe.Kubernetes{Self: self},
			"kubectl cordon n2"},
		{"unsure", &Plan{RemovedNodes: []string{"10.0.0.3"}}, &observe.Kubernetes{SelfErr: errors.New("timeout")},
			"the plan removes 10.0.0.3, and rigger runs in a cluster but could not tell whether it runs on one of them (timeout)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSelfRemoval(tc.p, tc.k)
			if tc.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckSelfRemoval = %v, want it to say %q", err, tc.want)
			}
			reason, stalls := stall.Classify(err)
			var self *SelfRemovalError
			if wantStall := strings.Contains(tc.want, "kubectl"); stalls != wantStall || wantStall != (reason == stall.SelfRemoval && errors.As(err, &self)) {
				t.Errorf("classified %s (stalls %v), want a stalling %s *SelfRemovalError only for a refusal to remove its node", reason, stalls, stall.SelfRemoval)
			}
		})
	}
}
