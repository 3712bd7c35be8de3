package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// order is the plan's container steps as "phase node component".
func order(p *Plan) []string {
	var out []string
	for _, s := range p.Steps {
		if s.Action != WriteFiles {
			out = append(out, fmt.Sprintf("%s %s %s", s.Phase, s.Node, s.Component))
		}
	}
	return out
}

// TestUpgradeOrder: a Kubernetes minor upgrade goes in the version skew
// policy's order: every API server, node by node, before any controller
// manager or scheduler, and those before any kubelet and kube-proxy, each
// node with a kubelet drained first. A patch release is no upgrade and
// keeps the usual order.
func TestUpgradeOrder(t *testing.T) {
	p := Compute(build(t, baseYML, hyperkubeAt("v1.33.13")), asApplied(build(t, baseYML, hyperkubeAt("v1.32.13"))))
	want := &Upgrade{From: "v1.32.13", To: "v1.33.13", Drain: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}}
	if diff := cmp.Diff(want, p.Upgrade); diff != "" {
		t.Errorf("Upgrade (-want +got):\n%s", diff)
	}
	wantOrder := []string{
		"apiserver 10.0.0.1 kube-apiserver",
		"apiserver 10.0.0.2 kube-apiserver",
		"controlplane 10.0.0.1 kube-controller-manager",
		"controlplane 10.0.0.1 kube-scheduler",
		"controlplane 10.0.0.2 kube-controller-manager",
		"controlplane 10.0.0.2 kube-scheduler",
		"worker 10.0.0.1 kubelet",
		"worker 10.0.0.1 kube-proxy",
		"worker 10.0.0.2 kubelet",
		"worker 10.0.0.2 kube-proxy",
		"worker 10.0.0.3 kubelet",
		"worker 10.0.0.3 kube-proxy",
		"worker 10.0.0.4 kubelet",
		"worker 10.0.0.4 kube-proxy",
	}
	if diff := cmp.Diff(wantOrder, order(p)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	var b strings.Builder
	p.Render(&b)
	if !strings.HasPrefix(b.String(), "Kubernetes upgrade v1.32.13 → v1.33.13, in the version skew policy's order") ||
		!strings.Contains(b.String(), "each node drained first (10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4)") {
		t.Errorf("render:\n%s", b.String())
	}

	patch := Compute(build(t, baseYML, hyperkubeAt("v1.32.14")), asApplied(build(t, baseYML, hyperkubeAt("v1.32.13"))))
	if patch.Upgrade != nil {
		t.Errorf("a patch release planned as an upgrade: %+v", patch.Upgrade)
	}
	if slices.ContainsFunc(patch.Steps, func(s Step) bool { return s.Phase == PhaseAPIServer }) {
		t.Errorf("a patch release orders the API servers apart:\n%s", strings.Join(order(patch), "\n"))
	}
}

