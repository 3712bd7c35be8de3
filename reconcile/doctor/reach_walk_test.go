package doctor

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// TestReachPassesOnlyWhatTheErrorProves: a timeout that does not say how
// far the connection got proves none of the checks before the one it
// fails; a transport's typed error proves those before its own.
func TestReachPassesOnlyWhatTheErrorProves(t *testing.T) {
	c := &spec.Cluster{Nodes: []spec.Node{{Address: "10.0.0.1", Port: "22", User: "rke", Transport: spec.TransportSSH}}}
	for _, tc := range []struct {
		name   string
		err    error
		passed []string
	}{
		{"an untyped timeout", fmt.Errorf("node 10.0.0.1: ask the docker engine its version: %w", context.DeadlineExceeded), nil},
		{"an engine's error", fmt.Errorf("node 10.0.0.1: list containers: Error response from daemon: boom"),
			[]string{CheckAddress, CheckSSHPort, CheckSSHHandshake, CheckSSHHostKey, CheckSSHAuth, CheckDockerSocket}},
	} {
		r := &walker{c: c, o: &observe.Cluster{Nodes: map[string]*observe.Node{"10.0.0.1": {Address: "10.0.0.1", Err: tc.err}}}}
		var passed []string
		for _, name := range ReachChecks {
			if r.reach(name, "10.0.0.1").Level == Pass {
				passed = append(passed, name)
			}
		}
		if !slices.Equal(passed, tc.passed) {
			t.Errorf("%s: passed %v, want %v", tc.name, passed, tc.passed)
		}
	}
}
