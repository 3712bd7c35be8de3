package lock

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is where a process runs, as far as a holder record can say: a
// host name, a boot of a kernel, a pid namespace. Two processes with the
// same three see the same pids, so one can tell whether the other still
// runs. LocalMachine is this process's; tests make their own.
type Machine struct {
	Host string
	// Boot is the kernel's boot id (/proc/sys/kernel/random/boot_id):
	// host names repeat, boot ids do not.
	Boot string
	// PIDNamespace names the pid namespace (/proc/self/ns/pid): a
	// container sharing the host's name and kernel has pids of its own.
	PIDNamespace string
	// Started returns when process pid started (clock ticks since boot,
	// as /proc/<pid>/stat says), or an error wrapping fs.ErrNotExist when
	// no process runs with that pid (a zombie does not run).
	Started func(pid int) (uint64, error)
}

// LocalMachine returns the Machine of this process. What /proc does not
// say stays empty, and then Gone never says yes.
func LocalMachine() Machine {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return Machine{Host: host, Boot: string(bytes.TrimSpace(boot)), PIDNamespace: ns, Started: processStart}
}

// Gone reports whether h is known to have ended: it ran on m (same host,
// boot and pid namespace) and its pid is now free, or belongs to a process
// that started at another time (the pid was reused). A holder elsewhere,
// or whose record lacks any of these (an older rigger), is not known to
// have ended.
func (m Machine) Gone(h Holder) bool {
	if m.Started == nil || m.Boot == "" || m.PIDNamespace == "" || h.PID <= 0 || h.Start == 0 ||
		h.Host != m.Host || h.Boot != m.Boot || h.PIDNamespace != m.PIDNamespace {
		return false
	}
	start, err := m.Started(h.PID)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return err == nil && start != h.Start
}

// processStart is Machine.Started on this machine. kill(pid, 0) says
// whether the pid is in use (also for another user's process, which a
// /proc mounted with hidepid may hide); /proc/<pid>/stat says since when
// and whether it is a zombie.
func processStart(pid int) (uint64, error) {
	gone := fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	if pid <= 0 || !pidInUse(pid) {
		return 0, gone
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !pidInUse(pid) {
			return 0, gone // ended meanwhile
		}
		// Not %w: an unreadable stat must not read as a process gone.
		return 0, fmt.Errorf("read the start time of process %d: %v", pid, err)
	}
	state, start, err := parseStat(b)
	if err != nil {
		return 0, fmt.Errorf("process %d: %v", pid, err)
	}
	if state == "Z" || state == "X" {
		return 0, gone
	}
	return start, nil
}

// pidInUse reports whether a process (a zombie included) has pid.
func pidInUse(pid int) bool {
	return !errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// parseStat reads the state and the start time of a process from its
// /proc/<pid>/stat: "pid (comm) state ppid … starttime …", starttime
// being the 22nd field; comm may hold spaces and parentheses.
func parseStat(b []byte) (state string, start uint64, err error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, errors.New("stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	const startField = 22 - 3 // fields after comm start at the 3rd
	if len(f) <= startField {
		return "", 0, fmt.Errorf("stat: %d fields after the command name, want more than %d", len(f), startField)
	}
	start, err = strconv.ParseUint(f[startField], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("stat: start time: %v", err)
	}
	return f[0], start, nil
}
