package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// TestCheckDowngrade: a cluster.yml that would run a Kubernetes container
// on an older minor version than the one it runs is refused, naming each
// container; anything else is not.
func TestCheckDowngrade(t *testing.T) {
	at := func(version string) func(*spec.Cluster) {
		return func(c *spec.Cluster) {
			for _, s := range []*spec.BaseService{&c.Services.KubeAPI.BaseService, &c.Services.KubeController.BaseService,
				&c.Services.Scheduler, &c.Services.Kubelet.BaseService, &c.Services.Kubeproxy} {
				s.Image = "rancher/hyperkube:" + version
			}
		}
	}
	for _, tc := range []struct {
		name             string
		running, desired func(*spec.Cluster)
		// observe changes what was observed of the running cluster.
		observe func(*observe.Cluster)
		want    []Downgrade
	}{
		{name: "same version", running: at("v1.32.3-rancher1"), desired: at("v1.32.3-rancher1")},
		{name: "upgrade", running: at("v1.31.7-rancher1"), desired: at("v1.32.3-rancher1")},
		{name: "older patch release", running: at("v1.32.3-rancher1"), desired: at("v1.32.1-rancher1")},
		{
			name: "older minor version", running: at("v1.32.3-rancher1"), desired: at("v1.31.7-rancher1"),
			want: []Downgrade{
				{Node: "10.0.0.1", Component: desired.KubeAPIServer, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
				{Node: "10.0.0.1", Component: desired.KubeControllerManager, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
				{Node: "10.0.0.1", Component: desired.KubeScheduler, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
				{Node: "10.0.0.1", Component: desired.Kubelet, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
				{Node: "10.0.0.1", Component: desired.KubeProxy, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
				{Node: "10.0.0.2", Component: desired.Kubelet, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
				{Node: "10.0.0.2", Component: desired.KubeProxy, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"},
			},
		},
		{
			name: "one node ahead, mid-upgrade", running: at("v1.31.7-rancher1"), desired: at("v1.31.7-rancher1"),
			observe: func(o *observe.Cluster) {
				c := o.Nodes["10.0.0.2"].Containers[desired.Kubelet]
				c.Image = "rancher/hyperkube:v1.32.3-rancher1"
				o.Nodes["10.0.0.2"].Containers[desired.Kubelet] = c
			},
			want: []Downgrade{{Node: "10.0.0.2", Component: desired.Kubelet, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"}},
		},
		{
			name: "a node that did not answer says nothing", running: at("v1.32.3-rancher1"), desired: at("v1.31.7-rancher1"),
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.1"].Reachable = false
				delete(o.Nodes, "10.0.0.2")
			},
		},
		{name: "a custom build says no version", running: at("custom"), desired: at("v1.31.7-rancher1")},
		{name: "the sandbox's upstream tag", running: at("v1.32.3"), desired: at("v1.31.4"),
			observe: func(o *observe.Cluster) { delete(o.Nodes, "10.0.0.1") },
			want: []Downgrade{
				{Node: "10.0.0.2", Component: desired.Kubelet, Running: "v1.32.3", Wanted: "v1.31.4"},
				{Node: "10.0.0.2", Component: desired.KubeProxy, Running: "v1.32.3", Wanted: "v1.31.4"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const yml = "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n  - {address: 10.0.0.2, user: u, role: [worker]}\n"
			o := asApplied(build(t, yml, tc.running))
			if tc.observe != nil {
				tc.observe(o)
			}
			err := CheckDowngrade(build(t, yml, tc.desired), o)
			var de *DowngradeError
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a *DowngradeError", err)
			}
			if diff := cmp.Diff(tc.want, de.Downgrades); diff != "" {
				t.Errorf("downgrades (-want +got):\n%s", diff)
			}
			if msg := err.Error(); !strings.Contains(msg, "Kubernetes does not support going back to an older minor version") || !strings.Contains(msg, "to v1.32 or later") {
				t.Errorf("the error does not say why and what to do: %s", msg)
			}
		})
	}
}
