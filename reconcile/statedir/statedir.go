// Package statedir keeps what rigger stores about a cluster outside git: a
// directory per cluster (mode 0700) whose files (mode 0600) are replaced
// atomically and durably — the PKI, the nodes of the last apply, the
// restores done, the cluster's lock. A directory may be bound to a Backend
// (Bind) that keeps a copy of its files elsewhere, written through.
package statedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rigger/rigger/internal/atomicfile"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

// LockFile is the cluster's lock (package lock) in its state directory: it
// belongs to the machine that holds it, and is no state to copy elsewhere.
const LockFile = "lock"

// Default is where a cluster's state lives unless told otherwise:
// $XDG_STATE_HOME/rigger/<cluster_name>, or ~/.local/state/rigger/<cluster_name>.
func Default(clusterName string) (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the state directory: %w: give --state-dir", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "rigger", clusterName), nil
}

// Make creates the state directory dir, or restricts it, to mode 0700.
func Make(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("restrict state directory: %w", err)
	}
	return nil
}

// WriteFile replaces the file name of the state directory dir (made when
// missing) with b, mode 0600, atomically and durably (atomicfile.Write).
// Under a directory bound to a Backend, the backend has the file first: a
// write it refuses changes nothing.
func WriteFile(dir, name string, b []byte) error {
	if err := Make(dir); err != nil {
		return err
	}
	p := filepath.Join(dir, name)
	if err := put(p, b); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return atomicfile.Write(p, b, fileMode)
}

// DamagedError is a state file that was read but does not decode: only a
// person can repair it (or move it away), so retrying does not help.
type DamagedError struct {
	Path string
	Err  error
}

func (e *DamagedError) Error() string { return fmt.Sprintf("%s is damaged: %v", e.Path, e.Err) }
func (e *DamagedError) Unwrap() error { return e.Err }

// maxJSONSize bounds a JSON file ReadJSON reads: the nodes of a
// thousand-node cluster, SSH keys inline, are a few MiB.
const maxJSONSize = 16 << 20

// ReadJSON decodes the JSON file name of dir into v, which it leaves as it
// is when there is no such file. A file that does not decode, or is larger
// than 16 MiB, is a *DamagedError; one that cannot be read, an I/O error.
func ReadJSON(dir, name string, v any) error {
	p := filepath.Join(dir, name)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJSONSize+1))
	if err != nil {
		return err
	}
	if len(b) > maxJSONSize {
		return &DamagedError{Path: p, Err: fmt.Errorf("larger than %d MiB, more than rigger ever writes", maxJSONSize>>20)}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &DamagedError{Path: p, Err: err}
	}
	return nil
}

// WriteJSON replaces the JSON file name of dir with v (WriteFile).
func WriteJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return WriteFile(dir, name, append(b, '\n'))
}
