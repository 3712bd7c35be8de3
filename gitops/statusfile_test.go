package gitops

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

func TestSameMeaning(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	base := func(change func(*StatusFile)) []byte {
		f := &StatusFile{APIVersion: "rigger.io/v1", Kind: "ClusterStatus", Cluster: "c", ObservedRevision: "abc",
			LastReconcile: &LastReconcile{Trigger: "change", FinishedAt: t0, Duration: "1s", Steps: 3},
			Conditions:    []Condition{{Type: ConditionReady, Status: conditionTrue, Reason: "ReconciliationSucceeded", LastTransitionTime: t0}},
			Status:        &report.Status{Cluster: "c", ObservedAt: t0, Nodes: []report.NodeStatus{{Address: "10.0.0.1", Reachable: true}}}}
		if change != nil {
			change(f)
		}
		b, err := f.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name   string
		change func(*StatusFile)
		same   bool
	}{
		{"identical", nil, true},
		{"observed later", func(f *StatusFile) { f.Status.ObservedAt = t0.Add(time.Hour) }, true},
		{"another reconcile, nothing to do", func(f *StatusFile) {
			f.LastReconcile = &LastReconcile{Trigger: "drift-check", FinishedAt: t0.Add(time.Hour), Duration: "300ms"}
		}, true},
		{"new revision", func(f *StatusFile) { f.ObservedRevision = "def" }, false},
		{"node unreachable", func(f *StatusFile) { f.Status.Nodes[0].Reachable = false }, false},
		{"condition changed", func(f *StatusFile) { f.Conditions[0].Status = conditionFalse }, false},
		{"drift repaired", func(f *StatusFile) {
			f.Drift = []DriftRepair{{RepairedAt: t0, Node: "10.0.0.1", Component: "kube-proxy", Action: "create"}}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SameMeaning(base(nil), base(tt.change)); got != tt.same {
				t.Errorf("SameMeaning = %v, want %v", got, tt.same)
			}
		})
	}
	if SameMeaning([]byte("{not yaml"), base(nil)) {
		t.Error("a status.yml that does not parse means the same as a good one")
	}
	if !strings.HasPrefix(string(base(nil)), "# Written by rigger serve") {
		t.Error("status.yml does not start with its header")
	}
	if got := ParseStatus(base(nil)); got == nil || got.ObservedRevision != "abc" {
		t.Errorf("ParseStatus lost the revision: %+v", got)
	}
}

func TestConditions(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	inSync := &report.Status{}
	pending := &report.Status{PendingSteps: 2}
	unreachable := &report.Status{Nodes: []report.NodeStatus{{Address: "10.0.0.2"}, {Address: "10.0.0.3", Reachable: true}}}
	type want struct{ ready, reconciling, stalled, reason string }
	tests := []struct {
		name string
		out  outcome
		prev []Condition
		want want
		// since is the Ready condition's transition time.
		since time.Time
	}{
		{"converged", outcome{status: inSync}, nil, want{"True", "False", "False", "ReconciliationSucceeded"}, now},
		{"converged again keeps the transition time", outcome{status: inSync},
			[]Condition{{Type: ConditionReady, Status: "True", LastTransitionTime: earlier}},
			want{"True", "False", "False", "ReconciliationSucceeded"}, earlier},
		{"failed step", outcome{err: errors.New("node 10.0.0.1: kube-apiserver not healthy"), retry: true, status: pending},
			[]Condition{{Type: ConditionReady, Status: "True", LastTransitionTime: earlier}},
			want{"False", "True", "False", "ReconciliationFailed"}, now},
		{"invalid cluster.yml", outcome{stalled: "InvalidSpec", err: errors.New("cluster.yml:3: unknown key")},
			nil, want{"False", "False", "True", "InvalidSpec"}, now},
		{"removal guard", outcome{stalled: "RemovalGuard", err: errors.New("removes 3 of 4")}, nil,
			want{"False", "False", "True", "RemovalGuard"}, now},
		{"suspended in sync", outcome{suspended: true, status: inSync}, nil, want{"True", "False", "False", "Suspended"}, now},
		{"suspended with changes", outcome{suspended: true, status: pending}, nil, want{"Unknown", "False", "False", "Suspended"}, now},
		{"node unreachable", outcome{retry: true, status: unreachable}, nil, want{"False", "True", "False", "NodesUnreachable"}, now},
		{"still pending", outcome{status: pending}, nil, want{"False", "True", "False", "Progressing"}, now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conds := conditions(tt.out, "0123456789abcdef", tt.prev, now)
			got := map[string]Condition{}
			for _, c := range conds {
				got[c.Type] = c
			}
			g := want{got[ConditionReady].Status, got[ConditionReconciling].Status, got[ConditionStalled].Status, got[ConditionReady].Reason}
			if diff := cmp.Diff(tt.want, g, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if !got[ConditionReady].LastTransitionTime.Equal(tt.since) {
				t.Errorf("Ready's transition time = %v, want %v", got[ConditionReady].LastTransitionTime, tt.since)
			}
			if tt.out.err != nil && !strings.Contains(got[ConditionReady].Message, tt.out.err.Error()) {
				t.Errorf("Ready's message %q does not say why (%v)", got[ConditionReady].Message, tt.out.err)
			}
		})
	}
}