// TestUpgradeHeld: while a controlplane node does not answer, its API
// server may run the older minor: the kubelets and kube-proxies wait, and
// the plan says why; the rest of the upgrade goes on.
func TestUpgradeHeld(t *testing.T) {
	o := asApplied(build(t, baseYML, hyperkubeAt("v1.32.13")))
	o.Nodes["10.0.0.1"] = unreachable("10.0.0.1", "dial tcp 10.0.0.1:22: i/o timeout")
	p := Compute(build(t, baseYML, hyperkubeAt("v1.33.13")), o)
	if p.Upgrade == nil || !strings.Contains(p.Upgrade.Held, "10.0.0.1 did not answer") || len(p.Upgrade.Drain) != 0 {
		t.Fatalf("Upgrade %+v: want the kubelets held for 10.0.0.1", p.Upgrade)
	}
	want := []string{
		"apiserver 10.0.0.2 kube-apiserver",
		"controlplane 10.0.0.2 kube-controller-manager",
		"controlplane 10.0.0.2 kube-scheduler",
	}
	if diff := cmp.Diff(want, order(p)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	var b strings.Builder
	p.Render(&b)
	if !strings.Contains(b.String(), "Not in this plan: the kubelets and kube-proxies stay on their minor version until every API server runs v1.33.13") {
		t.Errorf("render:\n%s", b.String())
	}
}

// TestCheckSkew: a component of its own image newer than the API servers
// is refused.
func TestCheckSkew(t *testing.T) {
	d := build(t, baseYML, func(c *spec.Cluster) {
		hyperkubeAt("v1.32.13")(c)
		c.Services.Kubelet.Image = "rancher/hyperkube:v1.33.13"
	})
	var se *SkewError
	if err := CheckSkew(d); !errors.As(err, &se) || se.Component != desired.Kubelet {
		t.Errorf("CheckSkew = %v, want the kubelet refused", err)
	}
	if err := CheckSkew(build(t, baseYML, hyperkubeAt("v1.33.13"))); err != nil {
		t.Errorf("one version refused: %v", err)
	}
	older := build(t, baseYML, func(c *spec.Cluster) {
		hyperkubeAt("v1.33.13")(c)
		c.Services.Kubelet.Image = "rancher/hyperkube:v1.32.13"
	})
	if err := CheckSkew(older); err != nil {
		t.Errorf("an older kubelet refused: %v", err)
	}
}

// TestCheckEtcdUpgrade: etcd moves one minor version up at a time, from
// the patch release its next minor version needs, and never down.
func TestCheckEtcdUpgrade(t *testing.T) {
	etcdAt := func(image string) func(*spec.Cluster) {
		return func(c *spec.Cluster) { c.Services.Etcd.Image = image }
	}
	for _, tc := range []struct {
		running, wanted string
		refused         string // part of the error; "" when allowed
	}{
		{"rancher/mirrored-coreos-etcd:v3.5.16", "rancher/mirrored-coreos-etcd:v3.5.16", ""},
		{"rancher/mirrored-coreos-etcd:v3.5.16", "registry.k8s.io/etcd:3.5.35-0", ""},
		{"rancher/mirrored-coreos-etcd:v3.5.16", "registry.k8s.io/etcd:3.6.16-0", "needs every member on 3.5.26 or later first"},
		{"registry.k8s.io/etcd:3.5.35-0", "registry.k8s.io/etcd:3.6.16-0", ""},
		{"registry.k8s.io/etcd:3.5.35-0", "registry.k8s.io/etcd:3.7.0-0", "one minor version at a time"},
		{"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/etcd:3.7.0-0", "needs every member on 3.6.11 or later first"},
		{"registry.k8s.io/etcd:3.6.16-0", "rancher/mirrored-coreos-etcd:v3.5.16", "does not move back"},
		{"registry.k8s.io/etcd:3.6.16-0", "custom/etcd:latest", ""},
	} {
		t.Run(tc.running+"→"+tc.wanted, func(t *testing.T) {
			o := asApplied(build(t, baseYML, etcdAt(tc.running)))
			err := CheckEtcdUpgrade(build(t, baseYML, etcdAt(tc.wanted)), o)
			var ee *EtcdVersionError
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!errors.As(err, &ee) || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("got %v, want an *EtcdVersionError saying %q", err, tc.refused)
			}
		})
	}
	// A member that did not answer says nothing of what it runs.
	o := asApplied(build(t, baseYML, etcdAt("rancher/mirrored-coreos-etcd:v3.5.16")))
	for _, n := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		o.Nodes[n] = &observe.Node{Address: n}
	}
	if err := CheckEtcdUpgrade(build(t, baseYML, etcdAt("registry.k8s.io/etcd:3.6.16-0")), o); err != nil {
		t.Errorf("no member answered, refused: %v", err)
	}
}

