package reconcile

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// TestNodesFile: the record of the last apply's nodes round-trips, is
// private, is empty when missing, and a damaged one says what to do.
func TestNodesFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if nodes, err := loadNodes(dir); err != nil || nodes != nil {
		t.Fatalf("no state directory: %v, %v", nodes, err)
	}
	want := []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleWorker}, SSHKeyPath: "/k"}}
	if err := statedir.WriteJSON(dir, nodesFile, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadNodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-saved +loaded):\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Join(dir, nodesFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("nodes file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	c := &spec.Cluster{Nodes: []spec.Node{{Address: "10.0.0.2"}}}
	if former := formerNodes(c, got); len(former) != 1 || former[0].Address != "10.0.0.1" {
		t.Errorf("former nodes %v", former)
	}
	if err := os.WriteFile(filepath.Join(dir, nodesFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadNodes(dir); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("damaged file: %v", err)
	}
}

// TestOpenClassifiesStateErrors: a damaged state file stalls (only a
// person can repair it), one that cannot be read is retried.
func TestOpenClassifiesStateErrors(t *testing.T) {
	c := &spec.Cluster{ClusterName: "c", Nodes: []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleWorker}}}}
	spec.SetDefaults(c)
	tr := struct{ transport.Transport }{} // Open connects to nothing
	tests := []struct {
		name       string
		prepare    func(dir string) error
		wantReason stall.Reason
		wantStall  bool
	}{
		{"damaged nodes.json", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, nodesFile), []byte("{"), 0o600)
		}, stall.StateDamaged, true},
		{"nodes.json unreadable", func(dir string) error {
			return os.Mkdir(filepath.Join(dir, nodesFile), 0o700)
		}, stall.Failed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tt.prepare(dir); err != nil {
				t.Fatal(err)
			}
			_, err := Open(c, Options{StateDir: dir, Transport: tr})
			reason, stalled := stall.Classify(err)
			if err == nil || reason != tt.wantReason || stalled != tt.wantStall {
				t.Errorf("Open: %v, classified %s stalled=%v; want %s stalled=%v", err, reason, stalled, tt.wantReason, tt.wantStall)
			}
		})
	}
}

// TestFormerNodeWithoutKey: a node of the last apply whose recorded key is
// gone no longer stops every apply: the session opens, and the node
// answers with an error that says where it comes from, as one that does
// not answer. A node of cluster.yml without its key still stops Open.
func TestFormerNodeWithoutKey(t *testing.T) {
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &spec.Cluster{ClusterName: "c", Nodes: []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleWorker}, SSHKeyPath: key}}}
	spec.SetDefaults(c)
	c.Rigger.SSH.KnownHostsFile = filepath.Join(dir, "known_hosts")
	gone := filepath.Join(dir, "old", "id_ed25519")
	former := spec.Node{Address: "10.0.0.9", Port: "22", User: "u", Role: []string{spec.RoleWorker}, SSHKeyPath: gone, Transport: spec.TransportSSH}
	state := filepath.Join(dir, "state")
	if err := statedir.WriteJSON(state, nodesFile, []spec.Node{c.Nodes[0], former}); err != nil {
		t.Fatal(err)
	}

	s, err := Open(c, Options{StateDir: state})
	if err != nil {
		t.Fatalf("Open with a former node's key gone: %v", err)
	}
	defer s.Close()
	_, err = s.tr.Docker(t.Context(), former.Address)
	var fe *reach.FormerNodeError
	var ne transport.NodeError
	if !errors.As(err, &fe) || !errors.As(err, &ne) {
		t.Fatalf("the former node: %v (%T), want a *reach.FormerNodeError, a transport.NodeError", err, err)
	}
	for _, want := range []string{"node 10.0.0.9", gone, "no longer in cluster.yml", nodesFile} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the former node's error %q does not say %q", err, want)
		}
	}

	c.Nodes[0].SSHKeyPath = gone
	if _, err := Open(c, Options{StateDir: state}); err == nil || !strings.Contains(err.Error(), "node 10.0.0.1") {
		t.Errorf("Open with a key of cluster.yml gone: %v, want an error naming node 10.0.0.1", err)
	}
}

// TestOpenRefusesRotateKey: rigger encrypt rotate-key's request
// (Options.RotateKey) is refused, before anything is read, for a
// cluster.yml without a key rigger generates, as RKE refuses it.
func TestOpenRefusesRotateKey(t *testing.T) {
	c := &spec.Cluster{ClusterName: "c", Nodes: []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleControlPlane}}}}
	spec.SetDefaults(c)
	if _, err := Open(c, Options{StateDir: t.TempDir(), RotateKey: true}); err == nil || !strings.Contains(err.Error(), "enabled is not true") {
		t.Fatalf("without encryption: %v", err)
	}
}
