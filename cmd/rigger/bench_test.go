package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// noopPairs is how many times BenchmarkNoop runs the floor, a plan, an
// apply and a doctor, one after the other: it reports the medians.
const noopPairs = 8

// BenchmarkNoop compares whole rigger processes, `rigger plan`,
// `rigger apply --yes` and `rigger doctor` (which must fail no check) of a
// converged 3-node sandbox cluster (every role on every node, the
// example's add-ons), with their floor measured beside them in the same
// run: three `ssh NODE docker ps -a` in parallel, with
// the same key and known hosts, the least a tool that reads the nodes
// over SSH does. It reports the medians of noopPairs runs of each, their
// CPU time, and each one's ratio to the floor (docs/BENCHMARKS.md).
// The binary is RIGGER_BIN (make bench gives bin/rigger), else built.
func BenchmarkNoop(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 39, Images: true})
	bin := riggerBinary(b)
	dir := b.TempDir()
	file := filepath.Join(dir, "cluster.yml")
	roles := map[int][]string{}
	for i := range s.Nodes {
		roles[i] = []string{"etcd", "controlplane", "worker"}
	}
	if err := os.WriteFile(file, []byte(sandboxtest.ClusterYML(b, s, roles)), 0o600); err != nil {
		b.Fatal(err)
	}
	cluster := []string{"-f", file, "--state-dir", filepath.Join(dir, "state")}
	if _, err := runProcess(bin, append([]string{"apply", "--yes"}, cluster...)...); err != nil {
		b.Fatalf("the first apply: %v", err)
	}
	key := filepath.Join(s.Dir, "ssh", "id_ed25519")
	knownHosts := filepath.Join(s.Dir, "ssh", "known_hosts")
	floor := func() (measured, error) {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
			cpu  time.Duration
		)
		start := time.Now()
		for _, n := range s.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := runProcess("ssh", "-i", key, "-o", "UserKnownHostsFile="+knownHosts, "-o", "StrictHostKeyChecking=yes",
					"-o", "BatchMode=yes", n.User+"@"+n.Address, "docker", "ps", "-a")
				mu.Lock()
				defer mu.Unlock()
				cpu += r.cpu
				if err != nil {
					errs = append(errs, err)
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			return measured{}, errs[0]
		}
		return measured{wall: time.Since(start), cpu: cpu}, nil
	}
	for b.Loop() {
		var floors, plans, applies, doctors []measured
		for range noopPairs {
			f, err := floor()
			if err != nil {
				b.Fatalf("the floor: %v", err)
			}
			p, err := runProcess(bin, append([]string{"plan"}, cluster...)...)
			if err != nil {
				b.Fatalf("rigger plan of the converged cluster: %v", err)
			}
			a, err := runProcess(bin, append([]string{"apply", "--yes"}, cluster...)...)
			if err != nil {
				b.Fatalf("rigger apply of the converged cluster: %v", err)
			}
			d, err := runProcess(bin, append([]string{"doctor"}, cluster...)...)
			if err != nil {
				b.Fatalf("rigger doctor of the converged cluster: %v", err)
			}
			floors, plans, applies, doctors = append(floors, f), append(plans, p), append(applies, a), append(doctors, d)
		}
		fl := median(floors)
		b.ReportMetric(fl.wall.Seconds(), "floor-s")
		b.ReportMetric(fl.cpu.Seconds(), "floor-cpu-s")
		for _, m := range []struct {
			name string
			runs []measured
		}{{"plan", plans}, {"apply", applies}, {"doctor", doctors}} {
			r := median(m.runs)
			b.ReportMetric(r.wall.Seconds(), m.name+"-s")
			b.ReportMetric(r.cpu.Seconds(), m.name+"-cpu-s")
			b.ReportMetric(r.wall.Seconds()/fl.wall.Seconds(), m.name+"/floor")
		}
	}
}

// measured is what one process took: its wall time and CPU time (user and
// system).
type measured struct{ wall, cpu time.Duration }

// median is the run of the median wall time, with the median CPU time.
func median(runs []measured) measured {
	walls := slices.SortedFunc(slices.Values(runs), func(a, b measured) int { return cmp.Compare(a.wall, b.wall) })
	cpus := slices.SortedFunc(slices.Values(runs), func(a, b measured) int { return cmp.Compare(a.cpu, b.cpu) })
	return measured{wall: walls[len(walls)/2].wall, cpu: cpus[len(cpus)/2].cpu}
}

