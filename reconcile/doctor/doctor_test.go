package doctor

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWalkStopsAtFirstFailure(t *testing.T) {
	var ran atomic.Int32
	check := func(name string, fail func(node string) bool) Check {
		return Check{Name: name, Run: func(_ context.Context, node string) Result {
			ran.Add(1)
			if fail(node) {
				return Failed("ok", "broken on "+node, "fix it")
			}
			return Passed(node)
		}}
	}
	never := func(string) bool { return false }
	checks := []Check{
		check("one", never),
		check("two", func(n string) bool { return n == "b" }),
		{Name: "not-here", Run: func(context.Context, string) Result { return Skipped("not used") }},
		check("three", never),
		check("skipped", func(string) bool { return true }),
		check("four", never),
	}
	found := Walk(context.Background(), []string{"a", "b"}, checks, Options{Skip: []string{"skipped"}})
	want := []struct {
		node, check string
		level       Level
	}{
		{"a", "one", Pass}, {"a", "two", Pass}, {"a", "not-here", Skip}, {"a", "three", Pass}, {"a", "skipped", Skip}, {"a", "four", Pass},
		{"b", "one", Pass}, {"b", "two", Fail}, {"b", "not-here", NotRun}, {"b", "three", NotRun}, {"b", "skipped", NotRun}, {"b", "four", NotRun},
	}
	if len(found) != len(want) {
		t.Fatalf("got %d findings, want %d: %+v", len(found), len(want), found)
	}
	for i, w := range want {
		f := found[i]
		if f.Node != w.node || f.Check != w.check || f.Level != w.level {
			t.Errorf("finding %d = %s %s %s, want %s %s %s", i, f.Node, f.Check, f.Level, w.node, w.check, w.level)
		}
	}
	if f := found[7]; f.Found != "broken on b" || f.Fix != "fix it" || f.Expected != "ok" {
		t.Errorf("the failure lost its texts: %+v", f)
	}
	if f := found[8]; f.Found != "after two failed" {
		t.Errorf("a check not run says %q", f.Found)
	}
	// a: 4 run (one, two, three, four: not-here's Run counts too), b: 2.
	if got := ran.Load(); got != 6 {
		t.Errorf("%d checks ran, want 6: a skipped check or one after a failure ran", got)
	}
	if !AnyFailed(found) || AnyFailed(found[:6]) {
		t.Error("AnyFailed is wrong")
	}
}

func TestWalkDeadlines(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	checks := []Check{
		{Name: "ignores-its-context", Timeout: 50 * time.Millisecond, Run: func(context.Context, string) Result {
			<-stuck
			return Passed("")
		}},
		{Name: "after", Run: func(context.Context, string) Result { return Passed("") }},
	}
	began := time.Now()
	found := Walk(context.Background(), []string{"n"}, checks, Options{})
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the walk waited %s on a stuck check", took)
	}
	if f := found[0]; f.Level != Fail || !strings.Contains(f.Found, "no answer within 50ms") {
		t.Errorf("a stuck check gave %+v", f)
	}
	if found[1].Level != NotRun {
		t.Errorf("the check after a stuck one: %s", found[1].Level)
	}

	panics := []Check{{Name: "panics", Run: func(context.Context, string) Result { panic("boom") }}}
	if f := Walk(context.Background(), []string{"n"}, panics, Options{})[0]; f.Level != Fail || !strings.Contains(f.Found, "boom") {
		t.Errorf("a panicking check gave %+v", f)
	}
}

func TestWorst(t *testing.T) {
	r := Worst(Passed("a"), Warned("x", "w1", "f1"), Skipped("s"), Warned("y", "w2", "f2"))
	if r.Level != Warn || r.Found != "w1; w2" || r.Fix != "f1; f2" {
		t.Errorf("Worst = %+v", r)
	}
	if r := Worst(Warned("", "w", ""), Failed("", "f", "fix")); r.Level != Fail || r.Found != "f" {
		t.Errorf("a failure must win alone: %+v", r)
	}
	if r := Worst(); r.Level != Skip {
		t.Errorf("nothing to judge: %+v", r)
	}
}
