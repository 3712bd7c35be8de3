package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// nodeDisk is the free space Up asks for each node: a converged node of
// the example cluster writes about 0.3 GB beside its seeded engine
// (images, containers, etcd, logs), and an upgrade loads another version's
// images beside the first.
const nodeDisk = 1 << 30

// checkDisk says, before anything is made, when the filesystem that holds
// the sandbox's nodes has too little room for them: a node's engine that
// runs out of space fails much later, deep in an apply, with "no space
// left on device" from a container's copy.
func checkDisk(name string, nodes int) error {
	dir := nearestDir(StateRoot)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("sandbox %s: free space on %s: %w", name, dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	return diskShort(name, dir, nodes, free)
}

// diskShort is checkDisk's rule: a GiB per node, and one more for the
// builds and logs around them.
func diskShort(name, dir string, nodes int, free uint64) error {
	need := uint64(nodes+1) * nodeDisk
	if free >= need {
		return nil
	}
	return fmt.Errorf("sandbox %s: %s has %s free; %d node(s) need about %s (1 GiB each and one more): free space on that filesystem (`rigger sandbox down --all` removes other sandboxes; large build caches such as GOCACHE are often the cause) and run it again",
		name, dir, gib(free), nodes, gib(need))
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// nearestDir is dir or, when it does not exist yet, its nearest parent that
// does: the filesystem it will be made on.
func nearestDir(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}
