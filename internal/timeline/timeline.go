// Package timeline records where a command's time goes, for --timings:
// named spans, each with when it started (from the timeline's start) and
// how long it took. Spans may overlap (nodes read in parallel) and may be
// recorded from several goroutines. A nil *Timeline records nothing, so
// code can be instrumented unconditionally.
package timeline

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Span is one recorded part of the work.
type Span struct {
	Name string `json:"name"`
	// Start is when it began, from the timeline's start; Duration how long
	// it took.
	Start    time.Duration `json:"start"`
	Duration time.Duration `json:"duration"`
}

// Timeline is the spans of one command.
type Timeline struct {
	now   func() time.Time
	start time.Time

	mu    sync.Mutex
	spans []Span
}

// New is a timeline starting now.
func New() *Timeline { return NewAt(time.Now) }

// NewAt is a timeline whose clock is now (for tests).
func NewAt(now func() time.Time) *Timeline { return &Timeline{now: now, start: now()} }

// Begin starts the span name; the func it returns ends it (once; later
// calls do nothing). On a nil Timeline both do nothing.
func (t *Timeline) Begin(name string) (end func()) {
	if t == nil {
		return func() {}
	}
	began := t.now()
	var once sync.Once
	return func() {
		once.Do(func() {
			ended := t.now()
			t.mu.Lock()
			defer t.mu.Unlock()
			t.spans = append(t.spans, Span{Name: name, Start: began.Sub(t.start), Duration: ended.Sub(began)})
		})
	}
}

// Spans are the spans ended so far, by start (then by name).
func (t *Timeline) Spans() []Span {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	out := slices.Clone(t.spans)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Span) int {
		if a.Start != b.Start {
			return int(a.Start - b.Start)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// barWidth is the width of Render's bars, in characters.
const barWidth = 40

// Render writes the spans as a table: start, duration, a bar placing the
// span on the timeline's whole length, and the name.
func (t *Timeline) Render(w io.Writer) {
	spans := t.Spans()
	var total time.Duration
	for _, s := range spans {
		total = max(total, s.Start+s.Duration)
	}
	fmt.Fprintf(w, "%9s %9s  %-*s  %s\n", "START", "TOOK", barWidth, "", "WHAT")
	for _, s := range spans {
		fmt.Fprintf(w, "%9s %9s  %-*s  %s\n", ms(s.Start), ms(s.Duration), barWidth, bar(s, total), s.Name)
	}
}

// bar is the span on a line of barWidth characters standing for total.
func bar(s Span, total time.Duration) string {
	if total <= 0 {
		return ""
	}
	from := int(int64(barWidth) * int64(s.Start) / int64(total))
	to := int(int64(barWidth) * int64(s.Start+s.Duration) / int64(total))
	from = min(from, barWidth-1)
	to = min(max(to, from+1), barWidth)
	return strings.Repeat(" ", from) + strings.Repeat("▇", to-from)
}

// ms is d in milliseconds, with one decimal under 10 ms.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
