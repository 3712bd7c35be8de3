package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	kwait "k8s.io/apimachinery/pkg/util/wait"
)

// Backoff between two attempts of File to take a held lock when it waits.
const (
	// FileRetryMin is the first wait before trying a held lock file again.
	FileRetryMin = 50 * time.Millisecond
	// FileRetryMax is the longest wait between two attempts.
	FileRetryMax = time.Second
)

// maxHolderSize bounds what File reads back from a lock file: a holder
// record is a few hundred bytes, and the file may have been written by
// anyone able to write to it.
const maxHolderSize = 64 << 10

// File takes an exclusive lock on the file at path (flock(2), created with
// mode 0600, its directory with 0700 if missing) and writes h into it as
// JSON so that others can read who holds it. The lock belongs to the open
// file: a second File on the same path conflicts even in the same process,
// and the kernel releases the lock when the holder exits or crashes, so a
// stale lock file never blocks anyone.
//
// When the lock is held by someone else, File returns a *HeldError naming
// them if !wait; if wait, it tries again with a growing backoff (FileRetryMin
// to FileRetryMax) until it gets the lock or ctx ends, and then returns the
// *HeldError wrapped with ctx's error.
//
// release unlocks the file and clears the holder record; it never removes
// the file (removing it would let two processes lock two different files
// under one name). Calling release more than once is harmless.
func File(ctx context.Context, path string, h Holder, wait bool) (release func() error, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the directory of lock file %s: %w", path, err)
	}
	release, err = tryFile(path, h)
	var held *HeldError
	if err == nil || !errors.As(err, &held) || !wait {
		return release, err
	}
	// Tried again, the pause doubling from FileRetryMin to FileRetryMax.
	delay := kwait.Backoff{Duration: FileRetryMin, Factor: 2, Cap: FileRetryMax, Steps: math.MaxInt32}.DelayFunc()
	werr := delay.Until(ctx, false, true, func(context.Context) (bool, error) {
		release, err = tryFile(path, h)
		if errors.As(err, &held) {
			return false, nil
		}
		return true, err
	})
	if werr != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("stop waiting for the lock: %w: %w", context.Cause(ctx), err)
	}
	return release, err
}

// tryFile makes one attempt at taking the lock; it returns a *HeldError
// when someone else holds it.
func tryFile(path string, h Holder) (func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := readHolder(f)
			f.Close()
			return nil, &HeldError{Holder: holder, Lock: path, At: h.Since}
		}
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := writeHolder(f, h); err != nil {
		_ = flock(f, unix.LOCK_UN)
		f.Close()
		return nil, fmt.Errorf("write the holder into lock file %s: %w", path, err)
	}
	var once sync.Once
	var rerr error
	return func() error {
		once.Do(func() {
			// Clear the record before unlocking: whoever locks next
			// must not find our name in it.
			errClear := f.Truncate(0)
			if errClear == nil {
				errClear = f.Sync()
			}
			errUnlock := flock(f, unix.LOCK_UN)
			errClose := f.Close()
			if err := errors.Join(errClear, errUnlock, errClose); err != nil {
				rerr = fmt.Errorf("release lock file %s (the lock is dropped when this process exits): %w", path, err)
			}
		})
		return rerr
	}, nil
}

// flock is flock(2) on f, retried when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// writeHolder replaces the content of f with h as JSON and syncs it.
func writeHolder(f *os.File, h Holder) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

// readHolder reads the holder record from f. A holder that is still writing
// it, or a file that is not ours, gives a Holder that says so.
func readHolder(f *os.File) Holder {
	b, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, maxHolderSize), maxHolderSize))
	if err != nil {
		return Holder{ID: fmt.Sprintf("another process (reading its record: %v)", err)}
	}
	h, err := parseHolder(b)
	if err != nil {
		return Holder{ID: "another process (its record is not readable yet)"}
	}
	return h
}

// parseHolder decodes a holder record written by another process. The
// record is untrusted input: it must at least name the holder.
func parseHolder(b []byte) (Holder, error) {
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return Holder{}, fmt.Errorf("decode holder record: %w", err)
	}
	if h.ID == "" {
		return Holder{}, errors.New("decode holder record: no id")
	}
	return h, nil
}
