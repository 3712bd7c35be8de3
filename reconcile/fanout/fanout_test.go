package fanout

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestEach(t *testing.T) {
	tests := []struct {
		name     string
		items    int
		limit    int
		wantPeak int32
	}{
		{"limit honoured", 10, 3, 3},
		{"no limit", 5, 0, 5},
		{"limit above the items", 2, 8, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var running, peak atomic.Int32
				items := make([]int, tt.items)
				err := Each(t.Context(), items, tt.limit, func(ctx context.Context, i int, _ int) error {
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(time.Second) // fake time: everyone started by now overlaps
					running.Add(-1)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if got := peak.Load(); got != tt.wantPeak {
					t.Errorf("at most %d ran at once, want %d", got, tt.wantPeak)
				}
			})
		})
	}
}

func TestEachErrorsInOrderAndOthersGoOn(t *testing.T) {
	var ran atomic.Int32
	errA, errC := errors.New("a failed"), errors.New("c failed")
	err := Each(t.Context(), []string{"a", "b", "c"}, 1, func(_ context.Context, _ int, s string) error {
		ran.Add(1)
		switch s {
		case "a":
			return errA
		case "c":
			return errC
		}
		return nil
	})
	if ran.Load() != 3 {
		t.Errorf("%d items ran, want all 3 despite a failure", ran.Load())
	}
	if !errors.Is(err, errA) || !errors.Is(err, errC) || err.Error() != "a failed\nc failed" {
		t.Errorf("error %q, want both failures in item order", err)
	}
}

func TestEachStopsStartingWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var ran atomic.Int32
	err := Each(ctx, []int{1, 2, 3}, 1, func(_ context.Context, i int, _ int) error {
		ran.Add(1)
		if i == 0 {
			cancel()
		}
		return nil
	})
	if ran.Load() != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("ran %d, err %v: want 1 run and the others given ctx's error", ran.Load(), err)
	}
}
