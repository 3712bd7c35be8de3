package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	"github.com/rigger/rigger/internal/shellquote"
	"golang.org/x/sys/unix"
)

// Services a node runs, as StopService and StartService name them.
const (
	ServiceSSHD       = "sshd"
	ServiceDocker     = "docker"
	ServiceContainerd = "containerd"
)

// Services lists the services of every node, in the order they start:
// the node's engine uses its containerd, as Debian's docker.io does.
func Services() []string { return []string{ServiceContainerd, ServiceDocker, ServiceSSHD} }

// Timeouts of the node services.
const (
	// serviceStartTimeout bounds the wait for a service to answer.
	serviceStartTimeout = 60 * time.Second
	// serviceStopGrace is how long a stopped service may take to end
	// (dockerd stops its containers first) before it is killed.
	serviceStopGrace = 20 * time.Second
	// runcName is the name the engines know the runc wrapper by.
	runcName = "sandbox-runc"
)

// The sandbox init: one per sandbox, tini as a child subreaper running a
// shell loop that starts the service scripts named on its control FIFO.
// Services started so are descendants of tini, which reaps every one of them
// (and every container shim) when it ends: this machine's PID 1 reaps
// orphans only now and then, so that without the init every stopped daemon
// and shim would linger as a zombie.
const initScript = `#!/bin/sh
# rigger sandbox init, written by rigger sandbox: starts the service
# scripts whose paths are written, one a line, to the control FIFO.
set -u
dir=$1
root=$(dirname "$dir")
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# The FIFO is held open for writing too: a read never meets its end, which
# a loop reopening the FIFO would meet between two writers, and then drop
# what a writer wrote before the close.
exec 3<> "$dir/control"
echo "$$" > "$dir/sh.pid"
echo "$PPID" > "$dir/init.pid"
while read -r script <&3; do
	case $script in
	"$root"/node*/services/*.sh) ( setsid sh "$script" </dev/null >/dev/null 2>&1 & ) ;;
	*) echo "rigger sandbox init: ignored $script" >&2 ;;
	esac
done
echo "rigger sandbox init: reading $dir/control failed" >&2
exit 1
`

// runcWrapper is the default runtime of every node's engine and of its
// containerd's CRI plugin. Docker asks runc for every capability when a
// container is privileged, and runc fails ("unable to apply caps: operation
// not permitted") on machines whose bounding set lacks CAP_SYS_RESOURCE.
// Without that capability a process cannot lower its oom_score_adj either,
// which the CRI plugin asks for every pod sandbox (-998), and runc fails
// ("can't get final child's PID from pipe: EOF"). The wrapper drops the
// capability and raises a negative oomScoreAdj to 0 in the OCI bundle
// (create, run) or process file (exec), and runs runc. It changes the test
// machine only: no container spec changes for it.
const runcWrapper = `#!/bin/sh
# runc wrapper of rigger sandbox: drops CAP_SYS_RESOURCE, which this
# machine's capability bounding set lacks, and with it a negative
# oomScoreAdj (which needs it), then runs runc.
set -eu
bundle= process= prev= sub=
for a in "$@"; do
	case $prev in
	--bundle|-b) bundle=$a ;;
	--process|-p) process=$a ;;
	esac
	case $a in
	--bundle=*) bundle=${a#--bundle=} ;;
	--process=*) process=${a#--process=} ;;
	create|run) [ -z "$sub" ] && sub=$a ;;
	esac
	prev=$a
done
if [ -z "$bundle" ] && [ -n "$sub" ] && [ -f config.json ]; then bundle=.; fi
drop() {
	jq "$2 |= ((if .capabilities then .capabilities |= with_entries(.value |= map(select(. != \"CAP_SYS_RESOURCE\"))) else . end)
		| (if (.oomScoreAdj // 0) < 0 then .oomScoreAdj = 0 else . end))" "$1" > "$1.sandbox-tmp"
	mv "$1.sandbox-tmp" "$1"
}
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then drop "$bundle/config.json" .process; fi
if [ -n "$process" ] && [ -f "$process" ]; then drop "$process" .; fi
exec runc "$@"
`

