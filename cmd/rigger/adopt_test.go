package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/rkestate"
)

// TestAdoptRKEState: rigger adopt takes over the cluster.rkestate RKE's own
// code writes, prints names and expiry dates and never a key, can be run
// again, and refuses a state directory of another cluster; a cluster.rkestate
// of other nodes is refused naming them.
func TestAdoptRKEState(t *testing.T) {
	bin := rkerender.Binary(t)
	dir := t.TempDir()
	writeKey(t, dir)
	yml := "cluster_name: adopted\nssh_key_path: " + dir + "/id\nnodes:\n" +
		"  - {address: 10.231.27.11, user: root, role: [etcd, controlplane, worker], hostname_override: node1}\n" +
		"  - {address: 10.231.27.12, user: root, role: [worker]}\n"
	clusterFile := filepath.Join(dir, "cluster.yml")
	if err := os.WriteFile(clusterFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	rkeState := filepath.Join(dir, "cluster.rkestate")
	rkerender.Run(t, bin, "-rkestate", rkeState, clusterFile)
	state := filepath.Join(dir, "state")

	args := []string{"adopt", "-f", clusterFile, "--rkestate", rkeState, "--state-dir", state}
	stdout, stderr, code := run(t, args...)
	if code != 0 {
		t.Fatalf("adopt: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"kube-ca ", "kube-etcd-10-231-27-11 ", "kube-service-account-token ", "imported", rkeState, "Secrets encryption: RKE's state has none"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout+stderr, "PRIVATE KEY") || strings.Contains(stdout+stderr, "BEGIN") {
		t.Errorf("adopt printed key material:\n%s%s", stdout, stderr)
	}
	if _, err := pki.Load(state); err != nil {
		t.Fatalf("the state directory after adopt: %v", err)
	}
	if _, stderr, code := run(t, args...); code != 0 {
		t.Fatalf("adopt run again: exit %d\n%s", code, stderr)
	}

	// Another cluster's state: its own cluster.rkestate.
	other := filepath.Join(dir, "other.rkestate")
	rkerender.Run(t, bin, "-rkestate", other, clusterFile)
	_, stderr, code = run(t, "adopt", "-f", clusterFile, "--rkestate", other, "--state-dir", state)
	if code == 0 || !strings.Contains(stderr, "already holds a different kube-ca") {
		t.Fatalf("adopt over another cluster's state directory: exit %d\n%s", code, stderr)
	}

	moved := strings.Replace(yml, "10.231.27.12", "10.231.27.13", 1)
	if err := os.WriteFile(clusterFile, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = run(t, "adopt", "-f", clusterFile, "--rkestate", rkeState, "--state-dir", filepath.Join(dir, "state2"))
	if code == 0 || !strings.Contains(stderr, "node 10.231.27.12 is in "+rkeState+" but not in cluster.yml") {
		t.Fatalf("adopt of another cluster.yml's state: exit %d\n%s", code, stderr)
	}
	// A refused adopt leaves no state directory (nor lock file) behind.
	if _, err := os.Stat(filepath.Join(dir, "state2")); err == nil {
		t.Errorf("a refused adopt left its state directory %s behind", filepath.Join(dir, "state2"))
	}
}

// TestRefusedAdoptLeavesNoStateDir: an adopt refused (here, RKE's state
// is of other nodes) leaves neither the state directory it would have
// made nor its lock file.
func TestRefusedAdoptLeavesNoStateDir(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	clusterFile := filepath.Join(dir, "cluster.yml")
	yml := "cluster_name: adopted\nssh_key_path: " + dir + "/id\nnodes:\n" +
		"  - {address: 10.231.27.11, user: root, role: [etcd, controlplane, worker]}\n"
	if err := os.WriteFile(clusterFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	rkeState := filepath.Join(dir, "cluster.rkestate")
	if err := os.WriteFile(rkeState, []byte(`{"currentState":{"rkeConfig":{"clusterName":"adopted","nodes":[`+
		`{"address":"10.231.27.99","role":["etcd","controlplane","worker"]}]},`+
		`"certificatesBundle":{"kube-ca":{"certificatePEM":"x"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	_, stderr, code := run(t, "adopt", "-f", clusterFile, "--rkestate", rkeState, "--state-dir", state)
	if code == 0 || !strings.Contains(stderr, "node 10.231.27.99 is in "+rkeState+" but not in cluster.yml") {
		t.Fatalf("adopt of other nodes' state: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("a refused adopt left %s behind", state)
	}
}

// TestAdoptTableEscaped: a certificate's name in cluster.rkestate that
// holds a newline or a tab forges no row, nor column, of adopt's table.
func TestAdoptTableEscaped(t *testing.T) {
	forged := "kube-node\nkube-ca\t2099-01-01\timported\tcluster.rkestate"
	var out strings.Builder
	renderTaken(&out, &rkestate.Taken{Items: []rkestate.Item{
		{Name: pki.CACertName, Action: rkestate.Imported, NotAfter: time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC), Source: "cluster.rkestate"},
		{Name: forged, Action: rkestate.Unused, Source: "cluster.rkestate\nkube-admin"},
	}})
	table, _, _ := strings.Cut(out.String(), "\n\n")
	lines := strings.Split(table, "\n")
	if len(lines) != 3 {
		t.Fatalf("a table of 2 names has %d lines:\n%s", len(lines), table)
	}
	if !strings.Contains(lines[2], `kube-node\nkube-ca\t2099-01-01`) || !strings.HasPrefix(lines[2], `kube-node\n`) {
		t.Errorf("the forged name is not escaped on its own row: %q", lines[2])
	}
}
