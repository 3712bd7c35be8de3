package fuzzcheck

import (
	"strings"
	"testing"
)

// sink keeps the test's allocations from being optimised away.
var sink []byte

func TestBoundedPasses(t *testing.T) {
	Bounded(t, 1000, func() { sink = make([]byte, 1000*AllocFactor) })
}

func TestBoundedFails(t *testing.T) {
	ft := &fakeT{TB: t}
	Bounded(ft, 10, func() { sink = make([]byte, AllocSlack+1000) })
	if !strings.Contains(ft.msg, "allocated") {
		t.Fatalf("an allocation over the budget passed (message %q)", ft.msg)
	}
}

// fakeT records Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = format
}
