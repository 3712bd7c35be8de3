package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Backend keeps a copy of a state directory somewhere that outlives the
// machine (Kubernetes Secrets, for rigger serve in a cluster): the
// directory is then a working copy, and every write and remove of statedir
// under a bound directory goes to the backend first. A file the backend
// refuses (another writer changed it, the API server is down, the file is
// too large) is not changed in the directory either, so that the two never
// hold different files.
//
// Its methods take no context: statedir's writes come from deep inside
// the engine (pki.Save, certrotate, secretsenc), which passes none; a
// backend bounds each call by its own deadline.
type Backend interface {
	// Put stores the file name (slash separated, relative to the bound
	// directory) as b and returns once it is stored durably.
	Put(name string, b []byte) error
	// Delete removes the file name; a file already gone is no error.
	Delete(name string) error
}

var bound struct {
	sync.Mutex
	dirs map[string]Backend
}

// Bind makes b the backend of the state directory dir (and of the
// directories under it) until unbind is called. Binding a directory again
// replaces its backend.
func Bind(dir string, b Backend) (unbind func(), err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bind state directory %s: %w", dir, err)
	}
	bound.Lock()
	defer bound.Unlock()
	if bound.dirs == nil {
		bound.dirs = map[string]Backend{}
	}
	bound.dirs[abs] = b
	return func() {
		bound.Lock()
		defer bound.Unlock()
		if bound.dirs[abs] == b {
			delete(bound.dirs, abs)
		}
	}, nil
}

// backendOf is the backend of the file p and its name relative to the
// bound directory, or nil when no directory above p is bound.
func backendOf(p string) (Backend, string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, "", err
	}
	bound.Lock()
	defer bound.Unlock()
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		if b, ok := bound.dirs[d]; ok {
			rel, err := filepath.Rel(d, abs)
			if err != nil {
				return nil, "", err
			}
			return b, filepath.ToSlash(rel), nil
		}
		if d == filepath.Dir(d) {
			return nil, "", nil
		}
	}
}

// put writes p through its backend, if it has one.
func put(p string, b []byte) error {
	be, name, err := backendOf(p)
	if err != nil || be == nil {
		return err
	}
	return be.Put(name, b)
}

// Remove removes the file name of the state directory dir, from its
// backend first; a file already gone is no error.
func Remove(dir, name string) error {
	p := filepath.Join(dir, name)
	be, rel, err := backendOf(p)
	if err != nil {
		return err
	}
	if be != nil {
		if err := be.Delete(rel); err != nil {
			return err
		}
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveAll removes the directory sub of the state directory dir and every
// file in it, each from its backend first.
func RemoveAll(dir, sub string) error {
	root := filepath.Join(dir, sub)
	if rel, err := filepath.Rel(dir, root); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("remove %s: not a directory inside the state directory %s", sub, dir)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		return Remove(filepath.Dir(p), d.Name())
	})
	if err != nil {
		return fmt.Errorf("remove %s from the state directory: %w", sub, err)
	}
	return os.RemoveAll(root)
}
