package rkestate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// rkeCluster is a cluster.yml both RKE and rigger read: three nodes with
// every role, secrets encryption on (RKE makes the key).
const rkeCluster = `cluster_name: adopted
kubernetes_version: v1.31.4-rancher1-1
nodes:
  - {address: 10.231.27.11, user: root, role: [etcd, controlplane, worker], hostname_override: node1}
  - {address: 10.231.27.12, user: root, role: [etcd, controlplane, worker], hostname_override: node2}
  - {address: 10.231.27.13, internal_address: 10.231.28.13, user: root, role: [etcd, worker]}
  - {address: 10.231.27.14, user: root, role: [worker]}
services:
  kube-api:
    secrets_encryption_config:
      enabled: true
`

// TestAgainstRKE takes over the cluster.rkestate RKE's own code writes
// (hack/rke-render -rkestate: pki.GenerateRKECerts, RebuildState,
// WriteStateFile): every certificate rigger needs is RKE's, and pki.Ensure
// keeps them all, so that the first plan after adopt issues nothing.
func TestAgainstRKE(t *testing.T) {
	bin := rkerender.Binary(t)
	dir := t.TempDir()
	clusterFile := filepath.Join(dir, "cluster.yml")
	if err := os.WriteFile(clusterFile, []byte(rkeCluster), 0o600); err != nil {
		t.Fatal(err)
	}
	stateFile := filepath.Join(dir, "cluster.rkestate")
	rkerender.Run(t, bin, "-rkestate", stateFile, clusterFile)

	fh, err := os.Open(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	st, err := Parse(stateFile, fh)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if st.Section != "currentState" || st.ClusterName != "adopted" || len(st.Nodes) != 4 {
		t.Errorf("read section %s, cluster %q, %d nodes; want currentState, adopted, 4", st.Section, st.ClusterName, len(st.Nodes))
	}
	// rigger refuses secrets encryption with a key it would generate
	// (spec/validate.go) until it keeps the key itself: the encryption
	// stanza is left out of what rigger reads; the rest is the same.
	riggerCluster, _, _ := strings.Cut(rkeCluster, "services:\n")
	c, diags := spec.Parse([]byte(riggerCluster), clusterFile)
	if diags.Err() != nil {
		t.Fatalf("rigger does not read the cluster.yml: %v", diags.Err())
	}
	if err := st.Check(c); err != nil {
		t.Fatalf("Check: %v", err)
	}
	req := pki.RequestFor(c)
	taken, err := st.Take(req, time.Now())
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	for _, it := range taken.Items {
		if it.Action != Imported {
			t.Errorf("%s: %s, want every name rigger needs imported from RKE and nothing else", it.Name, it.Action)
		}
		if it.Name != pki.ServiceAccountTokenKeyName && it.NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
			t.Errorf("%s expires %s: RKE issues for ten years", it.Name, it.NotAfter)
		}
	}
	if !bytes.Contains(taken.EncryptionConfig, []byte("kind: EncryptionConfiguration")) {
		t.Error("RKE's encryption configuration was not taken")
	}

	stateDir := filepath.Join(dir, "state")
	if err := taken.Save(stateDir); err != nil {
		t.Fatalf("Save: %v", err)
	}
	loaded, err := pki.Load(stateDir)
	if err != nil {
		t.Fatalf("pki.Load of the adopted state directory: %v", err)
	}
	_, changes, err := pki.Ensure(loaded, req, time.Now())
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	for _, ch := range changes {
		t.Errorf("Ensure would %s %s (%s): RKE's certificate serves rigger", ch.Action, ch.Name, ch.Reason)
	}
	enc, err := os.ReadFile(filepath.Join(stateDir, EncryptionFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, taken.EncryptionConfig) {
		t.Error("encryption.yaml in the state directory is not RKE's encryptionConfig as it is")
	}
	if fi, err := os.Stat(filepath.Join(stateDir, EncryptionFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("encryption.yaml: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
}
