package reach

import (
	"testing"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

func TestNoEtcdMember(t *testing.T) {
	s := Services{
		Nodes:  []spec.Node{{Address: "10.0.0.1"}, {Address: "10.0.0.2"}},
		Former: []spec.Node{{Address: "10.0.0.3"}},
	}
	node := func(addr string, reachable bool, etcd string) *observe.Node {
		n := &observe.Node{Address: addr, Reachable: reachable, Containers: map[string]observe.Container{}}
		if etcd != "" {
			n.Containers[desired.Etcd] = observe.Container{Name: desired.Etcd, State: etcd}
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		nodes []*observe.Node
		none  bool
	}{
		{"every node answered, none runs etcd", []*observe.Node{node("10.0.0.1", true, "exited"), node("10.0.0.2", true, ""), node("10.0.0.3", true, "restarting")}, true},
		{"a node of cluster.yml runs etcd", []*observe.Node{node("10.0.0.1", true, ""), node("10.0.0.2", true, "running"), node("10.0.0.3", true, "")}, false},
		{"a node of the last apply runs etcd", []*observe.Node{node("10.0.0.1", true, ""), node("10.0.0.2", true, ""), node("10.0.0.3", true, "running")}, false},
		{"a node did not answer", []*observe.Node{node("10.0.0.1", true, ""), node("10.0.0.2", false, ""), node("10.0.0.3", true, "")}, false},
		{"a node was not asked", []*observe.Node{node("10.0.0.1", true, ""), node("10.0.0.2", true, "")}, false},
	} {
		o := &observe.Cluster{Nodes: map[string]*observe.Node{}}
		for _, n := range tc.nodes {
			o.Nodes[n.Address] = n
		}
		var want error
		if tc.none {
			want = ErrNoEtcdMember
		}
		if got := s.NoEtcdMember(o); got != want {
			t.Errorf("%s: %v, want %v", tc.name, got, want)
		}
	}
}
