// Command testtimes reads `go test -json` on stdin and prints what `go test`
// prints without -v (a line per package, the whole output of a test or
// package that fails, build errors), then the slowest tests and packages,
// so that a run that grows says where, and last the failed tests, each
// with the last messages it logged: a reader of the run's end alone (a CI log
// cut in its middle) still sees what failed and why. It exits 1 when a
// test, a package or a build failed, or when the stream ends with a
// package unfinished.
//
//	go test -json ./... | go run ./hack/testtimes -top 10
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests and packages to list")
	flag.Parse()
	ok, err := run(os.Stdin, os.Stdout, *top)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// event is one line of test2json's stream (go doc test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output, build-fail
}

// timing is how long a test or package took.
type timing struct {
	name    string
	elapsed time.Duration
	failed  bool
}

// run copies the stream's story to w and returns whether everything
// passed.
func run(r io.Reader, w io.Writer, top int) (bool, error) {
	var (
		ok       = true
		buffered = map[string][]string{} // "pkg" or "pkg test": output not shown yet
		open     = map[string]bool{}     // packages started and not ended
		tests    []timing
		pkgs     []timing
		failures []failure
	)
	key := func(e event) string { return strings.TrimSpace(e.Package + " " + e.Test) }
	flush := func(k string) {
		for _, line := range buffered[k] {
			io.WriteString(w, line)
		}
		delete(buffered, k)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line) // not test2json's: go test's own words
			continue
		}
		switch e.Action {
		case "build-output":
			io.WriteString(w, e.Output)
		case "build-fail":
			ok = false
		case "start":
			open[e.Package] = true
		case "output":
			k := key(e)
			if e.Test == "" && isSummary(e.Output) {
				continue // the package's own ok/FAIL line: written at its end
			}
			buffered[k] = append(buffered[k], e.Output)
		case "pass", "skip":
			if e.Test == "" {
				delete(open, e.Package)
				pkgs = append(pkgs, timing{name: e.Package, elapsed: seconds(e.Elapsed)})
				if e.Action == "pass" {
					fmt.Fprintf(w, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
				} else {
					fmt.Fprintf(w, "?   \t%s\t[no test files]\n", e.Package)
				}
				for k := range buffered {
					if k == e.Package || strings.HasPrefix(k, e.Package+" ") {
						delete(buffered, k)
					}
				}
				continue
			}
			delete(buffered, key(e))
			tests = append(tests, timing{name: e.Package + " " + e.Test, elapsed: seconds(e.Elapsed)})
		case "fail":
			ok = false
			if e.Test != "" {
				failures = append(failures, failure{name: e.Package + " " + e.Test, last: lastWords(buffered[key(e)], 3)})
				flush(key(e))
				tests = append(tests, timing{name: e.Package + " " + e.Test, elapsed: seconds(e.Elapsed), failed: true})
				continue
			}
			delete(open, e.Package)
			// What the package printed outside its tests (a panic, a
			// timeout) and the tests still running when it ended.
			for k := range buffered {
				if strings.HasPrefix(k, e.Package+" ") {
					flush(k)
				}
			}
			flush(e.Package)
			pkgs = append(pkgs, timing{name: e.Package, elapsed: seconds(e.Elapsed), failed: true})
			fmt.Fprintf(w, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read the test stream: %w", err)
	}
	for _, p := range slices.Sorted(maps.Keys(open)) {
		ok = false
		flush(p)
		fmt.Fprintf(w, "FAIL\t%s\t(the stream ended before the package did)\n", p)
	}
	report(w, "packages", pkgs, top)
	report(w, "tests", topLevel(tests), top)
	reportFailures(w, failures, 10)
	return ok, nil
}

// failure is a failed test and the last messages it logged.
type failure struct {
	name string
	last []string
}

// lastWords are the first lines of the last n messages a test logged
// (t.Log, t.Error: "    file_test.go:12: ..."; a message's further lines
// are left out), each cut to 300 bytes: a failure's own message is among
// them, when what the test logs after it is short.
func lastWords(output []string, n int) []string {
	var out []string
	for _, l := range slices.Backward(output) {
		l = strings.TrimSpace(l)
		if !logged.MatchString(l) {
			continue
		}
		if len(l) > 300 {
			l = l[:300] + " …"
		}
		out = append(out, l)
		if len(out) == n {
			break
		}
	}
	slices.Reverse(out)
	return out
}

// logged is the start of a message a test logged: its file and line.
var logged = regexp.MustCompile(`^[\w./-]+\.go:\d+: `)

// reportFailures lists, at most max, the failed tests none of whose
// subtests failed (a parent fails with its subtest), with their last
// words.
func reportFailures(w io.Writer, fs []failure, max int) {
	leaves := slices.DeleteFunc(slices.Clone(fs), func(f failure) bool {
		return slices.ContainsFunc(fs, func(g failure) bool { return strings.HasPrefix(g.name, f.name+"/") })
	})
	if len(leaves) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFailed (%d), with the last messages each logged:\n", len(leaves))
	for _, f := range leaves[:min(max, len(leaves))] {
		fmt.Fprintf(w, "  %s\n", f.name)
		for _, l := range f.last {
			fmt.Fprintf(w, "    | %s\n", l)
		}
	}
	if len(leaves) > max {
		fmt.Fprintf(w, "  and %d more (above)\n", len(leaves)-max)
	}
}

// isSummary reports whether a package's output line is go test's own line
// for it ("ok  \tpkg\t1.2s", "FAIL\tpkg", "PASS", "FAIL"): written anew at
// the package's end.
func isSummary(s string) bool {
	s = strings.TrimRight(s, "\n")
	return s == "PASS" || s == "FAIL" || strings.HasPrefix(s, "ok  \t") || strings.HasPrefix(s, "FAIL\t") ||
		strings.HasPrefix(s, "?   \t")
}

// topLevel keeps the tests that are not subtests: a subtest's time is in
// its parent's.
func topLevel(ts []timing) []timing {
	return slices.DeleteFunc(slices.Clone(ts), func(t timing) bool {
		_, test, _ := strings.Cut(t.name, " ")
		return strings.Contains(test, "/")
	})
}

func report(w io.Writer, what string, ts []timing, top int) {
	if top <= 0 || len(ts) == 0 {
		return
	}
	slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
	var total time.Duration
	for _, t := range ts {
		total += t.elapsed
	}
	fmt.Fprintf(w, "\nThe %d slowest %s (of %d, %s in all):\n", min(top, len(ts)), what, len(ts), total.Round(time.Second))
	for _, t := range ts[:min(top, len(ts))] {
		mark := ""
		if t.failed {
			mark = "  FAILED"
		}
		fmt.Fprintf(w, "%9s  %s%s\n", t.elapsed.Round(100*time.Millisecond), t.name, mark)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
