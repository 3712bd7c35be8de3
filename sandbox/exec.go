package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// run runs a command to its end and returns its standard output. The error
// names the command and carries what it wrote to standard error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	return runInDir(ctx, "", nil, name, args...)
}

// runInDir is run in directory dir (empty: the working directory) with
// extra environment variables.
func runInDir(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		if msg != "" {
			return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return stdout.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// nsenterArgs enters node n's network, mount, UTS and cgroup namespaces
// to run argv. The caller should be in the node's cgroup (service scripts
// move themselves there first).
func (s *Sandbox) nsenterArgs(n Node, argv ...string) []string {
	return append([]string{
		"--net=" + n.netnsPath(),
		"--mount=" + s.mntNSPath(n),
		"--uts=" + s.utsNSPath(n),
		"--cgroup=" + s.cgroupNSPath(n),
		"--wd=/",
		"--",
	}, argv...)
}

// waitFor calls check every interval until it returns nil, ctx ends or
// timeout passes; then the last error of check is returned.
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return fmt.Errorf("%s: %w", what, perm.error)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		case <-t.C:
		}
	}
}

// processAlive says whether pid is a live process (not a zombie).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st, err := parseProcStat(string(b))
	return err == nil && st.state != 'Z' && st.state != 'X'
}

// progress renders Up's phases and per-node lines (k0sctl style) to a
// writer that goroutines share.
type progress struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{out: w, start: time.Now()}
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format, args...)
}

// phase starts a titled phase: "==> title".
func (p *progress) phase(format string, args ...any) {
	p.printf("==> "+format+"\n", args...)
}

// node reports about one node: "node1: message".
func (p *progress) node(n, format string, args ...any) {
	p.printf("    %s: "+format+"\n", append([]any{n}, args...)...)
}

// info is an indented line that belongs to the current phase.
func (p *progress) info(format string, args ...any) {
	p.printf("    "+format+"\n", args...)
}
