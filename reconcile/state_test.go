package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/spec"
)

// TestNodesFile: the record of the last apply's nodes round-trips, is
// private, is empty when missing, and a damaged one says what to do.
func TestNodesFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if nodes, err := loadNodes(dir); err != nil || nodes != nil {
		t.Fatalf("no state directory: %v, %v", nodes, err)
	}
	want := []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleWorker}, SSHKeyPath: "/k"}}
	if err := saveNodes(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadNodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-saved +loaded):\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Join(dir, nodesFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("nodes file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	c := &spec.Cluster{Nodes: []spec.Node{{Address: "10.0.0.2"}}}
	if former := formerNodes(c, got); len(former) != 1 || former[0].Address != "10.0.0.1" {
		t.Errorf("former nodes %v", former)
	}
	if err := os.WriteFile(filepath.Join(dir, nodesFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadNodes(dir); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("damaged file: %v", err)
	}
}

// TestFanOut: work on several nodes runs at most rigger.max_parallel at once.
func TestFanOut(t *testing.T) {
	s := &Session{c: &spec.Cluster{Rigger: spec.Rigger{MaxParallel: 2}}}
	g, _ := s.fanOut(context.Background())
	var running, most atomic.Int32
	for range 6 {
		g.Go(func() error {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if most.Load() != 2 {
		t.Errorf("%d at once, want 2", most.Load())
	}
}
