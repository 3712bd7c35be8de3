package sysaddons

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rigger/rigger/spec"
)

// TestNetworkReady: flannel and canal are ready on a Node once flannel
// annotated it; calico, and a plugin limited by a node_selector, add no
// Node check.
func TestNetworkReady(t *testing.T) {
	for _, tt := range []struct {
		plugin   string
		selector map[string]string
		check    bool
	}{
		{"flannel", nil, true},
		{"canal", nil, true},
		{"calico", nil, false},
		{"flannel", map[string]string{"net": "yes"}, false},
	} {
		c := &spec.Cluster{Network: spec.Network{Plugin: tt.plugin, NodeSelector: tt.selector}}
		ready := networkReady(c)
		if (ready != nil) != tt.check {
			t.Errorf("%s with node_selector %v: a Node check %v, want %v", tt.plugin, tt.selector, ready != nil, tt.check)
			continue
		}
		if ready == nil {
			continue
		}
		n := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "n1"}}}
		if ready(n) == "" {
			t.Errorf("%s: a Node without %s is ready", tt.plugin, FlannelPublicIP)
		}
		n.SetAnnotations(map[string]string{FlannelPublicIP: "10.0.0.1"})
		if m := ready(n); m != "" {
			t.Errorf("%s: an annotated Node is not ready: %s", tt.plugin, m)
		}
	}
}
