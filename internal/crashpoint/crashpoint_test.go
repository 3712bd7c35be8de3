package crashpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// childEnv makes the test binary a child that reaches the points listed in
// it (comma-separated), printing each before it reaches it.
const childEnv = "CRASHPOINT_TEST_REACH"

func TestMain(m *testing.M) {
	if list, ok := os.LookupEnv(childEnv); ok {
		if err := Check(); err != nil {
			fmt.Println("check:", err)
			os.Exit(2)
		}
		for _, p := range strings.Split(list, ",") {
			fmt.Println("reach", p)
			Reach(p)
		}
		fmt.Println("end")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestReach: the process dies by SIGKILL at the n-th reach of the point
// RIGGER_FAULT names, not before, and never when it names another point or
// nothing; a value that names no point is refused.
func TestReach(t *testing.T) {
	etcdStep := Step("etcd")
	reach := strings.Join([]string{ApplyLocked, etcdStep, PhaseStart("etcd"), etcdStep, etcdStep, ApplyExecuted}, ",")
	for _, tc := range []struct {
		name, fault string
		// killed: the last point reached before the kill; "" when the child
		// ends normally.
		killedAfter string
		reached     int
		exit        int
	}{
		{name: "unset", reached: 6},
		{name: "first reach", fault: ApplyLocked, killedAfter: ApplyLocked, reached: 1},
		{name: "second reach", fault: etcdStep + "#2", killedAfter: etcdStep, reached: 4},
		{name: "a point not reached", fault: ServeReconciled, reached: 6},
		{name: "a count not reached", fault: etcdStep + "#4", reached: 6},
		{name: "the first of several reached", fault: ServeReconciled + "," + etcdStep + "#3," + PhaseStart("etcd"), killedAfter: PhaseStart("etcd"), reached: 3},
		{name: "no such point", fault: "phase:etcd", exit: 2},
		{name: "a point twice", fault: etcdStep + "," + etcdStep + "#2", exit: 2},
		{name: "a bad count", fault: etcdStep + "#0", exit: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+reach, EnvVar+"="+tc.fault)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			var ex *exec.ExitError
			switch {
			case tc.exit != 0:
				if !errors.As(err, &ex) || ex.ExitCode() != tc.exit || !strings.Contains(stdout.String(), EnvVar) {
					t.Fatalf("%s=%q: %v, output %q: want exit %d and a message naming %s", EnvVar, tc.fault, err, stdout.String(), tc.exit, EnvVar)
				}
				return
			case tc.killedAfter == "":
				if err != nil || lines[len(lines)-1] != "end" {
					t.Fatalf("%s=%q: %v, output %q: want a normal end", EnvVar, tc.fault, err, stdout.String())
				}
			default:
				ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("%s=%q: %v, output %q: want death by SIGKILL", EnvVar, tc.fault, err, stdout.String())
				}
				if last := lines[len(lines)-1]; last != "reach "+tc.killedAfter {
					t.Errorf("killed after %q, want after reach %s", last, tc.killedAfter)
				}
				if !strings.Contains(stderr.String(), EnvVar+": killed at "+tc.killedAfter) {
					t.Errorf("stderr %q does not say where it was killed", stderr.String())
				}
			}
			if got := strings.Count(stdout.String(), "reach "); got != tc.reached {
				t.Errorf("%d points reached, want %d", got, tc.reached)
			}
		})
	}
}

// TestPointsDistinct: every point is listed once, so RIGGER_FAULT names
// exactly one place.
func TestPointsDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Points() {
		if seen[p] || strings.Contains(p, "#") {
			t.Errorf("point %q listed twice or holds #", p)
		}
		seen[p] = true
	}
}
