package plan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
)

// asRKE is what observe sees of a cluster RKE runs as d would: the same
// containers, running, without rigger's labels (RKE set), and RKE's
// snapshot schedule on the etcd nodes; its etcd members are those of d.
func asRKE(t *testing.T, yml string) *observe.Cluster {
	d := build(t, yml, nil)
	o := asApplied(d)
	var members []etcdmember.Member
	for _, n := range d.Nodes {
		on := o.Nodes[n.Address]
		for name, c := range on.Containers {
			on.Containers[name] = observe.Container{ID: c.ID, Name: c.Name, Image: "rancher/" + c.Image, State: "running", RKE: true}
		}
		if _, ok := on.Containers["etcd"]; ok {
			on.Containers["etcd-rolling-snapshots"] = observe.Container{ID: "s-" + n.Address, Name: "etcd-rolling-snapshots", State: "running", RKE: true}
			members = append(members, etcdmember.Member{ID: uint64(len(members) + 1), Name: "etcd-" + n.Hostname,
				PeerURLs: []string{"https://" + n.InternalAddress + ":2380"}, Healthy: true})
		}
	}
	o.Etcd = &observe.Etcd{Members: members}
	return o
}

// TestAdoptRKE: every container RKE runs is replaced by rigger's under the
// same name, in the phases' order (etcd members one node after the other,
// no membership change, not a new etcd cluster), each step saying it takes
// over RKE's, RKE's snapshot schedule included (rigger's runs in its place,
// as RKE's did); it is removed only when cluster.yml turns it off.
func TestAdoptRKE(t *testing.T) {
	const yml = `cluster_name: test
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.2, user: u, role: [worker]}
`
	p := Compute(build(t, yml, nil), asRKE(t, yml))
	const etcdReason = "adopt: replace RKE's etcd with rigger's (same member, data directory and certificates: it rejoins as itself)"
	want := []string{
		"etcd 10.0.0.1 replace etcd (" + etcdReason + ")",
		"controlplane 10.0.0.1 replace kube-apiserver (adopt: replace RKE's kube-apiserver with rigger's)",
		"controlplane 10.0.0.1 replace kube-controller-manager (adopt: replace RKE's kube-controller-manager with rigger's)",
		"controlplane 10.0.0.1 replace kube-scheduler (adopt: replace RKE's kube-scheduler with rigger's)",
		"worker 10.0.0.1 replace service-sidekick (adopt: replace RKE's service-sidekick with rigger's)",
		"worker 10.0.0.1 replace kubelet (adopt: replace RKE's kubelet with rigger's)",
		"worker 10.0.0.1 replace kube-proxy (adopt: replace RKE's kube-proxy with rigger's)",
		"worker 10.0.0.1 replace etcd-rolling-snapshots (adopt: replace RKE's etcd-rolling-snapshots with rigger's)",
		"worker 10.0.0.2 replace nginx-proxy (adopt: replace RKE's nginx-proxy with rigger's)",
		"worker 10.0.0.2 replace service-sidekick (adopt: replace RKE's service-sidekick with rigger's)",
		"worker 10.0.0.2 replace kubelet (adopt: replace RKE's kubelet with rigger's)",
		"worker 10.0.0.2 replace kube-proxy (adopt: replace RKE's kube-proxy with rigger's)",
	}
	if diff := cmp.Diff(want, lines(p)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if p.NewEtcd {
		t.Error("NewEtcd is set: RKE's etcd runs, its members must be kept")
	}

	// Three etcd members: replaced one at a time, none removed or added.
	const three = `cluster_name: test
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker], hostname_override: n1}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane, worker], hostname_override: n2}
  - {address: 10.0.0.3, user: u, role: [etcd, controlplane, worker], hostname_override: n3}
`
	var etcd []string
	for _, s := range Compute(build(t, three, nil), asRKE(t, three)).Steps {
		if s.Phase == PhaseEtcd {
			etcd = append(etcd, line(s))
		}
	}
	want = []string{
		"etcd 10.0.0.1 replace etcd (" + etcdReason + ")",
		"etcd 10.0.0.2 replace etcd (" + etcdReason + ")",
		"etcd 10.0.0.3 replace etcd (" + etcdReason + ")",
	}
	if diff := cmp.Diff(want, etcd); diff != "" {
		t.Errorf("etcd phase (-want +got):\n%s", diff)
	}

	// With the nodes' snapshots turned off, RKE's schedule is removed.
	off := yml + "services: {etcd: {snapshot: false}}\n"
	var snaps []string
	for _, s := range Compute(build(t, off, nil), asRKE(t, off)).Steps {
		if s.Component == "etcd-rolling-snapshots" {
			snaps = append(snaps, line(s))
		}
	}
	if want := []string{"worker 10.0.0.1 remove etcd-rolling-snapshots (adopt: remove RKE's snapshot schedule, as cluster.yml turns the nodes' off (services.etcd.snapshot: false, or backup_config.enabled: false); those RKE took stay on the node)"}; !cmp.Equal(want, snaps) {
		t.Errorf("etcd-rolling-snapshots with snapshot: false: %v, want %v", snaps, want)
	}

	// Once rigger's run, the plan is empty.
	if got := lines(Compute(build(t, yml, nil), asApplied(build(t, yml, nil)))); len(got) != 0 {
		t.Errorf("plan after the takeover: %s", strings.Join(got, "\n"))
	}
}
