// Package testwait waits in tests for a condition, with a deadline, never
// a fixed sleep: a slow machine only makes the wait longer.
//
// For and ForContext check a condition until it holds and fail the test,
// saying what was awaited and why it was not so at the last check, when
// the deadline passes first. Until only reports whether it held. Recv
// waits for a value from a channel.
package testwait

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Until checks cond every interval, at once first, until it holds (true)
// or timeout has passed (false).
func Until(timeout, interval time.Duration, cond func() bool) bool {
	return wait.PollUntilContextTimeout(context.Background(), interval, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil }) == nil
}

// Condition is what For checks: a func() bool that holds when true, or a
// func() error that holds when it returns nil, its error saying why not.
type Condition interface{ func() bool | func() error }

// For checks cond until it holds; if timeout passes first, it fails t
// (Fatal) with what, the time waited and cond's last error. cond runs on
// the caller's goroutine, so it may fail t itself when what it sees can
// never turn out right. See ForContext for the intervals.
func For[C Condition](t testing.TB, timeout time.Duration, what string, cond C) {
	t.Helper()
	var check func() error
	switch c := any(cond).(type) {
	case func() bool:
		check = func() error {
			if c() {
				return nil
			}
			return errFalse
		}
	case func() error:
		check = c
	}
	ForContext(context.Background(), t, timeout, what, func(context.Context) error { return check() })
}

// errFalse is the last error of a func() bool condition: there is nothing
// to say but the timeout.
var errFalse = errors.New("the condition did not hold")

// ForContext checks cond until it returns nil; if timeout passes or ctx
// ends first, it fails t (Fatal) with what, the time waited and cond's
// last error. cond's ctx ends then too, so a check that does I/O never
// outlasts the wait.
//
// cond is checked at once, then at intervals that start at 10 ms and
// double up to a hundredth of timeout (at least 10 ms, at most 1 s): a
// condition that holds soon is seen soon, and a wait of minutes does not
// check in a busy loop.
func ForContext(ctx context.Context, t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	maxInterval := min(max(timeout/100, 10*time.Millisecond), time.Second)
	interval := 10 * time.Millisecond
	for {
		err := cond(waitCtx)
		if err == nil {
			return
		}
		timer := time.NewTimer(interval)
		select {
		case <-timer.C:
			interval = min(2*interval, maxInterval)
			continue
		case <-waitCtx.Done():
			timer.Stop()
		}
		waited := time.Since(start).Round(time.Millisecond)
		switch {
		case ctx.Err() != nil:
			t.Fatalf("%s: not so when the wait was ended after %s (%v); the last check: %v", what, waited, context.Cause(ctx), err)
		case errors.Is(err, errFalse):
			t.Fatalf("%s: not so after %s", what, waited)
		default:
			t.Fatalf("%s: not so after %s; the last check: %v", what, waited, err)
		}
		return
	}
}

// Recv returns the first value from ch for which match is true (the next
// value when match is nil), dropping the values before it; if none comes
// within timeout, it fails t (Fatal) with what. A closed ch gives its zero
// value, as a receive does. match runs on the caller's goroutine.
func Recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string, match func(T) bool) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case v, ok := <-ch:
			if !ok || match == nil || match(v) {
				return v
			}
		case <-timer.C:
			t.Fatalf("%s: nothing after %s", what, timeout)
			var zero T
			return zero
		}
	}
}
