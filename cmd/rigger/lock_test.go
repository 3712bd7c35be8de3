package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/lock"
)

// TestApplyLock: an apply against a cluster whose lock another rigger
// holds refuses, naming the holder; with --wait-lock it waits and goes on
// once the lock is released.
func TestApplyLock(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	// A node on a closed loopback port: the plan after the lock fails fast.
	yml := "ssh_key_path: " + dir + "/id\nnodes:\n  - {address: 127.0.0.1, port: 1, user: u, role: [etcd, controlplane, worker]}\n" +
		"rigger:\n  ssh:\n    host_key_policy: \"off\"\n"
	if err := os.WriteFile(dir+"/cluster.yml", []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	holder := lock.Holder{ID: "rigger serve on gitops-host (pid 4242)", Host: "gitops-host", PID: 4242, Command: "serve", Since: time.Now()}
	release, err := lock.File(context.Background(), filepath.Join(state, reconcile.LockFileName), holder, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	args := []string{"apply", "--yes", "-f", dir + "/cluster.yml", "--state-dir", state}
	_, stderr, code := run(t, args...)
	if code == 0 || !strings.Contains(stderr, holder.ID) {
		t.Fatalf("apply with the lock held: exit %d, stderr:\n%s\nwant a refusal naming %q", code, stderr, holder.ID)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		runTo(t, ctx, "", &out, &errOut, append(args, "--wait-lock")...)
	}()
	for !strings.Contains(errOut.String(), "Waiting for the cluster's lock, held by "+holder.ID) {
		select {
		case <-done:
			t.Fatalf("apply --wait-lock ended without waiting:\n%s", errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-done:
		t.Fatalf("apply --wait-lock went on while the lock was held:\n%s", errOut.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("apply --wait-lock did not go on after the lock was released")
	}
	if strings.Contains(out.String()+errOut.String(), "is held by") {
		t.Errorf("apply --wait-lock refused after waiting:\n%s", errOut.String())
	}
}
