// Package stall classifies why a reconcile did not converge: a Reason, in
// the words status conditions use, and whether the failure stalls (only a
// person can make it go on) or is retried. The packages that decide
// (secretsenc, certrotate, pkisource, …) return their refusals as *Error
// values, which status and the gitops loop read with Classify.
package stall

import (
	"errors"

	"github.com/rigger/rigger/reconcile/statedir"
)

// Reason names why a reconcile did not converge (Flux's convention:
// CamelCase, stable, for machines and people alike).
type Reason string

// The reasons of Error.
const (
	// InvalidSpec: cluster.yml does not validate, or asks for what rigger
	// cannot do. Stalls.
	InvalidSpec Reason = "InvalidSpec"
	// StateDamaged: a file of the state directory does not decode, or does
	// not match the nodes. Stalls: a person repairs it or moves it away.
	StateDamaged Reason = "StateDirectoryDamaged"
	// NewCABlocked: the cluster has no certificates anywhere rigger looked
	// while some nodes did not answer. Stalls.
	NewCABlocked Reason = "NewCABlocked"
	// NewKeyBlocked: a new secrets encryption key would be made while
	// nodes that may hold the cluster's did not answer. Stalls.
	NewKeyBlocked Reason = "NewKeyBlocked"
	// RemovalGuard: the plan removes more nodes than
	// rigger.max_removed_nodes allows. Stalls.
	RemovalGuard Reason = "RemovalGuard"
	// SelfRemoval: the plan removes the node the rigger serve that
	// reconciles the cluster runs on, inside that cluster. Stalls: a
	// person moves rigger off the node.
	SelfRemoval Reason = "SelfRemoval"
	// LockHeld: another rigger changes the cluster (its lock in the state
	// directory, or its Lease). Retried later.
	LockHeld Reason = "LockHeld"
	// Failed: anything else; retried with backoff.
	Failed Reason = "ReconciliationFailed"
)

// Error is a failure with the Reason status reports it under and whether
// it stalls. The typed errors that say more are wrapped in it.
type Error struct {
	Reason Reason
	Stalls bool
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Stalls wraps err as a failure only a person can fix.
func Stalls(reason Reason, err error) error { return &Error{Reason: reason, Stalls: true, Err: err} }

// Retries wraps err as a failure rigger tries again later.
func Retries(reason Reason, err error) error { return &Error{Reason: reason, Err: err} }

// Classify says what status makes of err: its Reason, and whether it
// stalls. An error that is no *Error is Failed and is retried.
func Classify(err error) (reason Reason, stalled bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason, e.Stalls
	}
	return Failed, false
}

// State classifies an error reading the state directory: a damaged file
// stalls, anything else is retried; nil stays nil.
func State(err error) error {
	var damaged *statedir.DamagedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &damaged):
		return Stalls(StateDamaged, err)
	}
	return Retries(Failed, err)
}
