package reconcile

import (
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/stall"
)

// Reason names why a reconcile did not converge (package stall).
type Reason = stall.Reason

// The reasons of Error (package stall says when each stalls).
const (
	ReasonInvalidSpec   = stall.InvalidSpec
	ReasonStateDamaged  = stall.StateDamaged
	ReasonNewCABlocked  = stall.NewCABlocked
	ReasonNewKeyBlocked = stall.NewKeyBlocked
	ReasonRemovalGuard  = stall.RemovalGuard
	ReasonLockHeld      = stall.LockHeld
	ReasonFailed        = stall.Failed
)

// Error is a failure with the Reason status reports it under and whether
// it stalls (stall.Error). The typed errors that say more
// (RemovalGuardError, NewCAError, *lock.HeldError, *statedir.DamagedError)
// are wrapped in it.
type Error = stall.Error

// Classify says what status makes of err: its Reason, and whether it
// stalls. An error that is no *Error is ReasonFailed and is retried.
func Classify(err error) (reason Reason, stalled bool) { return stall.Classify(err) }

// RemovalGuardError is a plan that removes more nodes than
// rigger.max_removed_nodes allows (plan.RemovalGuardError).
type RemovalGuardError = plan.RemovalGuardError
