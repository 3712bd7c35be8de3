package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Down removes the sandbox called name and everything it made: its
// processes (found by pid, and by the node namespaces and cgroups they are
// in), its namespaces, mounts, links, the bridge and its rule, its
// directories; and, when it was the last sandbox, the range route and the
// host's mount points it created. It works on a half-made sandbox too, and
// does nothing when there is none.
func Down(ctx context.Context, name string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	lock, err := lockFile(ctx, hostLockPath, nil)
	if err != nil {
		return err
	}
	defer lock.unlock()

	s, err := Load(name)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		return cleanupShared(ctx)
	case err != nil:
		return err
	}
	if err := s.down(ctx); err != nil {
		return fmt.Errorf("take sandbox %s down: %w", name, err)
	}
	return cleanupShared(ctx)
}

// DownAll takes down every sandbox whose state is found, then removes what
// sandboxes whose state is gone left behind: network namespaces, links and
// namespace files named as the sandbox names them.
func DownAll(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	lock, err := lockFile(ctx, hostLockPath, nil)
	if err != nil {
		return err
	}
	defer lock.unlock()

	names, err := List()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		s, err := Load(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.down(ctx); err != nil {
			errs = append(errs, fmt.Errorf("take sandbox %s down: %w", name, err))
		}
	}
	if err := cleanupOrphans(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := cleanupShared(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// down removes one sandbox; the caller holds the host lock.
func (s *Sandbox) down(ctx context.Context) error {
	var errs []error
	// 1. Processes. The init's shell is stopped first, so that it starts
	// nothing more; then every node process goes (those in the nodes'
	// namespaces and cgroups, and every descendant of the init: a service
	// script in flight has not entered its node yet); then the init.
	tini, sh := s.initPids()
	if sh != 0 {
		_ = syscall.Kill(sh, syscall.SIGSTOP)
	}
	all := processSet{exclude: []int{tini, sh}}
	if tini != 0 {
		all.under = []int{tini}
	}
	for _, n := range s.Nodes {
		ps := s.nodeProcesses(n)
		all.namespaces = append(all.namespaces, ps.namespaces...)
		all.cgroupDirs = append(all.cgroupDirs, ps.cgroupDirs...)
		all.pids = append(all.pids, ps.pids...)
	}
	if err := all.kill(ctx, 0); err != nil {
		errs = append(errs, err)
	}
	// The shell first: tini reaps it and ends, so that only tini is left
	// for PID 1 to reap (this machine's PID 1 does so only now and then).
	for _, pid := range []int{sh, tini} {
		if pid == 0 {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		if err := (processSet{pids: []int{pid}}).killOnly(ctx, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox init: %w", err))
		}
	}
	// 2. Namespaces, links, cgroups.
	for _, n := range s.Nodes {
		if err := s.removeNodeMounts(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
		}
		if err := removeNodeNet(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
		}
		if err := removeCgroups(ctx, s.cgroupPath(n)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
		}
	}
	if err := removeCgroups(ctx, cgroupRoot+"/"+s.Name); err != nil {
		errs = append(errs, err)
	}
	if err := removeBridge(ctx, s.Bridge); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Keep the state: a later Down tries again.
		return errors.Join(errs...)
	}
	// 3. Directories. Nothing is mounted below them in this namespace;
	// make sure before removing.
	if err := unmountAll(s.Dir); err != nil {
		return err
	}
	if err := os.RemoveAll(s.nsDir()); err != nil {
		return fmt.Errorf("remove %s: %w", s.nsDir(), err)
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("remove %s: %w", s.Dir, err)
	}
	return nil
}

// nodeProcesses selects every process of node n: in its namespaces, in
// its cgroup, the services by their pid files, and their
// descendants.
func (s *Sandbox) nodeProcesses(n Node) processSet {
	var ps processSet
	for _, f := range append([]string{n.netnsPath()}, s.nsFiles(n)...) {
		if id, ok := nsOf(f); ok && isNSFile(f) {
			ps.namespaces = append(ps.namespaces, id)
		}
	}
	ps.cgroupDirs = cgroupDirs(s.cgroupPath(n))
	for _, svc := range Services() {
		if pid := s.servicePid(n, svc); pid != 0 {
			ps.pids = append(ps.pids, pid)
		}
	}
	return ps
}

// cgroupDirs lists the directories of cgroup path in every mounted cgroup
// hierarchy (v1: one per controller; v2: one).
func cgroupDirs(path string) []string {
	var out []string
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs"); len(m) > 0 {
		for _, procs := range m {
			out = append(out, filepath.Join(filepath.Dir(procs), path))
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		out = append(out, filepath.Join("/sys/fs/cgroup", path))
	}
	return out
}

// cgroupBusyWait is how long a busy cgroup is tried again: a process
// killed a moment ago stays in its cgroup until its parent reaps it (PID 1
// here reaps only now and then, later still on a busy machine).
const cgroupBusyWait = 30 * time.Second

// removeCgroups removes cgroup path and every cgroup below it, in every
// hierarchy. The processes in them must have ended; a cgroup still busy
// is tried again for up to cgroupBusyWait, each process still listed in it
// killed again (one that a process being killed forked). The error of a
// cgroup that stays busy lists those processes and their states.
func removeCgroups(ctx context.Context, path string) error {
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cgroupBusyWait, true, func(context.Context) (bool, error) {
		err = removeCgroupsOnce(path)
		if !errors.Is(err, unix.EBUSY) {
			return true, nil
		}
		for _, dir := range cgroupDirs(path) {
			for _, pid := range cgroupProcs(dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return false, nil
	})
	if errors.Is(err, unix.EBUSY) {
		var left []string
		for _, dir := range cgroupDirs(path) {
			for _, pid := range cgroupProcs(dir) {
				left = append(left, fmt.Sprintf("%d (%s)", pid, processState(pid)))
			}
		}
		if len(left) > 0 {
			slices.Sort(left)
			err = fmt.Errorf("%w; still in it after %s: %s", err, cgroupBusyWait, strings.Join(slices.Compact(left), ", "))
		}
	}
	return err
}

// processState is the state letter and name of pid's /proc/<pid>/stat
// (Z: a zombie its parent has not reaped; D: waiting on I/O), or "gone".
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "gone"
	}
	s := string(b)
	open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || shut < open || shut+3 > len(s) {
		return "unknown"
	}
	return s[shut+2:shut+3] + " " + s[open+1:shut]
}

func removeCgroupsOnce(path string) error {
	var errs []error
	for _, dir := range cgroupDirs(path) {
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cleanupOrphans removes what sandboxes without state left: network
// namespaces and their processes, links, namespace files. The caller holds
// the host lock and has taken down every sandbox with state.
func cleanupOrphans(ctx context.Context) error {
	var errs []error
	if entries, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), netnsPrefix) {
				continue
			}
			path := filepath.Join(netnsDir, e.Name())
			if id, ok := nsOf(path); ok && isNSFile(path) {
				if err := (processSet{namespaces: []nsID{id}}).kill(ctx, 0); err != nil {
					errs = append(errs, fmt.Errorf("network namespace %s: %w", e.Name(), err))
				}
			}
			if _, err := run(ctx, "ip", "netns", "delete", e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if entries, err := os.ReadDir(nsRoot); err == nil {
		for _, e := range entries {
			dir := filepath.Join(nsRoot, e.Name())
			files, _ := os.ReadDir(dir)
			for _, f := range files {
				path := filepath.Join(dir, f.Name())
				if id, ok := nsOf(path); ok && isNSFile(path) {
					if err := (processSet{namespaces: []nsID{id}}).kill(ctx, 0); err != nil {
						errs = append(errs, err)
					}
					if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
						errs = append(errs, fmt.Errorf("unmount %s: %w", path, err))
					}
				}
			}
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	ls, err := links(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, l := range ls {
		if !strings.HasPrefix(l.Name, bridgePrefix) {
			continue
		}
		if l.LinkInfo.Kind == "bridge" {
			if err := removeBridge(ctx, l.Name); err != nil {
				errs = append(errs, err)
			}
		} else if l.LinkInfo.Kind == "veth" {
			if err := removeLink(ctx, l.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := removeCgroups(ctx, cgroupRoot); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanupShared removes what the sandboxes share once none is left: the
// range route, the namespace root, the host mount points they created, the
// cgroup root, an empty /run/netns and the state root. The caller holds the
// host lock.
func cleanupShared(ctx context.Context) error {
	names, err := List()
	if err != nil || len(names) > 0 {
		return err
	}
	var errs []error
	if err := removeRange(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := unmountAll(nsRoot); err != nil {
		errs = append(errs, err)
	} else if err := os.RemoveAll(nsRoot); err != nil {
		errs = append(errs, err)
	}
	if err := removeHostMountpoints(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, cgroupRoot); err != nil {
		errs = append(errs, err)
	}
	// ip-netns(8) makes /run/netns a mount of its own; take it away when
	// it is empty, as it was before the first sandbox.
	if entries, err := os.ReadDir(netnsDir); err == nil && len(entries) == 0 {
		if mounted, _ := isMountPoint(netnsDir); mounted {
			_ = unix.Unmount(netnsDir, unix.MNT_DETACH)
		}
		_ = os.Remove(netnsDir)
	}
	_ = os.Remove(StateRoot) // only when empty
	return errors.Join(errs...)
}
