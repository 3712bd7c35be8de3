package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NodeStatus is what Status found of one node.
type NodeStatus struct {
	Node
	// Partitioned is true when the node's link is down (Partition).
	Partitioned bool
	// SSH, Docker and Containerd are nil when the node's sshd (over the
	// network), its engine and its containerd (CRI, through their sockets)
	// answer, else why not.
	SSH, Docker, Containerd error
	// Pids of the services that run, by service name.
	Pids map[string]int
}

// Status probes every node: its link, whether sshd answers on its address
// and whether its engine and its containerd answer on their sockets.
func (s *Sandbox) Status(ctx context.Context) []NodeStatus {
	out := make([]NodeStatus, len(s.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := NodeStatus{Node: n, Pids: map[string]int{}}
			l, ok, err := linkByName(ctx, n.Veth)
			switch {
			case err != nil:
				st.SSH = err
			case !ok:
				st.SSH = errNoLink
			default:
				st.Partitioned = !l.up()
			}
			for _, svc := range Services() {
				if pid := s.servicePid(n, svc); pid != 0 {
					st.Pids[svc] = pid
				}
			}
			if st.SSH == nil {
				st.SSH = sshBanner(ctx, n)
			}
			st.Docker = pingDocker(ctx, n.DockerSocket)
			_, st.Containerd = CRIVersion(ctx, n.ContainerdSocket)
			out[i] = st
		}()
	}
	wg.Wait()
	return out
}

type statusError string

func (e statusError) Error() string { return string(e) }

const errNoLink = statusError("the node's link is missing: run `rigger sandbox up` again")

// Leftovers lists what remains on the machine of sandbox s after Down:
// its network namespaces, links, namespace files, mounts, directories,
// cgroups, and those of pids that still run. Empty when all is gone.
func (s *Sandbox) Leftovers(ctx context.Context, pids []int) ([]string, error) {
	var left []string
	ls, err := links(ctx)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{s.Bridge: true}
	for _, n := range s.Nodes {
		names[n.Veth] = true
		if _, err := os.Lstat(n.netnsPath()); err == nil {
			left = append(left, "network namespace "+n.NetNS)
		}
		for _, d := range cgroupDirs(s.cgroupPath(n)) {
			if _, err := os.Stat(d); err == nil {
				left = append(left, "cgroup "+d)
			}
		}
	}
	for _, l := range ls {
		if names[l.Name] {
			left = append(left, "link "+l.Name)
		}
	}
	for _, dir := range []string{s.Dir, s.nsDir()} {
		ms, err := mountsUnder(dir)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			left = append(left, "mount "+m)
		}
		if _, err := os.Lstat(dir); err == nil {
			left = append(left, "directory "+dir)
		}
	}
	out, err := run(ctx, "ip", "rule", "show", "iif", s.Bridge)
	if err == nil && strings.TrimSpace(out) != "" {
		left = append(left, "policy rule "+strings.TrimSpace(out))
	}
	for _, pid := range pids {
		if processAlive(pid) {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	// Every process the sandbox starts names a file of its directory on
	// its command line (init, service scripts, sshd's config, dockerd's
	// runc wrapper).
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || slices.Contains(pids, pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s.Dir+"/") && processAlive(pid) {
			left = append(left, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return left, nil
}

// NodesCPU is the CPU time the sandbox's nodes have spent: every process
// of a node (its sshd, engines and containers) is in the node's cgroup,
// whose cpuacct.usage counts it (cgroup v1; 0 where there is none, as on
// cgroup v2 hosts, whose cpu.stat the sandbox does not read).
func (s *Sandbox) NodesCPU() time.Duration {
	var total time.Duration
	for _, n := range s.Nodes {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", s.cgroupPath(n), "cpuacct.usage"))
		if err != nil {
			continue
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil {
			total += time.Duration(ns)
		}
	}
	return total
}
