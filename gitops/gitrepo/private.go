package gitrepo

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// The clone holds the whole history of every cluster.yml: only its owner
// may read it. Directories are made privateDir, files at most privateFile.
const (
	privateDir  os.FileMode = 0o700
	privateFile os.FileMode = 0o600
	// othersBits are the mode bits of group and others.
	othersBits os.FileMode = 0o077
)

// privateFS is a billy filesystem on the OS whose directories and files
// only their owner may use, whatever go-git asks for (directories 0755,
// files 0666, packs and objects 0444) and whatever the umask. It exists
// because go-git's OS filesystem takes no modes.
type privateFS struct {
	billy.Filesystem
}

// newPrivateFS is a private filesystem rooted at dir.
func newPrivateFS(dir string) privateFS {
	return privateFS{osfs.New(dir)}
}

// mkdirs makes the directory of name (a path in the filesystem) and its
// missing parents privateDir, before the OS filesystem would make them
// 0755.
func (p privateFS) mkdirs(dir string) error {
	return os.MkdirAll(filepath.Join(p.Root(), dir), privateDir)
}

func (p privateFS) Create(name string) (billy.File, error) {
	return p.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, privateFile)
}

func (p privateFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&os.O_CREATE != 0 {
		if err := p.mkdirs(filepath.Dir(name)); err != nil {
			return nil, err
		}
	}
	return p.Filesystem.OpenFile(name, flag, perm&^othersBits)
}

func (p privateFS) TempFile(dir, prefix string) (billy.File, error) {
	if err := p.mkdirs(dir); err != nil {
		return nil, err
	}
	return p.Filesystem.TempFile(dir, prefix) // os.CreateTemp: 0600
}

func (p privateFS) Rename(from, to string) error {
	if err := p.mkdirs(filepath.Dir(to)); err != nil {
		return err
	}
	return p.Filesystem.Rename(from, to)
}

func (p privateFS) MkdirAll(name string, _ os.FileMode) error {
	return p.mkdirs(name)
}

func (p privateFS) Symlink(target, link string) error {
	if err := p.mkdirs(filepath.Dir(link)); err != nil {
		return err
	}
	return p.Filesystem.Symlink(target, link)
}

// Chmod is go-git's way of making packs and objects read-only (0444): they
// stay readable by their owner only.
func (p privateFS) Chmod(name string, mode os.FileMode) error {
	c, ok := p.Filesystem.(billy.Chmod)
	if !ok {
		return billy.ErrNotSupported
	}
	return c.Chmod(name, mode&^othersBits)
}

func (p privateFS) Chroot(dir string) (billy.Filesystem, error) {
	sub, err := p.Filesystem.Chroot(dir)
	if err != nil {
		return nil, err
	}
	return privateFS{sub}, nil
}

func (p privateFS) Capabilities() billy.Capability {
	return billy.Capabilities(p.Filesystem)
}

var (
	_ billy.Filesystem = privateFS{}
	_ billy.Chmod      = privateFS{}
	_ billy.Capable    = privateFS{}
)

// privateStorage is go-git's storage of the bare repository in dir, on a
// privateFS.
func privateStorage(dir string) *filesystem.Storage {
	return filesystem.NewStorage(newPrivateFS(dir), cache.NewObjectLRUDefault())
}

// closeToOthers takes group's and others' rights from dir, the clone's
// root: a directory made open before (by an older rigger, whose files in
// it are open too, or by hand).
func closeToOthers(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&othersBits != 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()&^othersBits); err != nil {
			return fmt.Errorf("%s is open to others and cannot be closed (%w): chmod 700 it or choose another directory", dir, err)
		}
	}
	return nil
}

// plainInit is git.PlainInit of a bare repository, private.
func plainInit(dir string) (*git.Repository, error) {
	return git.Init(privateStorage(dir), nil)
}

// plainOpen is git.PlainOpen of a bare repository, private.
func plainOpen(dir string) (*git.Repository, error) {
	return git.Open(privateStorage(dir), nil)
}