// serviceScript is the script the init runs to start svc on node n: it
// records its pid, moves into the node's cgroup, enters the node's
// namespaces and becomes the daemon.
func (s *Sandbox) serviceScript(n Node, svc string) string {
	var argv []string
	switch svc {
	case ServiceContainerd:
		argv = []string{"containerd", "--config", n.containerdConfigPath()}
	case ServiceDocker:
		argv = s.dockerdArgs(n)
	case ServiceSSHD:
		argv = []string{"/usr/sbin/sshd", "-D", "-e", "-f", n.SSHDConfigPath()}
	}
	q := make([]string, 0, len(argv)+8)
	for _, a := range append([]string{"nsenter"}, s.nsenterArgs(n, argv...)...) {
		q = append(q, shellquote.Quote(a))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# %s of %s in sandbox %s, started by the sandbox init (written by rigger sandbox).\n", svc, n.Name, s.Name)
	fmt.Fprintf(&b, "echo \"$$\" > %s\n", shellquote.Quote(n.pidFile(svc)))
	for _, dir := range cgroupDirs(s.cgroupPath(n)) {
		fmt.Fprintf(&b, "echo \"$$\" > %s\n", shellquote.Quote(filepath.Join(dir, "cgroup.procs")))
	}
	fmt.Fprintf(&b, "exec %s >>%s 2>&1\n", strings.Join(q, " "), shellquote.Quote(filepath.Join(n.logDir(), svc+".log")))
	return b.String()
}

// serviceMarker is what the command line of svc on node n holds, and no
// other node's: a pid file may outlive its process, and the pid be reused.
func (s *Sandbox) serviceMarker(n Node, svc string) string {
	switch svc {
	case ServiceContainerd:
		return n.containerdConfigPath()
	case ServiceDocker:
		return dockerLabel + "=" + s.Name + "/" + n.Name
	}
	return n.SSHDConfigPath()
}

// dockerLabel is the engine label that names a node's engine
// (`docker info` shows it).
const dockerLabel = "io.rigger.sandbox.node"

// dockerdArgs is node n's engine: the default socket, data and exec roots
// (inside the node's own directories), the node's containerd, host
// networking only and no iptables, and the runc wrapper. The engine runs in
// the node's cgroup namespace: its containers' cgroups (/docker/<id>) are
// below the node's cgroup.
func (s *Sandbox) dockerdArgs(n Node) []string {
	argv := []string{
		"dockerd",
		"--host=unix://" + DockerSocket,
		"--containerd=" + ContainerdSocket,
		"--label=" + dockerLabel + "=" + s.Name + "/" + n.Name,
	}
	argv = append(argv, engineArgs...)
	return append(argv,
		"--exec-opt=native.cgroupdriver=cgroupfs",
		"--add-runtime="+runcName+"="+s.runcWrapperPath(),
		"--default-runtime="+runcName,
	)
}

// engineArgs are what every engine the sandbox starts has, the nodes' and
// the engine store's: no networking of its own (host networking, no
// iptables), and the overlay2 storage driver, whose layout the store holds.
var engineArgs = []string{
	"--bridge=none",
	"--iptables=false",
	"--ip6tables=false",
	"--ip-masq=false",
	"--ip-forward=false",
	"--userland-proxy=false",
	"--storage-driver=overlay2",
}

// sshdConfig is node n's sshd configuration: root with the sandbox's key
// only, on the node's address, with TCP and Unix socket forwarding (the
// Docker socket tunnel).
func (s *Sandbox) sshdConfig(n Node) string {
	return fmt.Sprintf(`# sshd of %s in sandbox %s, written by rigger sandbox.
ListenAddress %s:%d
HostKey %s
PidFile none
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
StrictModes no
X11Forwarding no
PrintMotd no
Subsystem sftp internal-sftp
`, n.Name, s.Name, n.Address, n.Port, n.hostKeyPath(), s.authorizedKeysPath())
}

// writeNodeFiles writes node n's configuration and service scripts.
func (s *Sandbox) writeNodeFiles(n Node) error {
	for _, d := range []string{n.servicesDir(), n.logDir(), filepath.Dir(n.pidFile("x")), filepath.Join(n.mountDir("/run"), "sshd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("make node directory: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(n.containerdConfigPath()), 0o755); err != nil {
		return fmt.Errorf("make node directory: %w", err)
	}
	files := map[string]string{
		n.SSHDConfigPath():       s.sshdConfig(n),
		n.containerdConfigPath(): s.containerdConfig(n),
	}
	for _, svc := range Services() {
		files[filepath.Join(n.servicesDir(), svc+".sh")] = s.serviceScript(n, svc)
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// ensureInit starts the sandbox init unless it runs.
func (s *Sandbox) ensureInit(ctx context.Context) error {
	if pid := s.initPid(); pid != 0 {
		return nil
	}
	dir := s.initDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make init directory: %w", err)
	}
	for _, f := range []string{"init.pid", "sh.pid", "control"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	if err := os.WriteFile(filepath.Join(dir, "init.sh"), []byte(initScript), 0o700); err != nil {
		return fmt.Errorf("write init: %w", err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "control"), 0o600); err != nil {
		return fmt.Errorf("make init control FIFO: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.runcWrapperPath()), 0o755); err != nil {
		return fmt.Errorf("write runc wrapper: %w", err)
	}
	if err := os.WriteFile(s.runcWrapperPath(), []byte(runcWrapper), 0o755); err != nil {
		return fmt.Errorf("write runc wrapper: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "init.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("start sandbox init: %w", err)
	}
	defer logf.Close()
	// setsid --fork: the init outlives this process, in a session of its own.
	cmd := exec.CommandContext(ctx, "setsid", "--fork", "tini", "-s", "--", "sh", filepath.Join(dir, "init.sh"), dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start sandbox init: %w (see %s)", err, logf.Name())
	}
	return waitFor(ctx, 10*time.Second, 50*time.Millisecond, "start sandbox init", func() error {
		if s.initPid() == 0 {
			return fmt.Errorf("no init running: see %s", logf.Name())
		}
		return nil
	})
}

// initPid is the pid of the running sandbox init (tini), or 0.
func (s *Sandbox) initPid() int {
	tini, _ := s.initPids()
	return tini
}

// initPids are the pids of the running init (tini) and of its shell loop;
// 0 for one that does not run.
func (s *Sandbox) initPids() (tini, sh int) {
	tini, _ = readPid(filepath.Join(s.initDir(), "init.pid"))
	if !s.ownsProcess(tini, s.initDir()) {
		tini = 0
	}
	sh, _ = readPid(filepath.Join(s.initDir(), "sh.pid"))
	if !s.ownsProcess(sh, s.initDir()) {
		sh = 0
	}
	return tini, sh
}

// ownsProcess says whether pid is alive and its command line names
// marker: a pid file can outlive its process, and the pid be reused.
func (s *Sandbox) ownsProcess(pid int, marker string) bool {
	if !processAlive(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(b), marker)
}

// servicePid is the pid of svc on node n, or 0 when it does not run.
func (s *Sandbox) servicePid(n Node, svc string) int {
	pid, _ := readPid(n.pidFile(svc))
	if !s.ownsProcess(pid, s.serviceMarker(n, svc)) {
		return 0
	}
	return pid
}

// tellInit asks the init to run script. Opening the FIFO for writing fails
// at once while the init is between two reads; it is tried again.
func (s *Sandbox) tellInit(ctx context.Context, script string) error {
	if s.initPid() == 0 {
		return fmt.Errorf("the sandbox init of %s does not run: run `rigger sandbox up --name %s`", s.Name, s.Name)
	}
	return writeControl(ctx, filepath.Join(s.initDir(), "control"), script)
}

// writeControl writes line to the init's control FIFO ctl, in one write
// (a line shorter than PIPE_BUF is never interleaved with another writer's).
func writeControl(ctx context.Context, ctl, line string) error {
	return waitFor(ctx, 10*time.Second, 20*time.Millisecond, "reach the sandbox init", func() error {
		f, err := os.OpenFile(ctl, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(line + "\n")
		return err
	})
}

// StartService starts service ("containerd", "docker" or "sshd") on node and waits until
// it answers. It does nothing when the service runs.
func (s *Sandbox) StartService(ctx context.Context, node, service string) error {
	n, err := s.nodeByName(node)
	if err != nil {
		return err
	}
	if err := checkService(service); err != nil {
		return err
	}
	if err := s.startService(ctx, n, service); err != nil {
		return fmt.Errorf("start %s on %s: %w", service, node, err)
	}
	return nil
}

func checkService(service string) error {
	for _, svc := range Services() {
		if svc == service {
			return nil
		}
	}
	return fmt.Errorf("unknown service %q: a node runs %s", service, strings.Join(Services(), ", "))
}

func (s *Sandbox) startService(ctx context.Context, n Node, svc string) error {
	if s.servicePid(n, svc) == 0 {
		if err := s.ensureNodeCgroup(n); err != nil {
			return err
		}
		if svc == ServiceSSHD {
			if err := s.checkPortFree(ctx, n); err != nil {
				return err
			}
		}
		_ = os.Remove(n.pidFile(svc))
		if err := s.tellInit(ctx, filepath.Join(n.servicesDir(), svc+".sh")); err != nil {
			return err
		}
	}
	log := filepath.Join(n.logDir(), svc+".log")
	return waitFor(ctx, serviceStartTimeout, 100*time.Millisecond, "wait for "+svc, func() error {
		pid, _ := readPid(n.pidFile(svc))
		if pid != 0 && !processAlive(pid) {
			return permanentError{fmt.Errorf("%s exited: %s", svc, logTail(log, 5))}
		}
		return s.probe(ctx, n, svc)
	})
}

// permanentError is a failure that no waiting mends: waitFor returns it
// at once.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// probe says whether svc on node n answers.
func (s *Sandbox) probe(ctx context.Context, n Node, svc string) error {
	if s.servicePid(n, svc) == 0 {
		return fmt.Errorf("%s does not run", svc)
	}
	switch svc {
	case ServiceContainerd:
		_, err := CRIVersion(ctx, n.ContainerdSocket)
		return err
	case ServiceDocker:
		return pingDocker(ctx, n.DockerSocket)
	case ServiceSSHD:
		if l, ok, _ := linkByName(ctx, n.Veth); ok && !l.up() {
			return nil // partitioned: the process runs, and that is all there is to see
		}
		return sshBanner(ctx, n)
	}
	return checkService(svc)
}

// sshBanner connects to the node's sshd and reads its version line.
func sshBanner(ctx context.Context, n Node) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(n.Address, strconv.Itoa(n.Port)))
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	buf := make([]byte, 64)
	k, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("read ssh banner: %w", err)
	}
	if !strings.HasPrefix(string(buf[:k]), "SSH-2.0-") {
		return fmt.Errorf("%s:%d is not sshd: it says %q", n.Address, n.Port, buf[:k])
	}
	return nil
}

// dockerClient talks to the engine behind a Unix socket.
func dockerClient(socket string) (*client.Client, error) {
	return client.NewClientWithOpts(client.WithHost("unix://"+socket), client.WithAPIVersionNegotiation())
}

func pingDocker(ctx context.Context, socket string) error {
	c, err := dockerClient(socket)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = c.Ping(ctx)
	return err
}

// StopService stops service ("containerd", "docker" or "sshd") on node:
// SIGTERM to its pid, SIGKILL after a grace period. dockerd stops its
// containers as it ends; containerd's containers (and the engine's) go on
// running under their shims, as with `systemctl stop containerd`; sshd's
// open sessions go on, as with `systemctl stop ssh`.
func (s *Sandbox) StopService(ctx context.Context, node, service string) error {
	n, err := s.nodeByName(node)
	if err != nil {
		return err
	}
	if err := checkService(service); err != nil {
		return err
	}
	pid := s.servicePid(n, service)
	if pid == 0 {
		return nil
	}
	// Only the daemon, not the containers' shims.
	if err := (processSet{pids: []int{pid}}).killOnly(ctx, serviceStopGrace); err != nil {
		return fmt.Errorf("stop %s on %s: %w", service, node, err)
	}
	return nil
}

// killOnly ends exactly the pids of the set (not their descendants).
func (ps processSet) killOnly(ctx context.Context, grace time.Duration) error {
	for _, pid := range ps.pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	return waitFor(ctx, grace+10*time.Second, 100*time.Millisecond, "stop", func() error {
		var left []int
		for _, pid := range ps.pids {
			if processAlive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return fmt.Errorf("pids %v still running", left)
	})
}

// checkPortFree refuses to start sshd when something else in the node's
// network namespace listens on its port.
func (s *Sandbox) checkPortFree(ctx context.Context, n Node) error {
	out, err := run(ctx, "nsenter", "--net="+n.netnsPath(), "--", "ss", "-Hltnp", "sport = :"+strconv.Itoa(n.Port))
	if err != nil {
		return nil // no ss, or no namespace yet: sshd reports a taken port itself
	}
	if strings.TrimSpace(out) != "" {
		return fmt.Errorf("port %d in %s's network namespace is taken (%s): stop that process or run `rigger sandbox down --name %s`", n.Port, n.Name, strings.TrimSpace(out), s.Name)
	}
	return nil
}

// logTail returns the last lines of a log file, for error messages.
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "no log at " + path
	}
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprintf("%s (from %s)", strings.Join(all, " | "), path)
}
