package main

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	bin := filepath.Join(b.TempDir(), "rigger")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
