package secretsenc

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/spec"
)

// TestStageEnds: the plan's operation as a staged.Operation. A stage that
// changes the API servers' configuration ends only when every controlplane
// node answered, and the record then moves to the next stage; the saved
// configuration drops the old key only when its last stage ends.
func TestStageEnds(t *testing.T) {
	dir := t.TempDir()
	cur, _ := New()
	k, _ := NewKey(cur.Names())
	cur.Keys = append(cur.Keys, k)
	if err := Save(dir, cur); err != nil {
		t.Fatal(err)
	}
	rec := Record{Op: &Op{Kind: KindRotate, Stage: StageDropOld, NewKey: k.Name}}
	if err := SaveRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	o := &observe.Cluster{Nodes: map[string]*observe.Node{
		"10.0.0.1": {Address: "10.0.0.1", Reachable: true, Files: map[string]string{desired.EncryptionConfigFile: observe.FileHash(cur.Marshal())}},
	}}
	p, err := Decide(Want{Generated: true, Enabled: true, StateDir: dir, Now: now}, cur, rec, o)
	if err != nil {
		t.Fatal(err)
	}
	var op staged.Operation = p
	cp := desired.Node{Address: "10.0.0.1", Roles: []string{spec.RoleControlPlane}}
	worker := desired.Node{Address: "10.0.0.2", Roles: []string{spec.RoleWorker}}
	if got := op.Restarts(&cp); !strings.Contains(got[desired.EncryptionConfigFile], string(StageDropOld)) || len(op.Restarts(&worker)) > 0 {
		t.Fatalf("restarts at %s: controlplane %v, worker %v; want the API servers to read the file again", StageDropOld, got, op.Restarts(&worker))
	}
	if id, title := op.Title(); id != plan.Phase("secrets-encryption") || !strings.Contains(title, "stage drop-old-keys") || op.Next() != "" || !op.Work() {
		t.Fatalf("title %s %q, next %q, work %v", id, title, op.Next(), op.Work())
	}
	log := slog.New(slog.DiscardHandler)
	after, err := op.Before(staged.Start{Dir: dir, Now: now, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	end := func(unreachable ...string) staged.End {
		return staged.End{Dir: dir, Now: now, Desired: &desired.Cluster{Nodes: []desired.Node{cp, worker}}, Unreachable: unreachable, Log: log}
	}
	if done, err := after(context.Background(), end("10.0.0.1")); done || err == nil || !strings.Contains(err.Error(), "10.0.0.1") {
		t.Fatalf("stage with the controlplane node unreachable: done %v, %v; want an error naming it", done, err)
	}
	if got, _ := LoadRecord(dir); got.Op == nil || got.Op.Stage != StageDropOld {
		t.Fatalf("record after the failed stage: %+v, want it still at %s", got.Op, StageDropOld)
	}
	if done, err := after(context.Background(), end("10.0.0.2")); !done || err != nil {
		t.Fatalf("stage with a worker unreachable: done %v, %v", done, err)
	}
	got, _ := LoadRecord(dir)
	saved, _ := Load(dir)
	if got.Op != nil || got.LastRotatedKey != k.Name || len(saved.Keys) != 1 || saved.Keys[0].Name != k.Name {
		t.Fatalf("after the last stage: record %+v, keys %v; want no operation, %s last rotated and alone", got, saved.Names(), k.Name)
	}
}

// TestDecideKeepsRKEsFile: a node's encryption.yaml as RKE's file deployer
// writes it (`echo -e "$FILE_DEPLOY"`: rigger's text and a newline) holds
// the state directory's key; another key, or another text, does not.
func TestDecideKeepsRKEsFile(t *testing.T) {
	dir := t.TempDir()
	cur, _ := New()
	other, _ := New()
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	decide := func(file []byte) error {
		o := &observe.Cluster{Nodes: map[string]*observe.Node{
			"10.0.0.1": {Address: "10.0.0.1", Reachable: true, Files: map[string]string{desired.EncryptionConfigFile: observe.FileHash(file)}},
		}}
		_, err := Decide(Want{Generated: true, Enabled: true, StateDir: dir, Now: now}, cur, Record{}, o)
		return err
	}
	for name, file := range map[string][]byte{"rigger's": cur.Marshal(), "RKE's": append(cur.Marshal(), '\n')} {
		if err := decide(file); err != nil {
			t.Errorf("the node's file as %s file deployer writes it: %v", name, err)
		}
	}
	for name, file := range map[string][]byte{"another key": append(other.Marshal(), '\n'), "two newlines": append(cur.Marshal(), '\n', '\n')} {
		if err := decide(file); err == nil || !strings.Contains(err.Error(), "is not the one node 10.0.0.1 holds") {
			t.Errorf("the node's file with %s: %v, want it refused", name, err)
		}
	}
}