// TestSnapshotEtcdLogs: a plan that moves etcd members from 3.6 to 3.7
// has every member save a snapshot of its log first, and says so; from
// 3.5 to 3.6, or within 3.7, it does not; a member that moved already is
// not listed again.
func TestSnapshotEtcdLogs(t *testing.T) {
	etcdAt := func(image string) func(*spec.Cluster) {
		return func(c *spec.Cluster) { c.Services.Etcd.Image = image }
	}
	for _, tc := range []struct {
		running, wanted string
		nodes           []string
	}{
		{"registry.k8s.io/etcd:3.6.11-0", "registry.k8s.io/etcd:3.7.0-0", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{"registry.k8s.io/etcd:3.5.27-0", "registry.k8s.io/etcd:3.6.11-0", nil},
		{"registry.k8s.io/etcd:3.7.0-0", "registry.k8s.io/etcd:3.7.3-0", nil},
		{"registry.k8s.io/etcd:3.6.11-0", "custom/etcd:latest", nil},
	} {
		p := Compute(build(t, baseYML, etcdAt(tc.wanted)), asApplied(build(t, baseYML, etcdAt(tc.running))))
		switch {
		case tc.nodes == nil && p.SnapshotEtcdLogs != nil:
			t.Errorf("%s → %s: %+v", tc.running, tc.wanted, p.SnapshotEtcdLogs)
		case tc.nodes != nil && (p.SnapshotEtcdLogs == nil || !slices.Equal(p.SnapshotEtcdLogs.Nodes, tc.nodes) || p.SnapshotEtcdLogs.From != "3.6" || p.SnapshotEtcdLogs.To != "3.7"):
			t.Errorf("%s → %s: %+v, want nodes %v", tc.running, tc.wanted, p.SnapshotEtcdLogs, tc.nodes)
		}
	}
	d := build(t, baseYML, etcdAt("registry.k8s.io/etcd:3.7.0-0"))
	o := asApplied(build(t, baseYML, etcdAt("registry.k8s.io/etcd:3.6.11-0")))
	dn, _ := d.Node("10.0.0.1")
	c, _ := dn.Container(desired.Etcd)
	oc := o.Nodes["10.0.0.1"].Containers[desired.Etcd]
	oc.Image, oc.SpecHash, oc.Spec = c.Image, c.Hash(), c.SpecJSON()
	o.Nodes["10.0.0.1"].Containers[desired.Etcd] = oc
	p := Compute(d, o)
	if p.SnapshotEtcdLogs == nil || !slices.Equal(p.SnapshotEtcdLogs.Nodes, []string{"10.0.0.2", "10.0.0.3"}) {
		t.Fatalf("one member on 3.7 already: %+v", p.SnapshotEtcdLogs)
	}
	var out strings.Builder
	p.Render(&out)
	if want := "Before etcd 3.7: every etcd 3.6 member saves a snapshot of its log"; !strings.Contains(out.String(), want) {
		t.Errorf("the plan does not say %q:\n%s", want, out.String())
	}
}

// TestUpgradeResumed: an upgrade that stopped after the first node's API
// server goes on where it stopped, in the same order; From is the oldest
// version still running.
func TestUpgradeResumed(t *testing.T) {
	o := asApplied(build(t, baseYML, hyperkubeAt("v1.32.13")))
	d := build(t, baseYML, hyperkubeAt("v1.33.13"))
	dn, _ := d.Node("10.0.0.1")
	api, _ := dn.Container(desired.KubeAPIServer)
	c := o.Nodes["10.0.0.1"].Containers[desired.KubeAPIServer]
	c.Image, c.SpecHash, c.Spec = api.Image, api.Hash(), api.SpecJSON()
	o.Nodes["10.0.0.1"].Containers[desired.KubeAPIServer] = c
	p := Compute(d, o)
	if p.Upgrade == nil || p.Upgrade.From != "v1.32.13" || p.Upgrade.To != "v1.33.13" {
		t.Fatalf("Upgrade %+v", p.Upgrade)
	}
	got := order(p)
	if len(got) == 0 || got[0] != "apiserver 10.0.0.2 kube-apiserver" || slices.Contains(got, "apiserver 10.0.0.1 kube-apiserver") {
		t.Errorf("steps:\n%s", strings.Join(got, "\n"))
	}
}
