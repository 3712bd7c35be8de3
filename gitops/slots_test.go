package gitops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// granted says whether t holds a slot, without waiting.
func granted(t *slotTicket) bool {
	select {
	case <-t.ready:
		return true
	default:
		return false
	}
}

// grantOrder releases held one by one and, after each release, names the
// ticket of tickets that was just granted ("" when none).
func grantOrder(t *testing.T, held []*slotTicket, tickets map[string]*slotTicket) []string {
	t.Helper()
	var order []string
	done := map[string]bool{}
	for len(held) > 0 {
		held[0].release()
		held = held[1:]
		next := ""
		for name, tk := range tickets {
			if !done[name] && granted(tk) {
				if next != "" {
					t.Fatalf("one release granted both %s and %s", next, name)
				}
				next = name
			}
		}
		if next != "" {
			done[next] = true
			held = append(held, tickets[next])
		}
		order = append(order, next)
	}
	return order
}

func TestSlotsChangeBeforeRoutine(t *testing.T) {
	s := newSlots(2)
	a, b := s.enqueue(classRoutine), s.enqueue(classRoutine)
	if !granted(a) || !granted(b) {
		t.Fatal("two free slots: both routine reconciles should hold one at once")
	}
	tickets := map[string]*slotTicket{}
	for i := range 5 {
		tickets[fmt.Sprintf("drift-%d", i)] = s.enqueue(classRoutine)
	}
	tickets["push"] = s.enqueue(classChange)
	if got, want := s.queued(), [numClasses]int{1, 5}; got != want {
		t.Fatalf("queued = %v, want %v", got, want)
	}
	got := grantOrder(t, []*slotTicket{a, b}, tickets)
	want := []string{"push", "drift-0", "drift-1", "drift-2", "drift-3", "drift-4", "", ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("order the slots were granted in (-want +got):\n%s", d)
	}
}

func TestSlotsNoStarvation(t *testing.T) {
	s := newSlots(1)
	held := s.enqueue(classRoutine)
	tickets := map[string]*slotTicket{"drift": s.enqueue(classRoutine)}
	for i := range maxChangeStreak + 2 {
		tickets[fmt.Sprintf("push-%02d", i)] = s.enqueue(classChange)
	}
	got := grantOrder(t, []*slotTicket{held}, tickets)
	var want []string
	for i := range maxChangeStreak {
		want = append(want, fmt.Sprintf("push-%02d", i))
	}
	want = append(want, "drift", fmt.Sprintf("push-%02d", maxChangeStreak), fmt.Sprintf("push-%02d", maxChangeStreak+1), "")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("a stream of changes should let the waiting drift check through after %d (-want +got):\n%s", maxChangeStreak, d)
	}
}

func TestSlotsPromote(t *testing.T) {
	s := newSlots(1)
	held := s.enqueue(classRoutine)
	tickets := map[string]*slotTicket{
		"drift-a": s.enqueue(classRoutine),
		"push":    s.enqueue(classChange),
		"drift-b": s.enqueue(classRoutine),
	}
	// drift-b's cluster.yml changed while it waited: behind the push
	// waiting already, before drift-a.
	s.promote(tickets["drift-b"], classChange)
	s.promote(tickets["push"], classRoutine) // never moved back
	got := grantOrder(t, []*slotTicket{held}, tickets)
	if d := cmp.Diff([]string{"push", "drift-b", "drift-a", ""}, got); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	s.promote(held, classChange) // granted long ago: nothing happens
	if q := s.queued(); q != [numClasses]int{} {
		t.Errorf("queued = %v after every ticket was granted", q)
	}
}

func TestSlotsWaitCancelled(t *testing.T) {
	s := newSlots(1)
	held := s.enqueue(classRoutine)
	ctx, cancel := context.WithCancel(context.Background())
	gone := s.enqueue(classChange)
	next := s.enqueue(classRoutine)
	cancel()
	if _, err := gone.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with ctx cancelled = %v, want context.Canceled", err)
	}
	held.release()
	held.release() // twice: one slot given back, not two
	if !granted(next) || granted(gone) {
		t.Fatal("the slot should go to the reconcile still waiting, not to the one whose ctx ended")
	}
	if third := s.enqueue(classChange); granted(third) {
		t.Fatal("a released slot was counted twice")
	}
	// A ticket granted as its ctx ends gives the slot back.
	s2 := newSlots(1)
	tk := s2.enqueue(classRoutine)
	release, err := tk.wait(ctx) // ready or ctx's end, whichever select picks
	if err == nil {
		release()
	}
	if again := s2.enqueue(classRoutine); !granted(again) {
		t.Fatalf("a ticket granted as its ctx ended (wait: %v) kept the slot", err)
	}
}

func TestSlotsConcurrent(t *testing.T) {
	const n, workers, rounds = 3, 16, 200
	s := newSlots(n)
	var holding, peak atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				class := slotClass((w + r) % int(numClasses))
				tk := s.enqueue(class)
				if r%7 == 0 {
					s.promote(tk, classChange)
				}
				release, err := tk.wait(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				h := holding.Add(1)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				holding.Add(-1)
				release()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > n {
		t.Errorf("%d reconciles held a slot at once, want at most %d", p, n)
	}
	if s.free != n || s.queued() != [numClasses]int{} {
		t.Errorf("after every release: free %d, queued %v; want %d free, none queued", s.free, s.queued(), n)
	}
}
