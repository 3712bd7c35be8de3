package gitops

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/report"
)

// maxFuzzInput bounds the fuzzers' inputs: large enough for every shape of
// status.yml, small enough that a blow-up shows in the allocations.
const maxFuzzInput = 64 << 10

// allocBudget is what reading and writing back a status.yml of n bytes may
// allocate: linear in n. More is a blow-up (aliases expanded, quadratic
// work), which fails the fuzz target as a crash does.
func allocBudget(n int) uint64 { return 4<<20 + 2000*uint64(n) }

// allocated is how many bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// statusSeeds are status.yml files as rigger writes them, and hostile ones.
func statusSeeds(t testing.TB) [][]byte {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	f := &StatusFile{APIVersion: "rigger.io/v1", Kind: "ClusterStatus", Cluster: "c", ObservedRevision: "abc",
		Source:        Source{Repository: "https://example.com/r.git", Branch: "main", Path: "clusters/c/cluster.yml", Blob: "0123"},
		LastReconcile: &LastReconcile{Trigger: "change", FinishedAt: t0, Duration: "1s", Steps: 3},
		Conditions:    []Condition{{Type: ConditionReady, Status: conditionTrue, Reason: ReasonSucceeded, Message: "ok", LastTransitionTime: t0}},
		Drift:         []DriftRepair{{RepairedAt: t0, Node: "10.0.0.1", Component: "kubelet", Action: "replace", Reason: "image changed a → b"}},
		Snapshots:     &SnapshotStatus{Last: &SnapshotRef{Name: "s", Taken: t0, Size: 1 << 40}, Next: &t0, Removed: []string{"old"}, NotInS3: []string{"s"}, Uploaded: []string{"older"}},
		Restore:       &RestoreStatus{ID: "1", Snapshot: "s", At: t0},
		Status: &report.Status{Cluster: "c", ObservedAt: t0, Nodes: []report.NodeStatus{{Address: "10.0.0.1", Reachable: true}},
			Certificates: map[string]time.Time{"kube-ca": t0}}}
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{b, nil, []byte("{}"), []byte("conditions: [{type: Ready, status: 'True'}]\n"),
		[]byte("a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\npendingAgents: [*b, *b, *b, *b]\n"),
		[]byte("status: {nodes: [{address: 1, reachable: yes}], pending_steps: 1e999}\n"),
		[]byte(strings.Repeat("[", 500) + strings.Repeat("]", 500)),
		[]byte("drift: !!binary aGVsbG8=\n"), []byte("\xff\xfe"), []byte("- - -\n  :\n")}
}

// FuzzParseStatus reads any status.yml, as one pushed by someone else may
// be: no crash, no blow-up, and what parses is written back and read again.
func FuzzParseStatus(f *testing.F) {
	for _, s := range statusSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxFuzzInput {
			t.Skip("larger than the fuzzers' bound")
		}
		var out []byte
		n := allocated(func() {
			st := ParseStatus(b)
			if st == nil {
				return
			}
			var err error
			if out, err = st.Marshal(); err != nil {
				t.Fatalf("a status.yml that parses is not written back: %v", err)
			}
			if ParseStatus(out) == nil {
				t.Fatalf("the status.yml written back does not parse:\n%s", out)
			}
		})
		if n > allocBudget(len(b)) {
			t.Fatalf("%d bytes in allocated %d bytes (budget %d); wrote %d bytes", len(b), n, allocBudget(len(b)), len(out))
		}
	})
}

// FuzzSameMeaning compares any two status.yml contents: no crash, no
// blow-up, symmetric, and what parses means the same as itself.
func FuzzSameMeaning(f *testing.F) {
	seeds := statusSeeds(f)
	for i, s := range seeds {
		f.Add(s, seeds[(i+1)%len(seeds)])
		f.Add(s, s)
	}
	f.Add(seeds[0], bytes.ReplaceAll(seeds[0], []byte("2026-11-22T03:00:00Z"), []byte("2026-11-23T03:00:00Z")))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if len(a)+len(b) > maxFuzzInput {
			t.Skip("larger than the fuzzers' bound")
		}
		n := allocated(func() {
			if SameMeaning(a, b) != SameMeaning(b, a) {
				t.Fatalf("SameMeaning is not symmetric")
			}
			if len(a) > 0 && ParseStatus(a) != nil && !SameMeaning(a, a) {
				t.Fatalf("a status.yml that parses does not mean the same as itself")
			}
		})
		if n > 3*allocBudget(len(a)+len(b)) {
			t.Fatalf("%d bytes in allocated %d bytes (budget %d)", len(a)+len(b), n, 3*allocBudget(len(a)+len(b)))
		}
	})
}