// TestStatusBounded: a 1 MB value that ends up in errors and reasons (the
// reconcile's error, a drift repair, the snapshot schedule, a node) gives
// a small status.yml: every free-text field is cut, saying how much, and
// the error is written once.
func TestStatusBounded(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	big := strings.Repeat("x", 1<<20)
	const mark = "UNIQUE-ERROR-START"
	srv := &Server{cfg: Config{StateDir: t.TempDir(), DriftInterval: time.Hour, ParseTimeout: time.Minute, Now: func() time.Time { return now },
		Open: func(*spec.Cluster, reconcile.Options) (Session, error) {
			return nil, &stall.Error{Reason: stall.InvalidSpec, Stalls: true, Err: errors.New(mark + big)}
		}}, workers: map[string]*worker{}}
	w := &worker{srv: srv, path: "clusters/c/cluster.yml", log: slog.New(slog.DiscardHandler),
		drift:     []DriftRepair{{RepairedAt: now, Node: "10.0.0.1", Component: "kubelet", Action: "replace", Reason: "env changed: +A=" + big, Error: big}},
		snapshots: &SnapshotStatus{Error: big}}
	srv.workers[w.path] = w
	out := w.attempt(t.Context(), w.log, clusterRef{Path: w.path, Content: []byte(validYML)}, true)
	out.status = &report.Status{Cluster: "c", Nodes: []report.NodeStatus{{Address: "10.0.0.1", Error: big}}, KubernetesError: big}
	b, err := w.statusFile(out, "change", now, now).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= 64<<10 {
		t.Errorf("status.yml is %d bytes, want less than 64 KiB", len(b))
	}
	if n := strings.Count(string(b), mark); n != 1 {
		t.Errorf("the error is written %d times, want once", n)
	}
	if !strings.Contains(string(b), "bytes cut") {
		t.Errorf("status.yml does not say what was cut:\n%.2000s", b)
	}
	f := ParseStatus(b)
	if f == nil {
		t.Fatalf("status.yml does not parse:\n%.2000s", b)
	}
	for _, c := range f.Conditions {
		if c.Type == ConditionReady && !strings.HasPrefix(c.Message, mark) {
			t.Errorf("Ready's message %.100q does not say why", c.Message)
		}
	}
}

// TestParseStatusTooLarge: a status.yml over MaxStatusSize (pushed by
// someone else) is not parsed but replaced.
func TestParseStatusTooLarge(t *testing.T) {
	f := &StatusFile{APIVersion: "rigger.io/v1", Kind: "ClusterStatus", Cluster: "c"}
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if ParseStatus(b) == nil || !SameMeaning(b, b) {
		t.Fatal("a small status.yml is not read")
	}
	large := append(b, "# "+strings.Repeat("x", MaxStatusSize)+"\n"...)
	if ParseStatus(large) != nil {
		t.Error("a status.yml over MaxStatusSize is parsed")
	}
	if SameMeaning(large, large) {
		t.Error("a status.yml over MaxStatusSize means the same as itself: it would be kept")
	}
}
