package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdsnap"
)

func TestRenderSavedKeepsTheLocalSnapshotInSight(t *testing.T) {
	sc := &etcdsnap.Sidecar{Name: "rigger-prod-20261122T013000Z-node1", Size: 2048, SHA256: strings.Repeat("ab", 32), Revision: 77}
	res := &etcdsnap.SaveResult{
		Sidecar: sc,
		Copies:  []etcdsnap.Copy{{Node: "10.0.0.1"}, {Node: "10.0.0.2", Err: errors.New("connection refused")}, {Node: "10.0.0.3"}},
		S3Err:   &etcdsnap.UploadError{Name: sc.Name, Err: errors.New("access denied")},
	}
	var b bytes.Buffer
	renderSaved(&b, res, 1500*time.Millisecond)
	out := b.String()
	for _, want := range []string{
		"10.0.0.2: FAILED copy: connection refused",
		"s3: FAILED: upload snapshot rigger-prod-20261122T013000Z-node1 to s3: access denied; the snapshot is kept on the etcd nodes",
		"Snapshot rigger-prod-20261122T013000Z-node1 saved in 1.5s: 2048 bytes",
		"on 2 of 3 etcd node(s) under /opt/rke/etcd-snapshots; NOT uploaded to S3.",
		"Not on 10.0.0.2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderSnapshots(t *testing.T) {
	var b bytes.Buffer
	renderSnapshots(&b, nil)
	if b.String() != "No snapshots.\n" {
		t.Errorf("empty list: %q", b.String())
	}
	b.Reset()
	at := time.Date(2026, 11, 22, 1, 30, 0, 0, time.UTC)
	renderSnapshots(&b, []etcdsnap.Info{
		{Name: "rke-old", TakenAt: at, Size: 10, Nodes: []string{"10.0.0.1"}},
		{Name: "rigger-prod-20261122T013000Z-node1", TakenAt: at, Size: 2048, Nodes: []string{"10.0.0.1"}, Damaged: []string{"10.0.0.2"},
			S3: "s3://b/f/rigger-prod-20261122T013000Z-node1", Sidecar: &etcdsnap.Sidecar{SHA256: strings.Repeat("0123456789abcdef", 4)}},
	})
	out := b.String()
	for _, want := range []string{"NAME", "rke-old", "(no sidecar)", "2026-11-22 01:30:00", "0123456789abcdef…",
		"10.0.0.1, 10.0.0.2 (DAMAGED: size differs), s3://b/f/rigger-prod-20261122T013000Z-node1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSnapshotRefusesBadNamesBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/cluster.yml"
	// 192.0.2.0/24 is TEST-NET-1: nothing answers there, nothing is tried.
	yml := "nodes:\n  - {address: 192.0.2.1, user: u, role: [etcd, controlplane, worker]}\n"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"snapshot", "delete", "../../etc/passwd"},
		{"snapshot", "save", "--name", "x.json"},
	} {
		_, errOut, code := run(t, append(args, "-f", path, "--state-dir", dir+"/state")...)
		if code != 1 || !strings.Contains(errOut, "snapshot name") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
