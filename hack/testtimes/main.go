// Command testtimes reads `go test -json` and prints what `go test` prints
// without -v (a line per package, the whole output of a test or package
// that fails, build errors), then the slowest tests and packages, so that a
// run that grows says where. It exits 1 when a test, a package or a build
// failed, when the stream ends with a package unfinished, or when a command
// it ran failed.
//
// It reads its standard input, or runs the commands it is given (each with
// bash -c, at once) and reads what they write to their standard output and
// error, a whole line at a time, as one stream; -json keeps that stream in
// a file:
//
//	go test -json ./... | go run ./hack/testtimes -top 10
//	go run ./hack/testtimes -json all.json 'go test -json -p 3 ./slow/...' 'nice go test -json ./fast/...'
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rigger/rigger/internal/clip"
)

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests and packages to list")
	keep := flag.String("json", "", "also write the stream read to this file")
	flag.Parse()
	in, wait := io.Reader(os.Stdin), func() error { return nil }
	if flag.NArg() > 0 {
		in, wait = runAll(flag.Args())
	}
	if *keep != "" {
		f, err := os.Create(*keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = io.TeeReader(in, f)
	}
	ok, err := run(in, os.Stdout, *top)
	io.Copy(io.Discard, in) // what run did not read, so that the commands end
	if werr := wait(); werr != nil {
		fmt.Fprintln(os.Stdout, "testtimes:", werr)
		ok = false
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// runAll starts each command with bash -c and returns their standard
// outputs and errors as one stream of whole lines, in the order they come,
// and a wait for the commands, whose error names each that failed. The
// stream ends when every command has.
func runAll(cmds []string) (io.Reader, func() error) {
	pr, pw := io.Pipe()
	var (
		mu   sync.Mutex // one line at a time into pw
		wg   sync.WaitGroup
		errs = make([]error, len(cmds))
	)
	for i, c := range cmds {
		wg.Go(func() {
			err := runLines(c, func(line []byte) {
				mu.Lock()
				defer mu.Unlock()
				pw.Write(line) // read until the end: an error here is run's own
			})
			if err != nil {
				errs[i] = fmt.Errorf("command %d (%s): %w", i+1, clip.Ellipsis(c, 60), err)
			}
		})
	}
	go func() { wg.Wait(); pw.Close() }()
	return pr, func() error { wg.Wait(); return errors.Join(errs...) }
}

// runLines runs c with bash -c and hands each line it writes, with its
// newline, to line.
func runLines(c string, line func([]byte)) error {
	cmd := exec.Command("bash", "-c", c)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	r := bufio.NewReaderSize(out, 64<<10)
	for {
		b, err := r.ReadBytes('\n')
		if len(b) > 0 {
			if b[len(b)-1] != '\n' {
				b = append(b, '\n')
			}
			line(b)
		}
		if err != nil {
			break
		}
	}
	return cmd.Wait()
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
	return ok, nil
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
