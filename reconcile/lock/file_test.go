package lock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/testwait"
)

// childLockEnv makes the test binary, re-executed, hold the lock file it
// names (see TestMain) until its stdin closes or it is killed.
const childLockEnv = "RIGGER_LOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childLockEnv); path != "" {
		os.Exit(holdLockChild(path))
	}
	if path := os.Getenv(childLeaseEnv); path != "" {
		os.Exit(holdLeaseChild(path))
	}
	os.Exit(m.Run())
}

// holdLockChild takes the lock at path, says "locked" on stdout and holds
// the lock until stdin is closed.
func holdLockChild(path string) int {
	release, err := File(context.Background(), path, Me("apply", time.Now()), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := release(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func testHolder(id string) Holder {
	return Holder{ID: id, Host: "host1", PID: 42, Command: "apply", Since: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)}
}

func TestFileHeldInSameProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.lock")
	first := testHolder("rigger apply on host1 (pid 42)")
	release, err := File(t.Context(), path, first, false)
	if err != nil {
		t.Fatalf("first File: %v", err)
	}
	defer release()

	second := testHolder("second")
	_, err = File(t.Context(), path, second, false)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second File: got %v, want a *HeldError", err)
	}
	if diff := cmp.Diff(&HeldError{Holder: first, Lock: path, At: second.Since}, held); diff != "" {
		t.Errorf("HeldError (-want +got):\n%s", diff)
	}
	for _, want := range []string{path, first.ID, "2026-11-22T03:00:00Z", "--wait-lock", "pid 42 on host1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestFileHolderRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "nested", "cluster.lock")
	h := testHolder("me")
	release, err := File(t.Context(), path, h, false)
	if err != nil {
		t.Fatalf("File: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Holder
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("holder record %q is not JSON: %v", b, err)
	}
	if diff := cmp.Diff(h, got); diff != "" {
		t.Errorf("holder record (-want +got):\n%s", diff)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("mode of %s = %v, want %v", p, fi.Mode(), want)
		}
	}

	if err := release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := release(); err != nil {
		t.Errorf("second release: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != 0 {
		t.Errorf("after release the lock file holds %q (err %v), want it empty", b, err)
	}
	again, err := File(t.Context(), path, h, false)
	if err != nil {
		t.Fatalf("File after release: %v", err)
	}
	again()
}

func TestFileWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.lock")
	release, err := File(t.Context(), path, testHolder("first"), false)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := File(t.Context(), path, testHolder("second"), true)
		if err == nil {
			defer r()
			var h Holder
			b, _ := os.ReadFile(path)
			if err := json.Unmarshal(b, &h); err != nil || h.ID != "second" {
				got <- fmt.Errorf("record after acquiring is %q", b)
				return
			}
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("waiting File returned %v while the lock was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, got, 5*time.Second, "the waiting File acquiring the released lock", nil); err != nil {
		t.Fatalf("waiting File: %v", err)
	}
}

func TestFileWaitCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.lock")
	release, err := File(t.Context(), path, testHolder("first"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = File(ctx, path, testHolder("second"), true)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want it to wrap context.DeadlineExceeded", err)
	}
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.ID != "first" {
		t.Errorf("got %v, want it to wrap a *HeldError naming first", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("File returned %v after ctx ended", d)
	}
}

// TestFileOtherProcess holds the lock in a child process: it blocks others
// until the child is killed, and then the kernel has released it.
func TestFileOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.lock")
	cmd, kill := lockInChild(t, path)

	_, err := File(t.Context(), path, testHolder("parent"), false)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("File while the child holds the lock: got %v, want a *HeldError", err)
	}
	if held.Holder.PID != cmd.Process.Pid || held.Holder.Command != "apply" {
		t.Errorf("HeldError names %+v, want the child (pid %d)", held.Holder, cmd.Process.Pid)
	}

	waited := make(chan error, 1)
	go func() {
		r, err := File(t.Context(), path, testHolder("parent"), true)
		if err == nil {
			err = r()
		}
		waited <- err
	}()
	kill()
	if err := testwait.Recv(t, waited, 5*time.Second, "the lock free after its holder was killed", nil); err != nil {
		t.Fatalf("File after the child was killed: %v", err)
	}
}

// lockInChild starts this test binary as a child that takes the lock file
// at path (childLockEnv) and returns once it holds it. kill kills the
// child and waits for it; it is also called when the test ends.
func lockInChild(t *testing.T, path string) (cmd *exec.Cmd, kill func()) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childLockEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			stdin.Close()
		})
	}
	t.Cleanup(kill)
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("child said %q (%v), want locked", line, err)
	}
	return cmd, kill
}

