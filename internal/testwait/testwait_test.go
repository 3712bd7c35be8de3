package testwait

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	calls := 0
	if !Until(10*time.Second, time.Millisecond, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Errorf("Until of a condition true at the third check: calls %d", calls)
	}
	if Until(20*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Error("Until of a condition never true returned true")
	}
}

// recorder is a testing.TB whose Fatalf records its message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs f on a goroutine of its own with a recorder, and returns
// the message f failed it with, "" if it did not.
func fatalOf(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.fatal
}

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wait  func(tb testing.TB, calls *int)
		calls int    // how many checks, when it holds
		fatal string // in the failure, "" when it holds
		not   string // not in the failure
	}{
		{
			name: "bool true at the third check",
			wait: func(tb testing.TB, calls *int) {
				For(tb, 10*time.Second, "three calls", func() bool { *calls++; return *calls == 3 })
			},
			calls: 3,
		},
		{
			name: "error nil at the third check",
			wait: func(tb testing.TB, calls *int) {
				For(tb, 10*time.Second, "three calls", func() error {
					if *calls++; *calls < 3 {
						return errors.New("not yet")
					}
					return nil
				})
			},
			calls: 3,
		},
		{
			name: "bool never true",
			wait: func(tb testing.TB, calls *int) {
				For(tb, 50*time.Millisecond, "the impossible", func() bool { return false })
			},
			fatal: "the impossible: not so after ",
			not:   "last check", // a bool says nothing more
		},
		{
			name: "error never nil: the last one is told",
			wait: func(tb testing.TB, calls *int) {
				For(tb, 50*time.Millisecond, "the impossible", func() error { *calls++; return fmt.Errorf("check %d failed", *calls) })
			},
			fatal: "the impossible: not so after ",
		},
		{
			name: "the check's context ends with the wait",
			wait: func(tb testing.TB, calls *int) {
				ForContext(context.Background(), tb, 50*time.Millisecond, "a blocked check", func(ctx context.Context) error {
					<-ctx.Done()
					return ctx.Err()
				})
			},
			fatal: "; the last check: context deadline exceeded",
		},
		{
			name: "the caller's context ended",
			wait: func(tb testing.TB, calls *int) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				ForContext(ctx, tb, time.Minute, "a cancelled wait", func(ctx context.Context) error { return errors.New("down") })
			},
			fatal: " (context canceled); the last check: down",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			start := time.Now()
			fatal := fatalOf(t, func(tb testing.TB) { tc.wait(tb, &calls) })
			if tc.fatal == "" {
				if fatal != "" || calls != tc.calls {
					t.Errorf("failed with %q after %d checks, want to hold after %d", fatal, calls, tc.calls)
				}
				return
			}
			if !strings.Contains(fatal, tc.fatal) || tc.not != "" && strings.Contains(fatal, tc.not) {
				t.Errorf("failed with %q, want %q in it and not %q", fatal, tc.fatal, tc.not)
			}
			if calls > 0 && !strings.HasSuffix(fatal, fmt.Sprintf("the last check: check %d failed", calls)) {
				t.Errorf("failed with %q after %d checks, want the last check's error", fatal, calls)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("a wait of at most a minute ended after %s", d)
			}
		})
	}
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 3)
	ch <- 1
	if v := Recv(t, ch, 10*time.Second, "the next value", nil); v != 1 {
		t.Errorf("Recv = %d, want 1", v)
	}
	ch <- 2
	ch <- 3
	go func() { ch <- 4 }()
	if v := Recv(t, ch, 10*time.Second, "an even value past 2", func(v int) bool { return v%2 == 0 && v > 2 }); v != 4 {
		t.Errorf("Recv of a value past 2 = %d, want 4", v)
	}
	if fatal := fatalOf(t, func(tb testing.TB) { Recv(tb, ch, 20*time.Millisecond, "a value", nil) }); !strings.HasPrefix(fatal, "a value: nothing after 20ms") {
		t.Errorf("Recv of nothing failed with %q, want %q", fatal, "a value: nothing after 20ms")
	}
	close(ch)
	if v := Recv(t, ch, 10*time.Second, "the close", func(int) bool { return false }); v != 0 {
		t.Errorf("Recv of a closed channel = %d, want 0", v)
	}
}
