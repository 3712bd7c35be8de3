package main

import (
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdsnap"
)

// TestRestoreNotice: what plan and apply say about cluster.yml's restore
// request.
func TestRestoreNotice(t *testing.T) {
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		req  *etcdsnap.RestoreRequest
		want string
	}{
		{"none", nil, ""},
		{"pending", &etcdsnap.RestoreRequest{ID: "r1", SnapshotName: "snap1"},
			"Restore requested: snapshot snap1 (id r1) — apply restores it first"},
		{"done", &etcdsnap.RestoreRequest{ID: "r1", SnapshotName: "snap1", Done: &etcdsnap.RestoreRecord{StartedAt: at.Add(-time.Minute), FinishedAt: at}},
			"restore id r1 was done at 2026-11-22 03:00:00 UTC; nothing to restore"},
		{"failed", &etcdsnap.RestoreRequest{ID: "r1", SnapshotName: "snap1", Done: &etcdsnap.RestoreRecord{StartedAt: at, FinishedAt: at, Error: "restore snapshot snap1: apply: boom\nState of the cluster now:"}},
			"restore id r1 failed at 2026-11-22 03:00:00 UTC and is not tried again (give restore.id a new value to try again): restore snapshot snap1: apply: boom"},
		{"interrupted", &etcdsnap.RestoreRequest{ID: "r1", SnapshotName: "snap1", Done: &etcdsnap.RestoreRecord{StartedAt: at}},
			"restore id r1 was started at 2026-11-22 03:00:00 UTC and did not finish (rigger stopped during it); it is not tried again: check the cluster (rigger status), and give restore.id a new value to restore again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := restoreNotice(tt.req); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
