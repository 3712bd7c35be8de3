package simnode

import (
	"fmt"
	"syscall"
)

// RaiseFileLimit raises this process's soft limit of open files
// (RLIMIT_NOFILE) to its hard limit, and returns the limit then in force.
// Each simulated node holds a listening socket, and each of its
// connections a file descriptor at both ends in this process: a thousand
// nodes need more than the usual soft limit of 1024. Go raises the soft
// limit at start already; this makes sure of it, and says what it is.
func RaiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open files limit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("raise the open files limit to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}
