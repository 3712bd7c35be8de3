package agenttun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStoresShareABackend: what one process writes (a token issued, a
// token used, a node's certificate, an approval) counts for another on
// the same backend at once, as for serve's replicas and rigger agent
// command beside them.
func TestStoresShareABackend(t *testing.T) {
	b := &memory{}
	now := time.Now()
	a, err := NewStore(t.Context(), b, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewStore(t.Context(), b, now)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.IssueToken("c1", "n1", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.checkToken("c1", tok, now); err != nil {
		t.Fatalf("a token issued by one store, checked by the other: %v", err)
	}
	if err := c.useToken(tok); err != nil {
		t.Fatal(err)
	}
	if err := a.useToken(tok); err != errBadToken {
		t.Fatalf("a token used by one store, used again by the other: %v, want errBadToken", err)
	}
	if err := a.setNode("c1", "n1", "01", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if s, err := c.nodeSerial("c1", "n1"); s != "01" || err != nil {
		t.Fatalf("the other store's serial of n1: %q, %v; want 01", s, err)
	}
	if err := c.setNode("c1", "n1", "02", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.nodeSerial("c1", "n1"); s != "02" {
		t.Fatalf("the first store's serial of n1 after the other replaced it: %q, want 02", s)
	}
	if nodes, err := a.nodes("c1"); err != nil || len(nodes) != 1 || nodes[0] != "n1" {
		t.Fatalf("nodes(c1) = %v, %v", nodes, err)
	}
	ap := Approval{Cluster: "c1", Node: "n1", Key: "abcd", Requested: now}
	if ok, err := a.askApproval(ap); ok || err != nil {
		t.Fatalf("askApproval = %v, %v", ok, err)
	}
	if _, err := c.Approve("c1", "n1", ""); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.askApproval(ap); !ok || err != nil {
		t.Fatalf("askApproval after the other store approved it = %v, %v; want approved", ok, err)
	}
	if ok, _ := c.askApproval(ap); ok {
		t.Fatal("an approval used twice")
	}
	if err := c.revoke("c1", "n1"); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.nodeSerial("c1", "n1"); s != "" {
		t.Fatalf("n1 revoked by one store keeps serial %q in the other", s)
	}
}

// TestDirMovesAgentsJSON: the nodes' certificates an older rigger kept in
// agents.json are records of their own once the directory is opened, and
// the file is gone.
func TestDirMovesAgentsJSON(t *testing.T) {
	dir := t.TempDir()
	old, err := OpenStore(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Now().UTC().Truncate(time.Second)
	b, _ := json.Marshal(map[string]any{"nodes": map[string]any{
		"c1/n1":  map[string]any{"serial": "0a", "issued": issued},
		"c2/n-2": map[string]any{"serial": "0b", "issued": issued, "expires": issued.Add(time.Hour)},
	}})
	if err := os.WriteFile(filepath.Join(dir, stateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s.CA().Checksum() != old.CA().Checksum() {
		t.Fatal("the CA changed")
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); !os.IsNotExist(err) {
		t.Fatalf("agents.json is still there: %v", err)
	}
	for _, n := range []struct{ cluster, node, serial string }{{"c1", "n1", "0a"}, {"c2", "n-2", "0b"}} {
		rec, valid, err := s.validCert(n.cluster, n.node, time.Now())
		if err != nil || rec.Serial != n.serial || !valid || !rec.Issued.Equal(issued) {
			t.Errorf("node %s/%s after the move: %+v valid %v, %v; want serial %s issued %s", n.cluster, n.node, rec, valid, err, n.serial, issued)
		}
	}
}

// TestDirIncompleteCARefused: a directory with the CA's key and no
// certificate is refused, never given a new CA.
func TestDirIncompleteCARefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenStore(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, caCertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, time.Now()); err == nil {
		t.Fatal("a directory holding the CA's key alone was opened")
	}
	if _, err := os.Stat(filepath.Join(dir, caCertFile)); !os.IsNotExist(err) {
		t.Fatal("a new CA certificate was written")
	}
}
