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

// hyperkubeAt sets the image of every Kubernetes component to rancher/hyperkube
// at version.
func hyperkubeAt(version string) func(*spec.Cluster) {
	return kubeImage("rancher/hyperkube:" + version)
}

// kubeImage sets the image of every Kubernetes component.
func kubeImage(image string) func(*spec.Cluster) {
	return func(c *spec.Cluster) {
		for _, s := range []*spec.BaseService{&c.Services.KubeAPI.BaseService, &c.Services.KubeController.BaseService,
			&c.Services.Scheduler, &c.Services.Kubelet.BaseService, &c.Services.Kubeproxy} {
			s.Image = image
		}
	}
}

// TestCheckDowngrade: a cluster.yml that would run a Kubernetes container
// on an older minor version than the one it runs is refused, naming each
// container; anything else is not.
func TestCheckDowngrade(t *testing.T) {
	for _, tc := range []struct {
		name             string
		running, desired func(*spec.Cluster)
		// observe changes what was observed of the running cluster.
		observe func(*observe.Cluster)
		want    []Downgrade
	}{
		{name: "same version", running: hyperkubeAt("v1.32.3-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1")},
		{name: "upgrade", running: hyperkubeAt("v1.31.7-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1")},
		{name: "older patch release", running: hyperkubeAt("v1.32.3-rancher1"), desired: hyperkubeAt("v1.32.1-rancher1")},
		{
			name: "older minor version", running: hyperkubeAt("v1.32.3-rancher1"), desired: hyperkubeAt("v1.31.7-rancher1"),
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
			name: "one node ahead, mid-upgrade", running: hyperkubeAt("v1.31.7-rancher1"), desired: hyperkubeAt("v1.31.7-rancher1"),
			observe: func(o *observe.Cluster) {
				c := o.Nodes["10.0.0.2"].Containers[desired.Kubelet]
				c.Image = "rancher/hyperkube:v1.32.3-rancher1"
				o.Nodes["10.0.0.2"].Containers[desired.Kubelet] = c
			},
			want: []Downgrade{{Node: "10.0.0.2", Component: desired.Kubelet, Running: "v1.32.3-rancher1", Wanted: "v1.31.7-rancher1"}},
		},
		{
			name: "a node that did not answer says nothing", running: hyperkubeAt("v1.32.3-rancher1"), desired: hyperkubeAt("v1.31.7-rancher1"),
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.1"].Reachable = false
				delete(o.Nodes, "10.0.0.2")
			},
		},
		{name: "a custom build says no version", running: hyperkubeAt("custom"), desired: hyperkubeAt("v1.31.7-rancher1")},
		{name: "the sandbox's upstream tag", running: hyperkubeAt("v1.32.3"), desired: hyperkubeAt("v1.31.4"),
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

// TestCheckSkippedMinor: a cluster.yml that would move an API server more
// than one minor version up is refused, naming each and the version to
// apply first (the newest patch release of the next minor); one minor up,
// a node that did not answer, a new node and a custom build are not.
func TestCheckSkippedMinor(t *testing.T) {
	apiServerAt := func(node, version string) func(*observe.Cluster) {
		return func(o *observe.Cluster) {
			c := o.Nodes[node].Containers[desired.KubeAPIServer]
			c.Image = "rancher/hyperkube:" + version
			o.Nodes[node].Containers[desired.KubeAPIServer] = c
		}
	}
	const yml = "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n  - {address: 10.0.0.2, user: u, role: [controlplane, worker]}\n"
	for _, tc := range []struct {
		name             string
		running, desired func(*spec.Cluster)
		observe          func(*observe.Cluster)
		want             []SkippedMinor
		next             string // in the error: the version to apply first
	}{
		{name: "one minor up", running: hyperkubeAt("v1.31.7-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1")},
		{name: "a patch release", running: hyperkubeAt("v1.32.1-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1")},
		{
			name: "two minors up", running: hyperkubeAt("v1.30.14-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1"),
			want: []SkippedMinor{{"10.0.0.1", "v1.30.14-rancher1", "v1.32.3-rancher1"}, {"10.0.0.2", "v1.30.14-rancher1", "v1.32.3-rancher1"}},
			next: "v1.31.14-rancher1-1",
		},
		{
			name: "mid-upgrade: only the API server still a minor behind", running: hyperkubeAt("v1.31.7-rancher1"), desired: hyperkubeAt("v1.33.1"),
			observe: apiServerAt("10.0.0.2", "v1.32.3-rancher1"),
			want:    []SkippedMinor{{"10.0.0.1", "v1.31.7-rancher1", "v1.33.1"}},
			next:    "v1.32.13-rancher1-3",
		},
		{
			name: "a node that did not answer says nothing", running: hyperkubeAt("v1.28.15-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1"),
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.1"].Reachable = false
				delete(o.Nodes, "10.0.0.2")
			},
		},
		{
			name: "a new controlplane node runs no API server yet", running: hyperkubeAt("v1.28.15-rancher1"), desired: hyperkubeAt("v1.32.3-rancher1"),
			observe: func(o *observe.Cluster) {
				for _, n := range o.Nodes {
					delete(n.Containers, desired.KubeAPIServer)
				}
			},
		},
		{name: "a custom build says no version", running: hyperkubeAt("custom"), desired: hyperkubeAt("v1.32.3-rancher1")},
		{name: "CKE's tags, one minor up", running: kubeImage("ghcr.io/cybozu/kubernetes:1.33.7.1"), desired: kubeImage("ghcr.io/cybozu/kubernetes:1.34.9.1")},
		{
			name: "RKE's 1.32 to rigger's 1.34, CKE's tag", running: hyperkubeAt("v1.32.13-rancher1"), desired: kubeImage("ghcr.io/cybozu/kubernetes:1.34.9.1"),
			want: []SkippedMinor{{"10.0.0.1", "v1.32.13-rancher1", "1.34.9.1"}, {"10.0.0.2", "v1.32.13-rancher1", "1.34.9.1"}},
			next: "v1.33.13-rigger1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := asApplied(build(t, yml, tc.running))
			if tc.observe != nil {
				tc.observe(o)
			}
			err := CheckSkippedMinor(build(t, yml, tc.desired), o)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *SkippedMinorError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a *SkippedMinorError", err)
			}
			if diff := cmp.Diff(tc.want, se.Skips); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			if msg := err.Error(); !strings.Contains(msg, "one minor version at a time") || !strings.Contains(msg, "to "+tc.next+", apply it") {
				t.Errorf("the error does not say why and what to do (%s first): %s", tc.next, msg)
			}
		})
	}
}
