package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
)

// TestStatusNodeLinks: stale, duplicate and missing Nodes are shown, and a
// stale Node makes status exit 1.
func TestStatusNodeLinks(t *testing.T) {
	ready := &report.KubernetesNode{Name: "n1", Ready: "True"}
	st := &report.Status{Cluster: "c", Nodes: []report.NodeStatus{{Address: "10.0.0.1", Reachable: true, KubernetesNode: ready}}}
	if !healthy(st) {
		t.Fatal("a cluster in sync is not healthy")
	}
	st.StaleNodes = []observe.Stale{{Name: "ghost", Ready: "Unknown", Reason: "its address 10.0.0.9 is not in cluster.yml"}}
	st.DuplicateNodes = []observe.Duplicate{{Address: "10.0.0.1", Owner: "n1", Others: []string{"old-n1"}}}
	st.MissingNodes = []string{"10.0.0.2"}
	st.NodeChanges = []kubenode.Pending{{Node: "10.0.0.1", Name: "n1", Change: "label tier=web"}}
	if healthy(st) {
		t.Error("a cluster with a stale Node is healthy")
	}
	var b strings.Builder
	renderStatus(&b, st, time.Now())
	for _, want := range []string{
		"! 10.0.0.2: no Kubernetes Node",
		"! 10.0.0.1: claimed by several Nodes: n1 counts, old-n1 do(es) not",
		"! ghost (Ready: Unknown): its address 10.0.0.9 is not in cluster.yml",
		"~ 10.0.0.1: Node n1: label tier=web",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}

// TestStatusCertificateRotation: a rotation under way is shown, with its
// stage for the CAs.
func TestStatusCertificateRotation(t *testing.T) {
	st := &report.Status{Cluster: "c", CertificateRotation: &report.Rotation{
		Rotation: pki.Rotation{CA: true}, From: "command line", Resumed: true, Stage: pki.StageTrust}}
	var b strings.Builder
	renderStatus(&b, st, time.Now())
	want := "Certificate rotation of the CAs and every certificate (the service-account token key is kept) " +
		"(asked on the command line, at stage " + string(pki.StageTrust) + "): under way"
	if !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
}

// TestStatusSecretsEncryption: the generated key's names and an operation
// under way are shown.
func TestStatusSecretsEncryption(t *testing.T) {
	st := &report.Status{Cluster: "c", SecretsEncryption: &report.EncryptionStatus{Keys: []string{"k-new", "k-old"}, Operation: "rotate", Stage: "rewrite-secrets"}}
	var b strings.Builder
	renderStatus(&b, st, time.Now())
	if want := "Secrets encryption: keys k-new, k-old; rotate at stage rewrite-secrets: rigger apply carries it on."; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
}

// TestStatusVerdict: "In sync" only for a cluster that is as cluster.yml
// says and serving; a cluster without a pending step whose nodes do not
// answer, or whose Node is NotReady, is not in sync, and says why.
func TestStatusVerdict(t *testing.T) {
	ready := &report.KubernetesNode{Name: "n1", Ready: "True"}
	notReady := &report.KubernetesNode{Name: "n2", Ready: "False", ReadyReason: "KubeletNotReady",
		ReadyMessage: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is not ready: cni config uninitialized"}
	tests := []struct {
		name  string
		nodes []report.NodeStatus
		want  []string
	}{
		{"every node answers, every Node Ready", []report.NodeStatus{{Address: "10.0.0.1", Reachable: true, KubernetesNode: ready}},
			[]string{"In sync with cluster.yml"}},
		{"no node answers", []report.NodeStatus{{Address: "10.0.0.1"}, {Address: "10.0.0.2"}},
			[]string{"Not in sync with cluster.yml:", "- node 10.0.0.1 does not answer", "- node 10.0.0.2 does not answer"}},
		{"a Node NotReady", []report.NodeStatus{{Address: "10.0.0.1", Reachable: true, KubernetesNode: ready}, {Address: "10.0.0.2", Reachable: true, KubernetesNode: notReady}},
			[]string{"NotReady (False, KubeletNotReady)", "- node 10.0.0.2: Node n2 not Ready (False: KubeletNotReady container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is not ready: cni config uninitialized)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &report.Status{Cluster: "c", Nodes: tt.nodes}
			var b strings.Builder
			renderStatus(&b, st, time.Now())
			for _, want := range tt.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("status lacks %q:\n%s", want, b.String())
				}
			}
			if inSync := strings.Contains(b.String(), "In sync with cluster.yml"); inSync != healthy(st) {
				t.Errorf("says in sync: %v, exits healthy: %v", inSync, healthy(st))
			}
		})
	}
}

// TestStatusMixedVersions: nodes on two Kubernetes versions are reported
// as such, with the upgrade the next apply goes on with.
func TestStatusMixedVersions(t *testing.T) {
	var b strings.Builder
	renderVersions(&b, &report.KubernetesVersions{Mixed: true, Upgrade: &plan.Upgrade{From: "v1.32.13", To: "v1.33.13"},
		Running: []report.VersionNodes{{Version: "v1.32.13", Nodes: []string{"10.0.0.3"}}, {Version: "v1.33.13", Nodes: []string{"10.0.0.1", "10.0.0.2"}}}})
	want := "\nKubernetes: MIXED VERSIONS, v1.32.13 on 10.0.0.3; v1.33.13 on 10.0.0.1, 10.0.0.2: the upgrade to v1.33.13 is under way or stopped midway; rigger apply goes on with it\n"
	if b.String() != want {
		t.Errorf("got %q\nwant %q", b.String(), want)
	}
}
