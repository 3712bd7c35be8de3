package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
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
	testwait.For(t, time.Minute, "apply --wait-lock waiting for the lock", func() error {
		if strings.Contains(errOut.String(), "Waiting for the cluster's lock, held by "+holder.ID) {
			return nil
		}
		select {
		case <-done:
			t.Fatalf("apply --wait-lock ended without waiting:\n%s", errOut.String())
		default:
		}
		return fmt.Errorf("not yet; its stderr:\n%s", errOut.String())
	})
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

// TestApplyWaitsForLease: --wait-lock waits for the cluster's Lease too,
// also when the state directory's lock was free (a holder elsewhere, or
// one that crashed), and tells who holds the Lease and until when.
func TestApplyWaitsForLease(t *testing.T) {
	for _, wait := range []bool{false, true} {
		o := applyOnce{flags: clusterFlags{waitLock: wait}}
		var errOut strings.Builder
		ao := o.applyOptions(io.Discard, &errOut)
		if ao.WaitLease != wait {
			t.Errorf("--wait-lock=%v: WaitLease %v", wait, ao.WaitLease)
		}
		since := time.Date(2026, 11, 22, 3, 0, 0, 0, time.Local)
		ao.LeaseWaiting(&lock.HeldError{Lock: "lease kube-system/rigger-apply", At: since.Add(10 * time.Second), Expires: since.Add(70 * time.Second),
			Holder: lock.Holder{ID: "rigger apply on laptop (pid 7)", Since: since}})
		want := "Waiting for the cluster's lease kube-system/rigger-apply, held by rigger apply on laptop (pid 7) since 03:00:00; " +
			"taken over at 03:01:10 (in 1m0s) unless its holder renews it (Ctrl-C to stop waiting)…\n"
		if errOut.String() != want {
			t.Errorf("progress line:\n%q\nwant\n%q", errOut.String(), want)
		}
	}
}
