package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// prerequisite is a program the sandbox runs and the Debian package that
// has it.
type prerequisite struct{ program, pkg string }

func prerequisites() []prerequisite {
	return []prerequisite{
		{"ip", "iproute2"},
		{"ss", "iproute2"},
		{"nsenter", "util-linux"},
		{"unshare", "util-linux"},
		{"setsid", "util-linux"},
		{"mount", "mount"},
		{"/usr/sbin/sshd", "openssh-server"},
		{"dockerd", "docker.io"},
		{"containerd", "containerd"},
		{"ctr", "containerd"},
		{"runc", "runc"},
		{"tini", "tini"},
		{"jq", "jq"},
	}
}

// ErrNotRoot is returned when the sandbox is asked for by another user.
var ErrNotRoot = errors.New("rigger sandbox needs root (it makes network namespaces, a bridge, routes and mounts): run it as root, e.g. with sudo")

// Precheck says why the sandbox cannot work on this machine, or nil: not
// root, missing programs, no namespaces.
func Precheck(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	var missing, pkgs []string
	seen := map[string]bool{}
	for _, p := range prerequisites() {
		if _, err := exec.LookPath(p.program); err != nil {
			missing = append(missing, p.program)
			if !seen[p.pkg] {
				pkgs = append(pkgs, p.pkg)
				seen[p.pkg] = true
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("rigger sandbox needs %s: run `make prereqs` (hack/install-prereqs.sh) or `apt-get install -y %s`",
			strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	if _, err := run(ctx, "unshare", "--net", "--mount", "--uts", "true"); err != nil {
		return fmt.Errorf("this machine does not let rigger make network, mount and UTS namespaces (%v): the sandbox needs a Linux kernel with namespaces and CAP_SYS_ADMIN (in a container: run it privileged)", err)
	}
	return nil
}