func TestHeldErrorMessage(t *testing.T) {
	tests := []struct {
		name   string
		err    *HeldError
		want   []string
		absent []string
	}{
		{
			name: "full holder",
			err: &HeldError{Holder: testHolder("rigger serve on host1 (pid 42)"), Lock: "/var/lib/rigger/c.lock",
				At: time.Date(2026, 11, 22, 3, 1, 30, 0, time.UTC)},
			want: []string{"/var/lib/rigger/c.lock is held by rigger serve on host1 (pid 42) since 2026-11-22T03:00:00Z (1m30s ago)", "rigger apply --wait-lock", "(pid 42 on host1)"},
		},
		{
			name: "lease",
			err: &HeldError{Holder: testHolder("rigger apply on host1 (pid 42)"), Lock: "lease kube-system/rigger-apply",
				At: time.Date(2026, 11, 22, 3, 0, 10, 0, time.UTC), Expires: time.Date(2026, 11, 22, 3, 1, 0, 0, time.UTC)},
			want: []string{"lease kube-system/rigger-apply is held by rigger apply on host1 (pid 42) since 2026-11-22T03:00:00Z (10s ago)",
				"a holder that crashed on this machine is taken over at once", "(at 2026-11-22T03:01:00Z, in 50s)"},
			absent: []string{"releases the lock by itself"},
		},
		{
			name:   "only an identity",
			err:    &HeldError{Holder: Holder{ID: "serve-0"}, Lock: "lease kube-system/rigger"},
			want:   []string{"lease kube-system/rigger is held by serve-0: wait for it to finish"},
			absent: []string{"since", "pid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(msg, a) {
					t.Errorf("%q contains %q", msg, a)
				}
			}
		})
	}
}

func TestMe(t *testing.T) {
	h := Me("snapshot restore", time.Now())
	host, _ := os.Hostname()
	if h.PID != os.Getpid() || h.Host != host || h.Command != "snapshot restore" || h.Since.IsZero() {
		t.Errorf("Me = %+v", h)
	}
	want := fmt.Sprintf("rigger snapshot restore on %s (pid %d)", host, os.Getpid())
	if h.ID != want {
		t.Errorf("Me().ID = %q, want %q", h.ID, want)
	}
}

// FuzzParseHolder feeds parseHolder what another process may have left in
// a lock file or a Lease annotation.
func FuzzParseHolder(f *testing.F) {
	b, _ := json.Marshal(testHolder("seed"))
	f.Add(b)
	f.Add([]byte(`{"id":""}`))
	f.Add([]byte(`{"id":"x","since":"not a time"}`))
	f.Add([]byte(`{"id":"half`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHolder(b)
		if err != nil {
			return
		}
		if h.ID == "" {
			t.Fatalf("parseHolder(%q) accepted a holder without an id", b)
		}
		again, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("a parsed holder does not encode: %v", err)
		}
		if h2, err := parseHolder(again); err != nil || !h2.Since.Equal(h.Since) || h2.ID != h.ID {
			t.Fatalf("holder %+v does not round-trip: %+v, %v", h, h2, err)
		}
	})
}
