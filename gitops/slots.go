package gitops

import (
	"context"
	"fmt"
	"sync"
)

// slotClass orders the reconciles that wait for one of the MaxConcurrent
// slots: a free slot goes to the first waiting reconcile of the lowest
// class, and within a class to the one that waited longest (FIFO).
type slotClass int

const (
	// classChange: a reconcile of a cluster.yml content serve has not
	// reconciled yet (a person's push, a new cluster.yml).
	classChange slotClass = iota
	// classRoutine: everything serve does on its own, in the order it
	// asked: drift checks, retries (of a change too), snapshots, the
	// first reconcile after a start of unchanged content, rechecks.
	classRoutine
	numClasses
)

func (c slotClass) String() string {
	if c == classChange {
		return "change"
	}
	return "routine"
}

// maxChangeStreak is how many changes in a row take a free slot while a
// routine reconcile waits; the next free slot then goes to the routine
// one, so that a stream of pushes cannot keep drift checks and retries
// waiting forever.
const maxChangeStreak = 16

// slots are the MaxConcurrent reconcile slots and the reconciles waiting
// for one, by class.
type slots struct {
	mu      sync.Mutex
	free    int
	waiting [numClasses][]*slotTicket
	// streak counts the changes that took a slot in a row while a
	// routine reconcile waited.
	streak int
}

func newSlots(n int) *slots { return &slots{free: n} }

// slotTicket is one reconcile's place in the queue.
type slotTicket struct {
	s     *slots
	class slotClass
	// ready is closed when the slot is granted; granted says so under
	// s.mu, and released that it was given back.
	ready    chan struct{}
	granted  bool
	released bool
}

// enqueue puts a reconcile of class in the queue, and grants it a slot
// at once when one is free and nothing before it waits.
func (s *slots) enqueue(class slotClass) *slotTicket {
	t := &slotTicket{s: s, class: class, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting[class] = append(s.waiting[class], t)
	s.dispatch()
	return t
}

// promote moves a waiting ticket to class when that comes first (its
// cluster.yml changed while it waited for a drift check), behind the
// tickets waiting there already. A granted ticket is left as it is.
func (s *slots) promote(t *slotTicket, class slotClass) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.granted || class >= t.class || !s.remove(t) {
		return
	}
	t.class = class
	s.waiting[class] = append(s.waiting[class], t)
	s.dispatch()
}

// wait returns once the ticket holds a slot, with the function that
// gives it back, or when ctx ends (then the ticket leaves the queue).
func (t *slotTicket) wait(ctx context.Context) (release func(), err error) {
	select {
	case <-t.ready:
		return t.release, nil
	case <-ctx.Done():
	}
	t.s.mu.Lock()
	granted := t.granted
	if !granted {
		t.s.remove(t)
	}
	t.s.mu.Unlock()
	if granted {
		t.release() // granted as ctx ended: given back at once
	}
	return nil, fmt.Errorf("wait for a reconcile slot: %w", ctx.Err())
}

// release gives the slot back; a second call does nothing.
func (t *slotTicket) release() {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.released {
		return
	}
	t.released = true
	s.free++
	s.dispatch()
}

// queued is how many reconciles of each class wait.
func (s *slots) queued() [numClasses]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n [numClasses]int
	for c := range s.waiting {
		n[c] = len(s.waiting[c])
	}
	return n
}

// remove takes t out of its class's queue, and says whether it was
// there; the caller holds s.mu.
func (s *slots) remove(t *slotTicket) bool {
	q := s.waiting[t.class]
	for i, w := range q {
		if w == t {
			s.waiting[t.class] = append(q[:i:i], q[i+1:]...)
			return true
		}
	}
	return false
}

// dispatch hands the free slots to the waiting tickets in order; the
// caller holds s.mu.
func (s *slots) dispatch() {
	for s.free > 0 {
		changes, routine := s.waiting[classChange], s.waiting[classRoutine]
		var t *slotTicket
		switch {
		case len(changes) > 0 && (len(routine) == 0 || s.streak < maxChangeStreak):
			t, s.waiting[classChange] = changes[0], changes[1:]
			if len(routine) > 0 {
				s.streak++
			}
		case len(routine) > 0:
			t, s.waiting[classRoutine] = routine[0], routine[1:]
			s.streak = 0
		default:
			return
		}
		s.free--
		t.granted = true
		close(t.ready)
	}
}
