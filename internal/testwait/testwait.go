// Package testwait waits in tests for a condition, with a deadline, never
// a fixed sleep: a slow machine only makes the wait longer.
package testwait

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Until checks cond every interval, at once first, until it holds (true)
// or timeout has passed (false).
func Until(timeout, interval time.Duration, cond func() bool) bool {
	return wait.PollUntilContextTimeout(context.Background(), interval, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil }) == nil
}
