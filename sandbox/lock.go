package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// hostLockPath serialises what sandboxes share on the machine: choosing a
// subnet, the range route, the namespace root, the host mount points, and
// removing them when the last sandbox goes. Test packages run in parallel.
const hostLockPath = "/run/lock/rigger-sandbox.lock"

// fileLock is an flock(2) held on an open file.
type fileLock struct{ f *os.File }

// lockFile takes an exclusive flock on path, waiting (and telling who
// waits, through wait) until it is free or ctx ends.
func lockFile(ctx context.Context, path string, waiting func()) (*fileLock, error) {
	return flockFile(ctx, path, unix.LOCK_EX, waiting)
}

// lockFileShared takes a shared flock on path, waiting until no exclusive
// one is held or ctx ends.
func lockFileShared(ctx context.Context, path string) (*fileLock, error) {
	return flockFile(ctx, path, unix.LOCK_SH, nil)
}

// tryLockFile takes an exclusive flock on path if nobody holds one.
func tryLockFile(path string) (*fileLock, bool) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return &fileLock{f: f}, true
}

func flockFile(ctx context.Context, path string, how int, waiting func()) (*fileLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	told := false
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}

func (l *fileLock) unlock() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}
