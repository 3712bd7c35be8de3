package sysaddons

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

// TestNodeLocalAPI: the network plugin's containers in the node's network
// namespace (flannel's, canal's, calico's calico-node) reach the API
// server on the node, 127.0.0.1:6443, not through the `kubernetes`
// Service that kube-proxy may not have programmed yet; pods on the pod
// network (calico-kube-controllers) and the other add-ons keep it.
func TestNodeLocalAPI(t *testing.T) {
	for _, tt := range []struct {
		file string
		// want are the containers given the node-local API server, by
		// DaemonSet or Deployment name.
		want map[string][]string
	}{
		{"flannel", map[string][]string{"kube-flannel": {"install-cni", "kube-flannel"}}},
		{"canal", map[string][]string{"canal": {"install-cni", "mount-bpffs", "calico-node", "kube-flannel"}, "calico-kube-controllers": nil}},
		{"calico", map[string][]string{"calico-node": {"upgrade-ipam", "install-cni", "mount-bpffs", "calico-node"}, "calico-kube-controllers": nil}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			c, _, err := spec.Load(filepath.Join("testdata", "clusters", tt.file+".yml"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Render(c)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string][]string{}
			for _, a := range got {
				for _, o := range a.Objects {
					if k := o.GetKind(); k != "DaemonSet" && k != "Deployment" {
						continue
					}
					var given []string
					for _, field := range []string{"initContainers", "containers"} {
						cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
						for _, c := range cs {
							m := c.(map[string]any)
							env, _ := m["env"].([]any)
							var host, port []string
							for _, e := range env {
								e := e.(map[string]any)
								switch e["name"] {
								case "KUBERNETES_SERVICE_HOST":
									host = append(host, fmt.Sprint(e["value"]))
								case "KUBERNETES_SERVICE_PORT":
									port = append(port, fmt.Sprint(e["value"]))
								}
							}
							switch {
							case len(host) == 0 && len(port) == 0:
							case a.Name == NetworkPlugin && slices.Equal(host, []string{"127.0.0.1"}) && slices.Equal(port, []string{"6443"}):
								given = append(given, m["name"].(string))
							default:
								t.Errorf("add-on %s: %s %s container %s: KUBERNETES_SERVICE_HOST %v, _PORT %v", a.Name, o.GetKind(), o.GetName(), m["name"], host, port)
							}
						}
					}
					if a.Name == NetworkPlugin {
						seen[o.GetName()] = given
					} else if len(given) > 0 {
						t.Errorf("add-on %s (not the network plugin): %s %s given the node-local API server", a.Name, o.GetKind(), o.GetName())
					}
				}
			}
			if diff := cmp.Diff(tt.want, seen, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("containers given the node-local API server (-want +got):\n%s", diff)
			}
		})
	}
}
