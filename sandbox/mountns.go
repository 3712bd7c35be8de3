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
	"strings"

	"golang.org/x/sys/unix"
)

// hostMountpointsFile lists the directories the sandboxes created on the
// host as mount points (such as /etc/kubernetes), one a line, so that the
// last Down removes them again.
const hostMountpointsFile = StateRoot + "/host-mountpoints"

// mountSetupScript runs inside a node's new mount, UTS and cgroup
// namespaces, as `sh -c mountSetupScript sh HOSTNAME OP…` where OP is
// `bind SRC DST` or `shared DST`. It first drops the copies of namespace
// files that the new mount namespace inherited from the host (they would
// keep other nodes' namespaces alive); then mounts every cgroup hierarchy
// again from inside the node's cgroup namespace, so that the node's
// /sys/fs/cgroup/* (and the kubelet's, which binds /sys) are rooted at the
// node's own cgroup; then bind-mounts the node's own directories, makes
// some of them shared, and sets the hostname.
const mountSetupScript = `set -eu
hostname "$1"; shift
for m in $(awk '$2 ~ "^(/run/netns|/run/rigger-sandbox)(/|$)" {print $2}' /proc/self/mounts | sort -r); do
	umount -l "$m" 2>/dev/null || true
done
cgroups=$(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2, $3, $4}' /proc/self/mounts)
echo "$cgroups" | while read -r dir fstype opts; do
	[ -n "$dir" ] || continue
	umount "$dir"
	mount -t "$fstype" -o "$opts" rigger-sandbox "$dir"
done
while [ $# -gt 0 ]; do
	case $1 in
	bind) mount --bind "$2" "$3"; shift 3 ;;
	shared) mount --make-shared "$2"; shift 2 ;;
	*) echo "mount setup: unknown operation $1" >&2; exit 1 ;;
	esac
done
`

// joinCgroupScript moves the shell into the cgroup directories given (one
// per hierarchy) and runs the rest of its arguments, after "--":
// `sh -c joinCgroupScript sh DIR… -- ARGV…`. A process must be in the
// node's cgroup to make or enter the node's cgroup namespace with its
// paths right.
const joinCgroupScript = `set -eu
while [ "$1" != -- ]; do
	echo "$$" > "$1/cgroup.procs"
	shift
done
shift
exec "$@"
`

// joinCgroupArgs is `sh -c joinCgroupScript` for node n's cgroup, then argv.
func (s *Sandbox) joinCgroupArgs(n Node, argv ...string) []string {
	args := append([]string{"sh", "-c", joinCgroupScript, "sh"}, cgroupDirs(s.cgroupPath(n))...)
	return append(append(args, "--"), argv...)
}

// mountSetupArgs is the command line, run in the root mount namespace, that
// makes node n's persistent mount, UTS and cgroup namespaces.
func (s *Sandbox) mountSetupArgs(n Node) []string {
	args := []string{"--net=" + n.netnsPath(), "--"}
	args = append(args, s.joinCgroupArgs(n,
		"unshare", "--mount="+s.mntNSPath(n), "--uts="+s.utsNSPath(n), "--cgroup="+s.cgroupNSPath(n), "--propagation", "private", "--",
		"sh", "-c", mountSetupScript, "sh", n.Hostname)...)
	for _, p := range nodeMounts() {
		args = append(args, "bind", n.mountDir(p), p)
	}
	for _, p := range sharedMounts() {
		args = append(args, "shared", p)
	}
	return args
}

// ensureNodeCgroup makes node n's cgroup in every hierarchy. A new cpuset
// cgroup has no CPUs and memory nodes: they are copied from the parent.
func (s *Sandbox) ensureNodeCgroup(n Node) error {
	for _, dir := range cgroupDirs(s.cgroupPath(n)) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make cgroup %s: %w", dir, err)
		}
	}
	root := "/sys/fs/cgroup/cpuset"
	if _, err := os.Stat(filepath.Join(root, "cpuset.cpus")); err != nil {
		return nil // no cpuset v1 hierarchy
	}
	rel := strings.Split(strings.Trim(s.cgroupPath(n), "/"), "/")
	parent := root
	for _, part := range rel {
		dir := filepath.Join(parent, part)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return fmt.Errorf("read cgroup %s: %w", dir, err)
			}
			if strings.TrimSpace(string(cur)) != "" {
				continue
			}
			want, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				return fmt.Errorf("read cgroup %s: %w", parent, err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), want, 0o644); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, dir, err)
			}
		}
		parent = dir
	}
	return nil
}

