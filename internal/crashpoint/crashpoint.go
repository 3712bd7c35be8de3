// Package crashpoint lets a test kill rigger at a named point of its work,
// as a power cut or `kill -9` would, to check that the next run recovers
// (the chaos suite, `make chaos`; docs/reliability.md).
//
// It is inert unless the environment variable RIGGER_FAULT names points
// when the process starts: then the process sends itself SIGKILL at the
// first of them it reaches, the n-th time it reaches it
// (RIGGER_FAULT=point, point#n, or several separated by commas), after
// the line "RIGGER_FAULT: killed at point#n" on standard error. A point
// costs one nil check when RIGGER_FAULT is unset, and points are only at
// the boundaries of phases and steps, never in a loop over data.
//
// The points are those of Points: an apply's own boundaries, every
// executor phase's start and end, every step of a phase, the middle of a
// container's replacement and of an etcd member's addition, the stages of
// a secrets encryption key rotation, and serve's boundary between a
// reconcile and its status commit.
package crashpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// EnvVar names the points the process kills itself at.
const EnvVar = "RIGGER_FAULT"

// The points outside the executor's phases.
const (
	// ApplyLocked: an apply holds the cluster's lock (and its Lease, when
	// the API server answers), and has changed nothing yet.
	ApplyLocked = "apply:locked"
	// ApplyExecuted: the plan has run (execute.Run), the Kubernetes side
	// of the nodes (labels, taints, stale Nodes) is not yet done.
	ApplyExecuted = "apply:executed"
	// EtcdSnapshotTaken: the snapshot before an etcd change is taken, etcd
	// is not yet changed.
	EtcdSnapshotTaken = "etcd:snapshot-taken"
	// EtcdLearnerAdded: a new etcd member is added as a learner, its
	// container is not yet created.
	EtcdLearnerAdded = "etcd:learner-added"
	// ReplaceStopped: a container being replaced is stopped and renamed
	// aside, its successor is not yet created.
	ReplaceStopped = "replace:stopped"
	// ServeReconciled: serve has reconciled a cluster and not yet
	// committed its status.yml.
	ServeReconciled = "serve:reconciled"
	// EncryptionStageSaved: a stage of an operation on the secrets
	// encryption key (a rotation) and its configuration are saved in the
	// state directory, the API servers do not have it yet.
	EncryptionStageSaved = "encryption:stage-saved"
	// EncryptionStageDone: a stage's work is done (API servers restarted,
	// or Secrets rewritten), the next stage is not yet recorded.
	EncryptionStageDone = "encryption:stage-done"
)

// phases are the executor's phases, in the order they run (see
// reconcile/execute.Run), and whether they have steps. Each has the points
// PhaseStart and PhaseDone, and those with steps Step.
var phases = []struct {
	name  string
	steps bool
}{
	{"files", true}, {"etcd", true}, {"controlplane", true}, {"kubernetes", false},
	{"worker", true}, {"addons", false}, {"removed-nodes", true},
}

// PhaseStart is the point where phase starts, before its first step.
func PhaseStart(phase string) string { return "phase:" + phase + ":start" }

// PhaseDone is the point where phase has ended without an error.
func PhaseDone(phase string) string { return "phase:" + phase + ":done" }

// Step is the point after each step of phase (its outcome recorded and
// reported): "step:etcd#2" is after the second step of the etcd phase.
func Step(phase string) string { return "step:" + phase }

// Points are every point, in the order an apply reaches them, then
// serve's.
func Points() []string {
	out := []string{ApplyLocked}
	for _, p := range phases {
		out = append(out, PhaseStart(p.name))
		if p.steps {
			out = append(out, Step(p.name))
		}
		out = append(out, PhaseDone(p.name))
	}
	return append(out, EtcdSnapshotTaken, EtcdLearnerAdded, ReplaceStopped, ApplyExecuted,
		EncryptionStageSaved, EncryptionStageDone, ServeReconciled)
}

// target is one point of RIGGER_FAULT, the count of the reach that kills
// and the reaches so far.
type target struct {
	spec    string // as written: point or point#n
	nth     int64
	reached *atomic.Int64
}

// parse reads a RIGGER_FAULT value: points separated by commas, each
// "point" or "point#n" (n ≥ 1), keyed by point.
func parse(v string) (map[string]target, error) {
	if v == "" {
		return nil, nil
	}
	out := map[string]target{}
	for _, spec := range strings.Split(v, ",") {
		point, count, hasCount := strings.Cut(spec, "#")
		t := target{spec: spec, nth: 1, reached: new(atomic.Int64)}
		if hasCount {
			n, err := strconv.ParseInt(count, 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%s=%q: the count after # in %q must be a whole number from 1", EnvVar, v, spec)
			}
			t.nth = n
		}
		if !slices.Contains(Points(), point) {
			return nil, fmt.Errorf("%s=%q: no point %q; the points are %s", EnvVar, v, point, strings.Join(Points(), ", "))
		}
		if _, dup := out[point]; dup {
			return nil, fmt.Errorf("%s=%q: point %s given twice", EnvVar, v, point)
		}
		out[point] = t
	}
	return out, nil
}

// armed are the points of RIGGER_FAULT as the process found it at start
// (an invalid value arms nothing: Check reports it). The map is never
// written after; only the counts of reaches change.
var armed, armedErr = parse(os.Getenv(EnvVar))

// Check reports a RIGGER_FAULT that names no point or a bad count; rigger
// refuses to start with it rather than run without the crash asked for.
func Check() error { return armedErr }

// Reach is called at point; when RIGGER_FAULT names it and this is the
// n-th reach, the process kills itself with SIGKILL.
func Reach(point string) {
	if armed == nil {
		return
	}
	t, ok := armed[point]
	if !ok || t.reached.Add(1) != t.nth {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: killed at %s\n", EnvVar, t.spec)
	kill()
}

// kill ends the process as kill -9 would: no deferred function runs, no
// lock is released, no file is flushed.
func kill() {
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rigger: %s: cannot kill itself (%v): exiting instead\n", EnvVar, err)
		os.Exit(137)
	}
	select {} // SIGKILL is on its way; nothing more runs meanwhile
}
