package certrotate

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/spec"
)

// TestStagedLeafRotation: a rotation of leaf certificates as a
// staged.Operation: its files' readers restart, Before records it as under
// way, and the stage ends only once every node ran the plan.
func TestStagedLeafRotation(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	c := &spec.Cluster{ClusterName: "c", Nodes: []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleWorker}}}}
	spec.SetDefaults(c)
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), now)
	if err != nil {
		t.Fatal(err)
	}
	d := Decide(Record{}, nil, &pki.Rotation{Services: []string{"kubelet"}})
	var op staged.Operation = &Plan{Decision: d, Active: &Active{Rotation: *d.Issue, From: d.From, Names: []string{pki.KubeNodeCertName}}, Set: set}
	cert, key := pki.NodePath(pki.KubeNodeCertName)
	n := &desired.Node{Address: "10.0.0.1", Files: map[string][]byte{cert: nil, key: nil, "/etc/kubernetes/other.yaml": nil}}
	if got := op.Restarts(n); len(got) != 2 || got[cert] != plan.ReasonRotation || got[key] != plan.ReasonRotation {
		t.Errorf("restarts %v, want the kube-node certificate and key", got)
	}
	if id, title := op.Title(); id != "" || title != "" || op.Next() != "" || !op.Work() || op.Blocked() != nil {
		t.Errorf("a leaf rotation: title %q %q, next %q, work %v, blocked %v", id, title, op.Next(), op.Work(), op.Blocked())
	}
	log := slog.New(slog.DiscardHandler)
	after, err := op.Before(staged.Start{Dir: dir, Now: now, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := Load(dir); err != nil || rec.Active == nil || rec.Active.Names[0] != pki.KubeNodeCertName {
		t.Fatalf("record after Before: %+v, %v; want the rotation under way", rec, err)
	}
	if done, err := after(context.Background(), staged.End{Dir: dir, Now: now, Unreachable: []string{"10.0.0.1"}, Log: log}); done || err != nil {
		t.Fatalf("a node not reached: done %v, %v; want the stage not done, no error", done, err)
	}
	if rec, _ := Load(dir); rec.Active == nil {
		t.Fatal("the rotation ended with a node not reached")
	}
	if done, err := after(context.Background(), staged.End{Dir: dir, Now: now, Log: log}); !done || err != nil {
		t.Fatalf("every node reached: done %v, %v", done, err)
	}
	if rec, _ := Load(dir); rec.Active != nil {
		t.Fatalf("record after the stage: %+v, want no rotation under way", rec)
	}
}
