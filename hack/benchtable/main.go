// Command benchtable turns the output of `go test -bench` (on stdin) into
// the markdown tables of docs/BENCHMARKS.md: the machine (cores, memory,
// kernel) and the date first, then one table per package with a row per
// benchmark and a column per unit it reported. make bench runs it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := write(os.Stdout, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// result is one benchmark's line: its name and its values by unit.
type result struct {
	name   string
	values map[string]string
}

func write(w io.Writer, r io.Reader) error {
	var (
		pkg      string
		order    []string
		results  = map[string][]result{}
		units    = map[string][]string{}
		cpuModel string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "cpu: "):
			cpuModel = strings.TrimPrefix(line, "cpu: ")
		case strings.HasPrefix(line, "Benchmark"):
			f := strings.Fields(line)
			if len(f) < 4 || len(f)%2 != 0 {
				continue // a benchmark's log line, not its result
			}
			if _, err := strconv.Atoi(f[1]); err != nil {
				continue
			}
			res := result{name: f[0], values: map[string]string{}}
			for i := 2; i+1 < len(f); i += 2 {
				res.values[f[i+1]] = f[i]
				if !slices.Contains(units[pkg], f[i+1]) {
					units[pkg] = append(units[pkg], f[i+1])
				}
			}
			if _, ok := results[pkg]; !ok {
				order = append(order, pkg)
			}
			results[pkg] = append(results[pkg], res)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Measured %s on %d cores (%s), %s of memory, %s.\n", time.Now().UTC().Format("2006-01-02"),
		runtime.NumCPU(), cmpOr(cpuModel, "cpu unknown"), memory(), kernel())
	for _, p := range order {
		fmt.Fprintf(w, "\n### %s\n\n| benchmark | %s |\n|---|%s\n", p, strings.Join(units[p], " | "), strings.Repeat("---|", len(units[p])))
		for _, res := range results[p] {
			var cells []string
			for _, u := range units[p] {
				cells = append(cells, cmpOr(res.values[u], "—"))
			}
			fmt.Fprintf(w, "| %s | %s |\n", res.name, strings.Join(cells, " | "))
		}
	}
	return nil
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// memory is the machine's memory as /proc/meminfo says (MemTotal).
func memory() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "memory unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.Atoi(f[1]); err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "memory unknown"
}

// kernel is the kernel's release (/proc/sys/kernel/osrelease).
func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "kernel unknown"
	}
	return "Linux " + strings.TrimSpace(string(b))
}
