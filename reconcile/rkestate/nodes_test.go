package rkestate

import (
	"slices"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/observe"
)

// The nodes as their containers say RKE deployed them: a cluster.yml that
// takes the etcd or controlplane role from a node is refused; one that
// gives a role the node's containers lack (a half-way rke up, a role
// added) is not; a node without RKE's containers is one to add; an
// unreachable one is taken as cluster.yml says.
func TestNodesFromContainers(t *testing.T) {
	containers := func(names ...string) map[string]observe.Container {
		m := map[string]observe.Container{}
		for _, n := range names {
			m[n] = observe.Container{Name: n, RKE: true}
		}
		return m
	}
	server := containers("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
	const yml = `cluster_name: prod
nodes:
  - {address: 10.0.0.1, user: root, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.2, user: root, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.3, user: root, role: [worker]}
  - {address: 10.0.0.4, user: root, role: [worker]}
  - {address: 10.0.0.5, user: root, role: [etcd, worker]}
`
	o := &observe.Cluster{Nodes: map[string]*observe.Node{
		"10.0.0.1": {Address: "10.0.0.1", Reachable: true, Containers: server},
		// rke up failed before its etcd container
		"10.0.0.2": {Address: "10.0.0.2", Reachable: true, Containers: containers("kubelet", "kube-proxy")},
		"10.0.0.3": {Address: "10.0.0.3", Reachable: true, Containers: containers("kubelet", "kube-proxy", "nginx-proxy")},
		// never provisioned
		"10.0.0.4": {Address: "10.0.0.4", Reachable: true},
		"10.0.0.5": {Address: "10.0.0.5"},
	}}
	c := parseCluster(t, yml)
	st := &State{Source: "the nodes", Nodes: NodesFromContainers(o, c)}
	if err := st.Check(c); err != nil {
		t.Errorf("the cluster.yml RKE ran: %v", err)
	}
	if got := st.ToAdd(c); !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Errorf("to add %v, want the node without RKE's containers", got)
	}

	// The first server's etcd role taken away, the third node made a
	// controlplane: only the first is RKE's state contradicted.
	other := parseCluster(t, strings.NewReplacer(
		"{address: 10.0.0.1, user: root, role: [etcd, controlplane, worker]}", "{address: 10.0.0.1, user: root, role: [controlplane, worker]}",
		"{address: 10.0.0.3, user: root, role: [worker]}", "{address: 10.0.0.3, user: root, role: [controlplane, worker]}",
	).Replace(yml))
	st = &State{Source: "the nodes", Nodes: NodesFromContainers(o, other)}
	err := st.Check(other)
	if err == nil || !strings.Contains(err.Error(), "node 10.0.0.1 has roles controlplane,worker in cluster.yml but controlplane,etcd,worker in the nodes") {
		t.Fatalf("err = %v, want the first server's etcd role named", err)
	}
	if strings.Contains(err.Error(), "10.0.0.3") {
		t.Errorf("err = %v: a role added to a node is no difference", err)
	}
}
