package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/timeline"
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

// TestParseTimings: what BenchmarkChanges reads back is what the
// timeline rendered.
func TestParseTimings(t *testing.T) {
	now := time.Unix(0, 0)
	tl := timeline.NewAt(func() time.Time { return now })
	end := tl.Begin("rigger apply")
	now = now.Add(3 * time.Millisecond)
	endPhase := tl.Begin("apply 10.0.0.1: replace kube-proxy")
	now = now.Add(1500 * time.Millisecond)
	endPhase()
	end()
	var out strings.Builder
	out.WriteString("Applied.\n\nTimings:\n")
	tl.Render(&out)
	got, err := parseTimings(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if want := tl.Spans(); !slices.Equal(got, want) {
		t.Errorf("parsed %+v from\n%s\nwant %+v", got, out.String(), want)
	}
	if _, err := parseTimings("Applied.\n"); err == nil {
		t.Error("no error without timings")
	}
}
