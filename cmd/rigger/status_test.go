package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
)

// TestStatusNodeLinks: stale, duplicate and missing Nodes are shown, and a
// stale Node makes status exit 1.
func TestStatusNodeLinks(t *testing.T) {
	ready := &reconcile.KubernetesNode{Name: "n1", Ready: "True"}
	st := &reconcile.Status{Cluster: "c", Nodes: []reconcile.NodeStatus{{Address: "10.0.0.1", Reachable: true, KubernetesNode: ready}}}
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
	st := &reconcile.Status{Cluster: "c", CertificateRotation: &reconcile.Rotation{
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
	st := &reconcile.Status{Cluster: "c", SecretsEncryption: &reconcile.EncryptionStatus{Keys: []string{"k-new", "k-old"}, Operation: "rotate", Stage: "rewrite-secrets"}}
	var b strings.Builder
	renderStatus(&b, st, time.Now())
	if want := "Secrets encryption: keys k-new, k-old; rotate at stage rewrite-secrets: rigger apply carries it on."; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
}
