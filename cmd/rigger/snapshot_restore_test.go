package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdsnap"
)

func TestSnapshotRestoreRefusesBadNamesBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/cluster.yml"
	// 192.0.2.0/24 is TEST-NET-1: nothing answers there, nothing is tried.
	yml := "nodes:\n  - {address: 192.0.2.1, user: u, role: [etcd, controlplane, worker]}\n"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "snapshot", "restore", "../x", "-f", path, "--state-dir", dir+"/state", "--yes")
	if code != 1 || !strings.Contains(errOut, "snapshot name") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(dir + "/state"); !os.IsNotExist(err) {
		t.Errorf("state directory made for a refused restore: %v", err)
	}
}

func TestRenderRestore(t *testing.T) {
	sc := &etcdsnap.Sidecar{Name: "snap1", Node: "10.0.0.1", TakenAt: time.Date(2026, 11, 22, 1, 30, 0, 0, time.UTC),
		Size: 2048, Revision: 77, TotalKeys: 12, EtcdVersion: "3.5.16"}
	chk := &etcdsnap.RestoreCheck{Name: "snap1", Sidecar: sc, ControlPlane: []string{"10.0.0.1"},
		Members: []etcdsnap.RestoreMember{{Node: "10.0.0.1"}, {Node: "10.0.0.2"}}}
	var b bytes.Buffer
	renderRestoreCheck(&b, chk)
	renderRestored(&b, &etcdsnap.RestoreResult{Check: chk, Restored: []string{"10.0.0.1", "10.0.0.2"},
		MovedAside: map[string]string{"10.0.0.2": "/var/lib/etcd/member.before-restore-20261122T020000Z"}}, 1500*time.Millisecond)
	out := b.String()
	for _, want := range []string{
		"Snapshot snap1: taken 2026-11-22 01:30:00 on 10.0.0.1, 2048 bytes, revision 77, 12 keys, etcd 3.5.16; verified on 2 etcd node(s).",
		"stops the control plane (kube-apiserver, kube-controller-manager, kube-scheduler) on 10.0.0.1 and etcd on 10.0.0.1, 10.0.0.2,",
		"Snapshot snap1 restored in 1.5s on 2 etcd member(s)",
		"  10.0.0.2: /var/lib/etcd/member.before-restore-20261122T020000Z\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderRestoreWithoutSidecar(t *testing.T) {
	chk := &etcdsnap.RestoreCheck{Name: "before-rigger", Source: "10.0.0.2", Size: 2080, SHA256: "9f2c", ControlPlane: []string{"10.0.0.1"},
		Status:  etcdsnap.Status{Revision: 77, TotalKeys: 12, Hash: 5},
		Members: []etcdsnap.RestoreMember{{Node: "10.0.0.1"}, {Node: "10.0.0.2"}}}
	var b bytes.Buffer
	renderRestoreCheck(&b, chk)
	want := "Snapshot before-rigger: taken without rigger (RKE's?): it has no sidecar, so rigger cannot check which cluster's CA it belongs to " +
		"(restore it only into the cluster it was taken from); restoring 10.0.0.2's copy on every member, verified by etcd's own hash: " +
		"2080 bytes, sha256 9f2c, revision 77, 12 keys.\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
	if q := withoutSidecarNote(chk); q != ", taken without rigger (RKE's?), whose CA cannot be checked, restoring 10.0.0.2's copy, verified by etcd's own hash" {
		t.Errorf("question's note %q", q)
	}
	chk.Sidecar = &etcdsnap.Sidecar{Name: "before-rigger"}
	if q := withoutSidecarNote(chk); q != "" {
		t.Errorf("question's note for a snapshot with a sidecar %q", q)
	}
}
