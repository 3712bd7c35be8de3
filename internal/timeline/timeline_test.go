package timeline

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock that moves when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestTimeline: spans are recorded with their start and length, ended
// once, sorted by start, and drawn on the whole length.
func TestTimeline(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)}
	tl := NewAt(c.now)
	whole := tl.Begin("plan")
	c.add(10 * time.Millisecond)
	nodes := tl.Begin("observe nodes")
	c.add(30 * time.Millisecond)
	nodes()
	nodes() // a second end changes nothing
	c.add(60 * time.Millisecond)
	whole()
	got := tl.Spans()
	want := []Span{{"plan", 0, 100 * time.Millisecond}, {"observe nodes", 10 * time.Millisecond, 30 * time.Millisecond}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	var b strings.Builder
	tl.Render(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], strings.Repeat("▇", barWidth)) || !strings.HasSuffix(lines[2], "observe nodes") ||
		!strings.Contains(lines[2], "10ms") || !strings.Contains(lines[2], "30ms") || !strings.Contains(lines[2], "    ▇▇▇▇▇▇▇▇▇▇▇▇ ") {
		t.Errorf("render:\n%s", b.String())
	}
}

// TestNil: a nil timeline records nothing.
func TestNil(t *testing.T) {
	var tl *Timeline
	tl.Begin("x")()
	if s := tl.Spans(); s != nil {
		t.Errorf("spans of nil: %v", s)
	}
}

// TestConcurrent: spans ended from many goroutines are all kept (run
// with -race).
func TestConcurrent(t *testing.T) {
	tl := New()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); tl.Begin("node")() }()
	}
	wg.Wait()
	if n := len(tl.Spans()); n != 50 {
		t.Errorf("%d spans, want 50", n)
	}
}
