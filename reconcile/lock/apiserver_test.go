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
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/rigger/rigger/internal/apiservertest"
)

// childLeaseEnv makes the test binary, re-executed, hold the Lease its
// value describes (a leaseChild file) until its stdin closes or it is
// killed (see TestMain).
const childLeaseEnv = "RIGGER_LEASE_TEST_HOLD"

// apiTiming is the timing of the Leases held on the real API server: long
// enough that no test can pass by a lease expiring.
var apiTiming = LeaseTiming{Duration: time.Minute, RenewDeadline: 45 * time.Second, RetryPeriod: time.Second}

// leaseChild is what a child needs to hold a Lease on the test's API server.
type leaseChild struct {
	Host, Token, Name string
	CA                []byte
}

// holdLeaseChild takes the Lease described in the file at path as a rigger
// apply would, says "leased" on stdout, and gives it up when stdin closes.
// It fails if it lost the lease meanwhile (someone took it over).
func holdLeaseChild(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var lc leaseChild
	if err := json.Unmarshal(b, &lc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: lc.Host, BearerToken: lc.Token, TLSClientConfig: rest.TLSClientConfig{CAData: lc.CA}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	held, release, err := Lease(context.Background(), cs, testNS, lc.Name, Me("apply", time.Now()), LeaseOptions{Timing: apiTiming})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("leased")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if held.Err() != nil {
		fmt.Fprintln(os.Stderr, "lost the lease:", context.Cause(held))
		return 1
	}
	release()
	return 0
}

// leaseHolder is a child process holding a Lease.
type leaseHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startLeaseHolder starts a child that holds the Lease name of s, and
// returns once it does. The child is killed when the test ends.
func startLeaseHolder(t *testing.T, s *apiservertest.Server, name string) *leaseHolder {
	t.Helper()
	b, err := json.Marshal(leaseChild{Host: s.Config.Host, Token: s.Config.BearerToken, CA: s.Config.CAData, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lease.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childLeaseEnv+"="+path)
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
	h := &leaseHolder{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		if h.cmd.ProcessState == nil {
			_ = h.cmd.Process.Kill()
			_ = h.cmd.Wait()
		}
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "leased\n" {
		t.Fatalf("child said %q (%v), want leased", line, err)
	}
	return h
}

// TestLeaseAfterCrashOnAPIServer is issue 15's crash on a real API
// server: a rigger that holds the cluster's Lease is killed (kill -9); the
// next one on this machine takes the Lease over at once, while a live
// holder is refused and --wait-lock waits for its release, and a holder
// elsewhere that stops renewing is waited out.
func TestLeaseAfterCrashOnAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(s.Config)
	me := Me("apply", time.Now())
	me.ID = "rigger apply (the test)"

	t.Run("a live holder is refused, a crashed one taken over at once", func(t *testing.T) {
		child := startLeaseHolder(t, s, "crash")
		_, _, err := Lease(t.Context(), cs, testNS, "crash", me, LeaseOptions{Timing: apiTiming})
		var held *HeldError
		if !errors.As(err, &held) || held.Holder.PID != child.cmd.Process.Pid {
			t.Fatalf("Lease while the child holds it: %v; want a *HeldError naming the child (pid %d)", err, child.cmd.Process.Pid)
		}
		if err := child.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = child.cmd.Wait()
		// The child's lease has most of its minute to run: only its
		// holder being gone lets it be taken without waiting.
		_, release, err := Lease(t.Context(), cs, testNS, "crash", me, LeaseOptions{Timing: apiTiming})
		if err != nil {
			t.Fatalf("Lease after the holder was killed: %v", err)
		}
		defer release()
		checkHolder(t, cs, "crash", me.ID)
	})

	t.Run("wait-lock waits for the holder to finish", func(t *testing.T) {
		child := startLeaseHolder(t, s, "wait")
		waiting := make(chan *HeldError, 1)
		type result struct {
			release func()
			err     error
		}
		got := make(chan result, 1)
		go func() {
			_, r, err := Lease(t.Context(), cs, testNS, "wait", me, LeaseOptions{Timing: apiTiming, Wait: true, Waiting: func(e *HeldError) {
				select {
				case waiting <- e:
				default:
				}
			}})
			got <- result{r, err}
		}()
		select {
		case e := <-waiting:
			if e.Holder.PID != child.cmd.Process.Pid || e.Expires.IsZero() {
				t.Errorf("waiting for %+v, want the child (pid %d) and an expiry", e, child.cmd.Process.Pid)
			}
		case r := <-got:
			t.Fatalf("Lease with Wait returned (%v) while the child held the lease", r.err)
		}
		child.stdin.Close()
		if err := child.cmd.Wait(); err != nil {
			t.Fatalf("the child did not keep the lease until it was done: %v", err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("Lease with Wait after the child finished: %v", r.err)
		}
		defer r.release()
		checkHolder(t, cs, "wait", me.ID)
	})

	t.Run("a holder elsewhere is waited out", func(t *testing.T) {
		elsewhere := Holder{ID: "rigger apply on laptop (pid 7)", Host: "laptop", PID: 7, Command: "apply", Boot: "boot-9", PIDNamespace: "pid:[1]", Start: 3}
		now := time.Now()
		l := leaseOf(elsewhere, now, now, 1, true)
		l.Name = "elsewhere"
		if _, err := cs.CoordinationV1().Leases(testNS).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var reports []*HeldError
		_, release, err := Lease(t.Context(), cs, testNS, "elsewhere", me, LeaseOptions{Timing: apiTiming, Wait: true, Waiting: func(e *HeldError) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, e)
		}})
		if err != nil {
			t.Fatalf("Lease with Wait: %v", err)
		}
		defer release()
		checkHolder(t, cs, "elsewhere", me.ID)
		mu.Lock()
		defer mu.Unlock()
		if len(reports) == 0 || reports[0].Holder.ID != elsewhere.ID {
			t.Errorf("reports while waiting: %+v, want the holder elsewhere", reports)
		}
	})
}

func checkHolder(t *testing.T, cs kubernetes.Interface, name, want string) {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(testNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := ptr.Deref(l.Spec.HolderIdentity, ""); id != want {
		t.Errorf("lease %s held by %q, want %q", name, id, want)
	}
}
