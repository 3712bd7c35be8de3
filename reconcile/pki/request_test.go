package pki

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/spec"
)

func TestRequestFor(t *testing.T) {
	c := &spec.Cluster{
		Nodes: []spec.Node{
			{Address: "10.0.0.1", InternalAddress: "192.168.0.1", HostnameOverride: "cp1", Role: []string{"controlplane", "etcd"}},
			{Address: "Worker.Example.com", Role: []string{"worker"}},
		},
		Authentication: spec.Authentication{SANs: []string{"api.example.com"}},
	}
	want := Request{
		ClusterName: "local",
		Nodes: []Node{
			{Name: "10.0.0.1", Address: "10.0.0.1", InternalAddress: "192.168.0.1", Hostname: "cp1", Etcd: true, ControlPlane: true},
			{Name: "Worker.Example.com", Address: "Worker.Example.com", InternalAddress: "Worker.Example.com", Hostname: "worker.example.com", Worker: true},
		},
		ServiceClusterIPRange: "10.43.0.0/16",
		ClusterDomain:         "cluster.local",
		SANs:                  []string{"api.example.com"},
	}
	spec.SetDefaults(c) // as spec.Load returns it
	if diff := cmp.Diff(want, RequestFor(c)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	c.ClusterName = "prod"
	c.Services.KubeAPI.ServiceClusterIPRange = "10.96.0.0/12"
	c.Services.Kubelet.ClusterDomain = "corp.example"
	got := RequestFor(c)
	if got.ClusterName != "prod" || got.ServiceClusterIPRange != "10.96.0.0/12" || got.ClusterDomain != "corp.example" {
		t.Errorf("RequestFor ignores the cluster's settings: %+v", got)
	}
}
