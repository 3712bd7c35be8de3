// Package staged is the one shape of a staged operation: work that takes
// several plans, one stage each, such as a CA or certificate rotation
// (package certrotate) or an operation on the secrets encryption key
// (package secretsenc), and whatever an upgrade needs next. Each stage is
// picked by the operation's own package, purely, from its record in the
// state directory and what was observed (certrotate through
// pkisource.Resolve, secretsenc.Decide); the value it picks is an
// Operation, which the plan carries unchanged (package decide) and an
// apply carries out around the executor (package reconcile), the same way
// for every operation:
//
//  1. Blocked refuses the plan;
//  2. Before writes to the state directory what must be there before any
//     node changes (the record of the stage, new keys or certificates);
//  3. the executor carries out the plan's steps, among them the restarts
//     each operation asks of a node (Restarts);
//  4. the After that Before returned ends the stage: the record moves to
//     the next stage, which the next plan carries out (Next), in the same
//     apply.
//
// A new staged operation is a package whose plan value implements
// Operation, one line in decide's list of them, and rows in decide's
// scenario table. This package is their common vocabulary (as
// database/sql/driver is for drivers): it imports nothing of rigger but
// what its types name.
package staged

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/plan"
)

// Operation is a staged operation as one plan carries it: the stage its
// package picked, and what applying the plan does about it. Its methods
// are called on the plan's value as it was decided; none changes it.
type Operation interface {
	// Title is the phase an apply announces for the plan's stage and its
	// title, for people ("" when the plan carries none of the operation's
	// stages: a record to keep, say).
	Title() (plan.Phase, string)
	// Restarts are the files of node n (among its desired Files) whose
	// components must read them again for the stage, each with why; none
	// when the stage restarts nothing there.
	Restarts(n *desired.Node) map[string]string
	// Blocked says why the plan must not be applied (a *stall.Error); nil
	// when it may.
	Blocked() error
	// Work reports whether applying the plan does something for the
	// operation: a stage to carry out, a record to keep.
	Work() bool
	// Next says, for people, the stage that follows the plan's once that is
	// done, in a plan of its own; "" when none.
	Next() string
	// Before writes to the state directory what must be there before the
	// nodes change, and returns what ends the plan's stage.
	Before(s Start) (After, error)
}

// Start is what Before works with.
type Start struct {
	// Dir is the state directory; Now the time of the apply.
	Dir string
	Now time.Time
	// Log is the cluster's (its records, keys started: for operators).
	Log *slog.Logger
}

// After ends an operation's stage once the executor carried the plan's
// steps out without an error: the record moves to the next stage, or the
// operation is over. done reports whether the stage ended, so that the
// apply plans the next one when there is one (Operation.Next). A stage
// that cannot end yet (a node that did not answer) is not done, or an
// error that says why.
type After func(ctx context.Context, e End) (done bool, err error)

// End is what ending a stage works with besides the operation.
type End struct {
	// Dir is the state directory; Now the time the stage ends.
	Dir string
	Now time.Time
	// Desired is the cluster the plan was made for; Unreachable are its
	// nodes the plan could not look at (and left as they were).
	Desired     *desired.Cluster
	Unreachable []string
	// API is the API server's client; nil when no controlplane node was
	// reachable when the plan was made.
	API kubernetes.Interface
	// Step reports progress as the executor's Hooks.Step does (nil:
	// silent); Log is the cluster's.
	Step func(node, msg string, err error)
	Log  *slog.Logger
}

// Say reports msg on node (e.Step, when set).
func (e End) Say(node, msg string, err error) {
	if e.Step != nil {
		e.Step(node, msg, err)
	}
}