// runProcess runs name with args to its end; a non-zero exit is an error
// with what it printed.
func runProcess(name string, args ...string) (measured, error) {
	cmd := exec.Command(name, args...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := measured{wall: time.Since(start)}
	if cmd.ProcessState != nil {
		r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return r, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return r, nil
}

// riggerBinary is the rigger binary the benchmarks run: RIGGER_BIN, or
// one built from this package.
func riggerBinary(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("RIGGER_BIN"); bin != "" {
		return bin
	}
	return sandboxtest.BuildRigger(b)
}

// BenchmarkChanges measures a cluster's changes on a fresh 4-node
// sandbox, each a whole `rigger apply --yes --timings` process, and
// prints each one's timeline (what waits on what):
//
//   - cold: three nodes with every role converged from nothing (the
//     images are in the nodes' engines already, as the sandbox loads
//     them: no pull is measured);
//   - one flag: a kube-proxy flag added on the three nodes, beside its
//     floor measured after it: `ssh NODE 'docker restart kube-proxy'`
//     then its /healthz polled until it answers, one node after the
//     other, as rigger rolls a change over three workers (one at a
//     time);
//   - a worker added: the fourth node joins as a worker.
//
// A cold converge happens once: one iteration is the whole sequence.
func BenchmarkChanges(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 41, Nodes: 4, Images: true})
	bin := riggerBinary(b)
	dir := b.TempDir()
	file := filepath.Join(dir, "cluster.yml")
	three := map[int][]string{}
	for i := range 3 {
		three[i] = []string{"etcd", "controlplane", "worker"}
	}
	four := maps.Clone(three)
	four[3] = []string{"worker"}
	yml := sandboxtest.ClusterYML(b, s, three)
	const proxyFlag = `conntrack-max-per-core: "0"`
	flagged := strings.Replace(yml, proxyFlag, proxyFlag+"\n      v: \"4\"", 1)
	if flagged == yml {
		b.Fatalf("the example's kube-proxy setting %s is gone: change the benchmark's flag", proxyFlag)
	}
	withWorker := strings.Replace(sandboxtest.ClusterYML(b, s, four), proxyFlag, proxyFlag+"\n      v: \"4\"", 1)
	apply := func(what, content string) (measured, []timeline.Span) {
		b.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
		m, spans, err := runTimed(bin, "apply", "--yes", "--timings", "-f", file, "--state-dir", filepath.Join(dir, "state"))
		if err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		logSpans(what, m, spans)
		return m, spans
	}
	key := filepath.Join(s.Dir, "ssh", "id_ed25519")
	knownHosts := filepath.Join(s.Dir, "ssh", "known_hosts")
	floor := func() measured {
		var total measured
		for _, n := range s.Nodes[:3] {
			r, err := runProcess("ssh", "-i", key, "-o", "UserKnownHostsFile="+knownHosts, "-o", "StrictHostKeyChecking=yes",
				"-o", "BatchMode=yes", n.User+"@"+n.Address,
				"docker restart kube-proxy >/dev/null && until curl -sf -o /dev/null http://127.0.0.1:10256/healthz; do sleep 0.1; done")
			if err != nil {
				b.Fatalf("the floor: %v", err)
			}
			total.wall += r.wall
			total.cpu += r.cpu
		}
		return total
	}
	for b.Loop() {
		cold, spans := apply("cold converge of three nodes", yml)
		b.ReportMetric(cold.wall.Seconds(), "cold-s")
		for _, sp := range spans {
			if p, ok := strings.CutPrefix(sp.Name, "apply: phase "); ok {
				b.ReportMetric(sp.Duration.Seconds(), "cold-"+p+"-s")
			}
		}
		flag, _ := apply("one kube-proxy flag on three nodes", flagged)
		fl := floor()
		b.ReportMetric(flag.wall.Seconds(), "flag-s")
		b.ReportMetric(fl.wall.Seconds(), "flag-floor-s")
		b.ReportMetric(flag.wall.Seconds()/fl.wall.Seconds(), "flag/floor")
		added, _ := apply("a worker added", withWorker)
		b.ReportMetric(added.wall.Seconds(), "add-worker-s")
	}
	if b.N != 1 {
		b.Fatalf("%d iterations: a cold converge is measured once", b.N)
	}
}

// runTimed runs rigger with args, which hold --timings, to its end, and
// returns what it took and the spans of its timeline (from its stderr).
func runTimed(bin string, args ...string) (measured, []timeline.Span, error) {
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	m := measured{wall: time.Since(start)}
	if cmd.ProcessState != nil {
		m.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return m, nil, fmt.Errorf("rigger %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	spans, err := parseTimings(stderr.String())
	return m, spans, err
}

// parseTimings reads back the table timeline.Render wrote after
// "Timings:": start, duration, a bar and the span's name on each line.
func parseTimings(s string) ([]timeline.Span, error) {
	_, table, ok := strings.Cut(s, "\nTimings:\n")
	if !ok {
		return nil, fmt.Errorf("no timings in:\n%s", s)
	}
	var spans []timeline.Span
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue // the header
		}
		start, err1 := time.ParseDuration(f[0])
		took, err2 := time.ParseDuration(f[1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("timings line %q: %w", line, err)
		}
		// After the two durations, the bar: spaces and one run of blocks.
		rest := strings.TrimSpace(line)
		rest = strings.TrimSpace(rest[len(f[0]):])[len(f[1]):]
		name := strings.TrimSpace(strings.TrimLeft(rest, " ▇"))
		spans = append(spans, timeline.Span{Name: name, Start: start, Duration: took})
	}
	return spans, nil
}

// logSpans prints a run's spans of a second or more (what the time went
// to), as a table for docs/BENCHMARKS.md, on standard output: a
// benchmark's log is cut to its first lines without -v.
func logSpans(what string, m measured, spans []timeline.Span) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s: %.1f s\n\n| from | took | what |\n|---|---|---|\n", what, m.wall.Seconds())
	for _, sp := range spans {
		if sp.Duration >= time.Second {
			fmt.Fprintf(&sb, "| %.1f s | %.1f s | %s |\n", sp.Start.Seconds(), sp.Duration.Seconds(), sp.Name)
		}
	}
	fmt.Print(sb.String())
}
