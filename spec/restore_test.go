package spec

import (
	"strings"
	"testing"
)

// TestRestoreChecks: a restore request is checked when cluster.yml is
// read, as rigger would carry it out.
func TestRestoreChecks(t *testing.T) {
	const nodes = "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n"
	tests := []struct {
		name string
		yml  string
		// want is "" for no diagnostic, else severity and path.
		want string
	}{
		{"no restore", "", ""},
		{"request", "restore: {restore: true, snapshot_name: rigger-c-20261122T013000Z-n1}", ""},
		{"request with id", "restore: {restore: true, snapshot_name: snap1, id: 2026-11-22 incident 42}", ""},
		{"no snapshot name", "restore: {restore: true}", "error restore.snapshot_name"},
		{"RKE's scheduled name, with colons", "restore: {restore: true, snapshot_name: 2026-11-22T01:30:00Z_etcd}", ""},
		{"RKE's unnamed name, local time", "restore: {restore: true, snapshot_name: rke_etcd_snapshot_2026-11-22T02:30:00+01:00}", ""},
		{"a name with a slash", "restore: {restore: true, snapshot_name: a/b}", "error restore.snapshot_name"},
		{"a name starting with a colon", `restore: {restore: true, snapshot_name: ":a"}`, "error restore.snapshot_name"},
		{"sidecar name", "restore: {restore: true, snapshot_name: snap1.json}", "error restore.snapshot_name"},
		{"long name", "restore: {restore: true, snapshot_name: " + strings.Repeat("a", 201) + "}", "error restore.snapshot_name"},
		{"long id", "restore: {restore: true, snapshot_name: s, id: " + strings.Repeat("a", 201) + "}", "error restore.id"},
		{"id with a tab", `restore: {restore: true, snapshot_name: s, id: "a\tb"}`, "error restore.id"},
		{"id with a trailing space", `restore: {restore: true, snapshot_name: s, id: "a "}`, "error restore.id"},
		{"id without a request", "restore: {snapshot_name: s, id: r1}", "warning restore.id"},
		{"unknown key", "restore: {restore: true, snapshot_name: s, request_id: r1}", "error restore.request_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, diags := Parse([]byte(nodes+tt.yml+"\n"), "c.yml")
			var got []string
			for _, d := range diags {
				got = append(got, string(d.Severity)+" "+d.Path)
			}
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("diagnostics %v, want none:\n%v", got, diags)
			case tt.want != "" && (len(got) != 1 || got[0] != tt.want):
				t.Errorf("diagnostics %v, want [%s]:\n%v", got, tt.want, diags)
			}
		})
	}
}
