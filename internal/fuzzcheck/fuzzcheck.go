// Package fuzzcheck holds what every fuzz target of a parser of untrusted
// input checks besides "no panic": that one call did work in proportion to
// its input. Go's fuzzer stops on crashes only; a parser that turns a small
// hostile input into gigabytes (an expanding format, a quadratic path)
// must fail the target too.
package fuzzcheck

import (
	"runtime"
	"testing"
)

// Allocation budget of one call: AllocFactor bytes per input byte, plus
// AllocSlack for what any call allocates (error values, small tables).
const (
	AllocFactor = 64
	AllocSlack  = 1 << 20
)

// Bounded runs parse once and fails t when it allocated more than the
// budget for an input of inputSize bytes. The count is the process's, so
// parse must be the only work running.
func Bounded(t testing.TB, inputSize int, parse func()) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	parse()
	runtime.ReadMemStats(&after)
	budget := uint64(AllocFactor)*uint64(inputSize) + AllocSlack
	if got := after.TotalAlloc - before.TotalAlloc; got > budget {
		t.Fatalf("one call allocated %d bytes for %d bytes of input: more than %d", got, inputSize, budget)
	}
}
