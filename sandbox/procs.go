package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat is what sandbox needs of /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	comm      string
	state     byte
}

// parseProcStat parses /proc/<pid>/stat. The command name is in parentheses
// and may itself contain spaces and parentheses, so the fields after it are
// found from the last ')'.
func parseProcStat(s string) (procStat, error) {
	open := strings.IndexByte(s, '(')
	end := strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("parse /proc stat %q: no command name", s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return procStat{}, fmt.Errorf("parse /proc stat %q: pid: %w", s, err)
	}
	rest := strings.Fields(s[end+1:])
	if len(rest) < 2 || len(rest[0]) != 1 {
		return procStat{}, fmt.Errorf("parse /proc stat %q: too few fields", s)
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return procStat{}, fmt.Errorf("parse /proc stat %q: ppid: %w", s, err)
	}
	return procStat{pid: pid, ppid: ppid, comm: s[open+1 : end], state: rest[0][0]}, nil
}

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

func nsOf(path string) (nsID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nsID{}, false
	}
	return nsID{dev: uint64(st.Dev), ino: st.Ino}, true
}

// processSet selects processes: those in any of the namespaces, those in
// any of the cgroup directories, the pids given, and every descendant of
// these.
type processSet struct {
	namespaces []nsID
	cgroupDirs []string
	pids       []int
	// under selects the descendants of these pids, not the pids.
	under []int
	// exclude is never selected.
	exclude []int
}

// find returns the live processes of the set, sorted. It never returns the
// calling process or PID 1.
func (ps processSet) find() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	picked := map[int]bool{}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		st, err := parseProcStat(string(b))
		if err != nil || st.state == 'Z' || st.state == 'X' {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
		for _, kind := range []string{"net", "mnt", "uts", "cgroup"} {
			id, ok := nsOf(filepath.Join("/proc", e.Name(), "ns", kind))
			if !ok {
				continue
			}
			for _, want := range ps.namespaces {
				if id == want {
					picked[pid] = true
				}
			}
		}
	}
	for _, pid := range ps.pids {
		if processAlive(pid) {
			picked[pid] = true
		}
	}
	for _, dir := range ps.cgroupDirs {
		for _, pid := range cgroupProcs(dir) {
			picked[pid] = true
		}
	}
	// Descendants: a container's processes are in namespaces of their own.
	queue := make([]int, 0, len(picked)+len(ps.under))
	for pid := range picked {
		queue = append(queue, pid)
	}
	queue = append(queue, ps.under...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !picked[c] {
				picked[c] = true
				queue = append(queue, c)
			}
		}
	}
	delete(picked, self)
	delete(picked, 1)
	for _, pid := range ps.exclude {
		delete(picked, pid)
	}
	out := make([]int, 0, len(picked))
	for pid := range picked {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out, nil
}

// cgroupProcs lists the processes in dir and every cgroup below it.
func cgroupProcs(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		f, err := os.Open(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// kill ends the processes of the set: SIGTERM, then SIGKILL for what is
// left after grace, until none is left (new ones found meanwhile, such as a
// child forked at the last moment, are killed too).
func (ps processSet) kill(ctx context.Context, grace time.Duration) error {
	pids, err := ps.find()
	if err != nil || len(pids) == 0 {
		return err
	}
	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	deadline := time.Now().Add(grace)
	return waitFor(ctx, grace+15*time.Second, 100*time.Millisecond, "stop processes", func() error {
		left, err := ps.find()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return fmt.Errorf("%d still running: %v", len(left), left)
	})
}

// readPid reads a pid file; 0 when there is none.
func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	return pid, nil
}
