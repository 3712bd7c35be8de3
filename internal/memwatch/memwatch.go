// Package memwatch measures, in tests, how far the heap grows while
// something runs: a test of an attack on rigger's memory fails when it
// grows by more than the bound the code promises.
package memwatch

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// interval is how often the heap is sampled: reading the runtime's metrics
// does not stop the world, as runtime.ReadMemStats does.
const interval = 2 * time.Millisecond

// Peak starts sampling the bytes of the heap's objects, after a garbage
// collection, and returns the function that stops it and gives how far
// they grew above where they were at the start. Meanwhile the collector
// runs at Go's default pace (GOGC=100), whatever the environment says
// (make test sets GOGC=400 for the builds): the heap's objects include
// the garbage not collected yet, which the pace decides.
func Peak() func() uint64 {
	gcPercent := debug.SetGCPercent(100)
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak atomic.Uint64
	peak.Store(base)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		if v := read(); v > peak.Load() {
			peak.Store(v)
		}
		debug.SetGCPercent(gcPercent)
		return peak.Load() - base
	}
}
