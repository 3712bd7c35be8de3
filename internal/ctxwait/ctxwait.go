// Package ctxwait waits a duration unless a context ends first: the wait
// of product code, which never sleeps bare (a stopped process must not
// hang in a sleep).
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; then it returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
