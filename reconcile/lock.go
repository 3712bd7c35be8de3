package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/rigger/rigger/reconcile/lock"
)

// LockFileName is the cluster's lock in its state directory.
const LockFileName = "lock"

// Lock takes the cluster's lock, a file in the state directory, for the
// command named (apply, serve, snapshot restore, …): two rigger processes
// with the same state directory never change the cluster at once. Without
// wait, a lock held by another process is an error (*lock.HeldError) that
// names the holder; with wait, Lock waits until it is free or ctx ends. A
// holder that dies releases the lock with it. Close releases it too.
func (s *Session) Lock(ctx context.Context, command string, wait bool) (release func(), err error) {
	if err := os.MkdirAll(s.opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err)
	}
	rel, err := lock.File(ctx, filepath.Join(s.opts.StateDir, LockFileName), lock.Me(command), wait)
	if err != nil {
		return nil, fmt.Errorf("lock cluster %s: %w", s.c.ClusterName, err)
	}
	s.unlock = sync.OnceFunc(func() {
		if err := rel(); err != nil {
			s.opts.Log.Warn("release the cluster's lock", "cluster", s.c.ClusterName, "err", err)
		}
	})
	return s.unlock, nil
}
