// Package doctor walks each node of a cluster through the path a node
// takes to join it, as an ordered list of named checks (Check), and says
// at which step the walk of a node stops, what was found there and what to
// do: the diagnosis of "my node will not join" or "shows unavailable".
//
// Walk runs the checks of every node, nodes in parallel, each check within
// its own deadline. A node's walk stops at its first failing check: the
// checks after it are reported as not run, since what they look at
// depends on it. A check for something the cluster does not use skips
// itself. Run builds the checks (run.go) over a Cluster: the one read of
// the cluster package reconcile makes for every plan (the nodes, the
// certificates, etcd's members, the Nodes), and the connections the checks
// read more through (Reads; probe.go for the pod network and the Nodes'
// updates). Problems runs those that the read alone answers, for status.
// The judgements over what was read are the pure functions of this package
// (Reach, Host, Certificates, Containers, …), table-tested.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/fanout"
)

// Level is how a check came out.
type Level string

const (
	// Pass: what the check looks at is as it should be.
	Pass Level = "pass"
	// Warn: it works, but will not for long or not everywhere (a
	// certificate close to its end, swap on).
	Warn Level = "warn"
	// Fail: the node cannot join or serve until this is fixed; the walk of
	// the node stops here.
	Fail Level = "fail"
	// Skip: the check does not apply (etcd on a worker), or was skipped by
	// name (--skip).
	Skip Level = "skip"
	// NotRun: an earlier check of the node failed.
	NotRun Level = "not run"
)

// Result is what one check found.
type Result struct {
	Level Level
	// Expected is what should be, Found what is (both short, for people).
	Expected string
	Found    string
	// Fix says what to do, for a warning or a failure.
	Fix string
}

// Passed, Warned, Failed and Skipped make Results.
func Passed(found string) Result { return Result{Level: Pass, Found: found} }
func Skipped(why string) Result  { return Result{Level: Skip, Found: why} }
func Failed(expected, found, fix string) Result {
	return Result{Level: Fail, Expected: expected, Found: found, Fix: fix}
}
func Warned(expected, found, fix string) Result {
	return Result{Level: Warn, Expected: expected, Found: found, Fix: fix}
}

// Worst is the worst of results: a failure over a warning over a pass; a
// skip only when all are skips (or there are none). The texts are those of
// the worst ones, joined.
func Worst(results ...Result) Result {
	rank := map[Level]int{Skip: 0, Pass: 1, Warn: 2, Fail: 3}
	var out Result
	best := -1
	for _, r := range results {
		switch k := rank[r.Level]; {
		case k > best:
			out, best = r, k
		case k == best && k >= rank[Warn]:
			out.Expected = join(out.Expected, r.Expected)
			out.Found = join(out.Found, r.Found)
			out.Fix = join(out.Fix, r.Fix)
		}
	}
	if best < 0 {
		return Skipped("nothing to check")
	}
	return out
}

func join(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Check is one step of a node's walk.
type Check struct {
	// Name names the check in the report and in --skip.
	Name string
	// Timeout bounds Run (DefaultTimeout when zero).
	Timeout time.Duration
	// Run checks the node. It returns a Skip result for a node the check
	// does not apply to.
	Run func(ctx context.Context, node string) Result
}

// DefaultTimeout bounds a check that sets no Timeout.
const DefaultTimeout = 20 * time.Second

// Finding is a check's result on one node (Node "" for the checks of the
// whole cluster).
type Finding struct {
	Node     string `json:"node,omitempty"`
	Check    string `json:"check"`
	Level    Level  `json:"level"`
	Expected string `json:"expected,omitempty"`
	Found    string `json:"found,omitempty"`
	Fix      string `json:"fix,omitempty"`
	// Seconds is how long the check took.
	Seconds float64 `json:"seconds,omitempty"`
}

// Options are the settings of Walk.
type Options struct {
	// Skip names checks not to run: they are reported as skipped and do
	// not stop the walk.
	Skip []string
	// MaxParallel is how many nodes are walked at once (no limit when ≤ 0).
	MaxParallel int
}

// Walk runs checks on every node, nodes in parallel, in order on each: a
// check that fails ends the node's walk, the checks after it are NotRun.
// Each check runs within its Timeout; one that overruns fails, naming the
// deadline. The findings are in node order, then check order.
func Walk(ctx context.Context, nodes []string, checks []Check, o Options) []Finding {
	out := make([][]Finding, len(nodes))
	_ = fanout.Each(ctx, nodes, o.MaxParallel, func(ctx context.Context, i int, node string) error {
		out[i] = walkNode(ctx, node, checks, o.Skip)
		return nil
	})
	return slices.Concat(out...)
}

// walkNode runs the checks of one node.
func walkNode(ctx context.Context, node string, checks []Check, skip []string) []Finding {
	fs := make([]Finding, 0, len(checks))
	stopped := ""
	for _, c := range checks {
		f := Finding{Node: node, Check: c.Name}
		switch {
		case stopped != "":
			f.Level, f.Found = NotRun, "after "+stopped+" failed"
		case slices.Contains(skip, c.Name):
			f.Level, f.Found = Skip, "skipped by name"
		default:
			began := time.Now()
			r := run(ctx, node, c)
			f.Seconds = time.Since(began).Seconds()
			f.Level, f.Expected, f.Found, f.Fix = r.Level, r.Expected, r.Found, r.Fix
			if r.Level == Fail {
				stopped = c.Name
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// run runs one check within its deadline. A check that does not return
// in time (it ignores its context) is reported failed all the same: the
// walk goes on without it.
func run(ctx context.Context, node string, c Check) Result {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan Result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- Failed("the check to finish", fmt.Sprintf("the check panicked: %v", p), "report this as a bug of rigger")
			}
		}()
		done <- c.Run(ctx, node)
	}()
	select {
	case r := <-done:
		if r.Level == Fail && errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Found == "" {
			r.Found = fmt.Sprintf("no answer within %s", timeout)
		}
		return r
	case <-ctx.Done():
		return Failed("an answer within "+timeout.String(), fmt.Sprintf("no answer within %s", timeout),
			"the node or the network is slow or stuck: run doctor again, and check the node's load")
	}
}

// AnyFailed reports whether any finding is a failure.
func AnyFailed(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Level == Fail })
}
