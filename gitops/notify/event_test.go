package notify

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/gitops"
)

func TestEvents(t *testing.T) {
	at := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	ready := status("prod", "r1", "True", "ReconciliationSucceeded", "the nodes run what cluster.yml of r1 says", false)
	failing := status("prod", "r1", "False", "NodesUnreachable", "1 node(s) could not be reached", false)
	failing2 := status("prod", "r1", "False", "ApplyFailed", "another error", false)
	stalled := status("prod", "r1", "False", "DuplicateCluster", "two cluster.yml files name prod", true)
	suspended := status("prod", "r1", "Unknown", "Suspended", "2 step(s) are pending", false)
	withSnap := func(f *gitops.StatusFile, err, last string) *gitops.StatusFile {
		g := *f
		g.Snapshots = &gitops.SnapshotStatus{Error: err}
		if last != "" {
			g.Snapshots.Last = &gitops.SnapshotRef{Name: last}
		}
		return &g
	}
	type ev struct {
		Kind    Kind
		Reason  string
		Message string
	}
	for _, tc := range []struct {
		name       string
		prev, next *gitops.StatusFile
		want       []ev
	}{
		{"ready stays ready", ready, ready, nil},
		{"ready to not ready", ready, failing, []ev{{KindNotReady, "NodesUnreachable", "1 node(s) could not be reached"}}},
		{"not ready to ready", failing, ready, []ev{{KindReady, "ReconciliationSucceeded", "the nodes run what cluster.yml of r1 says"}}},
		{"not ready for another reason: no transition", failing, failing2, nil},
		{"stalls: one event, with Ready's reason", ready, stalled, []ev{{KindStalled, "DuplicateCluster", "two cluster.yml files name prod"}}},
		{"stalls after failing", failing, stalled, []ev{{KindStalled, "DuplicateCluster", "two cluster.yml files name prod"}}},
		{"stays stalled", stalled, stalled, nil},
		{"stalled to failing: no transition of Ready", stalled, failing, nil},
		{"first status, failing", nil, failing, []ev{{KindNotReady, "NodesUnreachable", "1 node(s) could not be reached"}}},
		{"first status, ready", nil, ready, []ev{{KindReady, "ReconciliationSucceeded", "the nodes run what cluster.yml of r1 says"}}},
		{"suspended: Ready Unknown is no transition", ready, suspended, nil},
		{"snapshot fails", ready, withSnap(ready, "etcd-1: no space left", ""), []ev{{KindSnapshotFailed, "SnapshotFailed", "etcd-1: no space left"}}},
		{"snapshot fails again the same way", withSnap(ready, "etcd-1: no space left", ""), withSnap(ready, "etcd-1: no space left", ""), nil},
		{"snapshot fails another way", withSnap(ready, "a", ""), withSnap(ready, "b", ""), []ev{{KindSnapshotFailed, "SnapshotFailed", "b"}}},
		{"snapshot succeeds again", withSnap(ready, "a", "old"), withSnap(ready, "", "rigger-2026"), []ev{{KindSnapshotRecovered, "SnapshotSucceeded", "etcd snapshot rigger-2026 taken"}}},
		{"not ready and snapshot failed", ready, withSnap(failing, "x", ""), []ev{
			{KindNotReady, "NodesUnreachable", "1 node(s) could not be reached"}, {KindSnapshotFailed, "SnapshotFailed", "x"}}},
		{"no next status", ready, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Events(gitops.StatusUpdate{Path: "prod/cluster.yml", Revision: "r2", Prev: tc.prev, Next: tc.next}, at)
			var kinds []ev
			for _, e := range got {
				kinds = append(kinds, ev{e.Kind, e.Reason, e.Message})
				if e.Cluster != "prod" || e.Path != "prod/cluster.yml" || e.Revision != "r2" || !e.Time.Equal(at) ||
					e.Repository != "https://git.example/ops/clusters.git" || e.Branch != "main" {
					t.Errorf("event %+v lacks the cluster, path, revision, repository or time", e)
				}
				if want := map[Kind]string{KindReady: SeverityInfo, KindSnapshotRecovered: SeverityInfo}[e.Kind]; want == "" && e.Severity != SeverityError || want != "" && e.Severity != want {
					t.Errorf("%s has severity %s", e.Kind, e.Severity)
				}
			}
			if d := cmp.Diff(tc.want, kinds); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
		})
	}
}
