package main

import (
	"strings"
	"testing"
)

// TestPlanTimings: plan --timings says, on stderr, where its time went:
// the whole command, the state directory, each node's connection, the
// observation and the plan; without the flag, nothing of it.
func TestPlanTimings(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	// Port 1 of loopback refuses at once: the node is unreachable, quickly.
	file := writeCluster(t, "ssh_key_path: "+dir+"/id\nnodes: [{address: 127.0.0.1, port: \"1\", user: u, role: [etcd, controlplane, worker]}]\n")
	_, errOut, code := run(t, "plan", "-f", file, "--state-dir", dir+"/state", "--timings")
	if code != 2 {
		t.Errorf("exit %d, want 2 (a plan with changes); stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"Timings:", "START", "rigger plan", "plan: read the state directory", "observe the nodes",
		"observe 127.0.0.1: connect", "plan: compute"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if _, errOut, _ := run(t, "plan", "-f", file, "--state-dir", dir+"/state"); strings.Contains(errOut, "Timings:") {
		t.Errorf("timings without --timings:\n%s", errOut)
	}
}