// isNSFile says whether path is a bind-mounted namespace file (nsfs).
func isNSFile(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// ensureNSRoot makes nsRoot a private bind mount of itself: unshare(1) can
// bind a mount namespace file only below a mount that is not shared.
func ensureNSRoot(s *Sandbox) error {
	if err := os.MkdirAll(nsRoot, 0o700); err != nil {
		return fmt.Errorf("make %s: %w", nsRoot, err)
	}
	mounted, err := isMountPoint(nsRoot)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(nsRoot, nsRoot, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s: %w", nsRoot, err)
		}
	}
	if err := unix.Mount("", nsRoot, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", nsRoot, err)
	}
	return os.MkdirAll(s.nsDir(), 0o700)
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	mountPoint string
	fsType     string
}

func readMountInfo() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(bufio.NewScanner(f))
}

// parseMountInfo reads mountinfo(5) lines: the mount point is the fifth
// field, the file system type the first field after the " - " separator.
func parseMountInfo(sc *bufio.Scanner) ([]mountInfo, error) {
	var out []mountInfo
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			return nil, fmt.Errorf("parse mountinfo line %q", line)
		}
		out = append(out, mountInfo{mountPoint: unescapeMount(fields[4]), fsType: fields[sep+1]})
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			ok := true
			for _, d := range s[i+1 : i+4] {
				if d < '0' || d > '7' {
					ok = false
					break
				}
				c = c*8 + byte(d-'0')
			}
			if ok {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isMountPoint(path string) (bool, error) {
	ms, err := readMountInfo()
	if err != nil {
		return false, fmt.Errorf("read mounts: %w", err)
	}
	for _, m := range ms {
		if m.mountPoint == path {
			return true, nil
		}
	}
	return false, nil
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	ms, err := readMountInfo()
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	var out []string
	for _, m := range ms {
		if m.mountPoint == dir || strings.HasPrefix(m.mountPoint, dir+"/") {
			out = append(out, m.mountPoint)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

// unmountAll detaches every mount at or below dir.
func unmountAll(dir string) error {
	ms, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// ensureHostMountpoints makes the directories that the nodes mount over and
// that the host lacks, and records those it made.
func ensureHostMountpoints() error {
	var made []string
	for _, p := range nodeMounts() {
		made = append(made, missingDirs(p)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("make mount point %s: %w", p, err)
		}
	}
	if len(made) == 0 {
		return nil
	}
	f, err := os.OpenFile(hostMountpointsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("record mount points: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, strings.Join(made, "\n"))
	return err
}

// missingDirs lists path and those of its parents that do not exist,
// outermost first.
func missingDirs(path string) []string {
	var out []string
	for p := path; p != "/" && p != "."; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		out = append([]string{p}, out...)
	}
	return out
}

// removeHostMountpoints removes the recorded directories that are still
// empty, deepest first, and the record.
func removeHostMountpoints() error {
	b, err := os.ReadFile(hostMountpointsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dirs := strings.Fields(string(b))
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		_ = os.Remove(d) // only an empty directory goes
	}
	return os.Remove(hostMountpointsFile)
}

// ensureNodeMounts makes node n's cgroup, and its mount, UTS and cgroup
// namespaces unless they are there and complete.
func (s *Sandbox) ensureNodeMounts(ctx context.Context, n Node) error {
	done := filepath.Join(n.Dir, "mounts.done")
	if err := s.ensureNodeCgroup(n); err != nil {
		return err
	}
	if isNSFile(s.mntNSPath(n)) && isNSFile(s.utsNSPath(n)) && isNSFile(s.cgroupNSPath(n)) {
		if _, err := os.Stat(done); err == nil {
			return nil
		}
	}
	// Half-made (or gone after a reboot): start over.
	_ = os.Remove(done)
	if err := s.removeNodeMounts(ctx, n); err != nil {
		return err
	}
	for _, p := range nodeMounts() {
		if err := os.MkdirAll(n.mountDir(p), 0o755); err != nil {
			return fmt.Errorf("make node directory: %w", err)
		}
	}
	// The node's own, writable CNI directories, as a real machine has
	// them: the network plugin's installer fills them.
	for _, d := range []string{n.cniBinDir(), n.cniConfDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("make node directory: %w", err)
		}
	}
	for _, f := range s.nsFiles(n) {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			return fmt.Errorf("make namespace file: %w", err)
		}
	}
	if _, err := run(ctx, "nsenter", s.mountSetupArgs(n)...); err != nil {
		return fmt.Errorf("make mount namespace: %w", err)
	}
	return os.WriteFile(done, nil, 0o600)
}

// nsFiles are the files that keep node n's mount, UTS and cgroup
// namespaces.
func (s *Sandbox) nsFiles(n Node) []string {
	return []string{s.mntNSPath(n), s.utsNSPath(n), s.cgroupNSPath(n)}
}

// removeNodeMounts releases node n's mount, UTS and cgroup namespaces. The
// processes in them must have been stopped first.
func (s *Sandbox) removeNodeMounts(ctx context.Context, n Node) error {
	var errs []error
	for _, f := range s.nsFiles(n) {
		if isNSFile(f) {
			if err := unix.Unmount(f, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", f, err))
			}
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
