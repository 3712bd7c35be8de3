package reconcile

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rigger/rigger/reconcile/statedir"
)

// Reason names why a reconcile did not converge, in the words status
// conditions use (Flux's convention: CamelCase, stable, for machines and
// people alike).
type Reason string

// The reasons of Error.
const (
	// ReasonInvalidSpec: cluster.yml does not validate, or asks for what
	// rigger cannot do. Stalls.
	ReasonInvalidSpec Reason = "InvalidSpec"
	// ReasonStateDamaged: a file of the state directory does not decode.
	// Stalls: a person repairs it or moves it away.
	ReasonStateDamaged Reason = "StateDirectoryDamaged"
	// ReasonNewCABlocked: the cluster has no certificates anywhere rigger
	// looked while some nodes did not answer (NewCAError). Stalls.
	ReasonNewCABlocked Reason = "NewCABlocked"
	// ReasonNewKeyBlocked: a new secrets encryption key would be made
	// while nodes that may hold the cluster's did not answer. Stalls.
	ReasonNewKeyBlocked Reason = "NewKeyBlocked"
	// ReasonRemovalGuard: the plan removes more nodes than
	// rigger.max_removed_nodes allows (RemovalGuardError). Stalls.
	ReasonRemovalGuard Reason = "RemovalGuard"
	// ReasonLockHeld: another rigger changes the cluster (its lock in the
	// state directory, or its Lease). Retried later.
	ReasonLockHeld Reason = "LockHeld"
	// ReasonFailed: anything else; retried with backoff.
	ReasonFailed Reason = "ReconciliationFailed"
)

// Error is a failure with the Reason status reports it under and whether
// it stalls: only a person can make it go on (retrying changes nothing).
// The typed errors that say more (RemovalGuardError, NewCAError,
// *lock.HeldError, *statedir.DamagedError) are wrapped in it.
type Error struct {
	Reason Reason
	Stalls bool
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// stalls wraps err as a failure only a person can fix.
func stalls(reason Reason, err error) error { return &Error{Reason: reason, Stalls: true, Err: err} }

// retries wraps err as a failure rigger tries again later.
func retries(reason Reason, err error) error { return &Error{Reason: reason, Err: err} }

// Classify says what status makes of err: its Reason, and whether it
// stalls. An error that is no *Error is ReasonFailed and is retried.
func Classify(err error) (reason Reason, stalled bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason, e.Stalls
	}
	return ReasonFailed, false
}

// stateErr classifies an error reading the state directory: a damaged
// file stalls, anything else is retried.
func stateErr(err error) error {
	var damaged *statedir.DamagedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &damaged):
		return stalls(ReasonStateDamaged, err)
	}
	return retries(ReasonFailed, err)
}

// RemovalGuardError is a plan that removes more nodes than
// rigger.max_removed_nodes allows: a guard against a truncated cluster.yml.
type RemovalGuardError struct {
	// Removed are the addresses of the nodes the plan removes.
	Removed []string
	// Total is how many nodes rigger knows, the removed ones included.
	Total int
	// Limit is rigger.max_removed_nodes.
	Limit string
}

func (e *RemovalGuardError) Error() string {
	return fmt.Sprintf("the plan removes %d of %d nodes (%s), more than rigger.max_removed_nodes (%s) allows: "+
		"if cluster.yml is complete and this is meant, apply with --allow-removals (or raise rigger.max_removed_nodes)",
		len(e.Removed), e.Total, strings.Join(e.Removed, ", "), e.Limit)
}

// NewCAError is a cluster without certificates anywhere rigger could look
// while some of its nodes did not answer: they may hold the CA. A plan
// shows what a new CA would change; apply refuses to make one.
type NewCAError struct {
	StateDir    string
	Unreachable []string
}

func (e *NewCAError) Error() string {
	return fmt.Sprintf("the state directory %s has no certificates and nodes %s did not answer: "+
		"rigger makes a new CA only when every node answers and none runs this cluster; try again when they answer",
		e.StateDir, strings.Join(e.Unreachable, ", "))
}
