package dockerop

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
)

// Limits of the file operations.
const (
	// MaxReadSize bounds what ReadDir takes from a node: rigger's files
	// there are certificates and small configs, a few hundred KiB.
	MaxReadSize = 32 << 20
	// FileMode is the mode of every file rigger writes: they hold keys.
	FileMode = 0o600
	// dirMode is the mode of the directories WriteFiles creates.
	dirMode = 0o755
	// helperCommand is the entrypoint of a helper container that is only
	// created, never started: the archive API needs a container, not a
	// process, and the image needs no shell for it.
	helperCommand = "/rigger-helper-is-never-started"
)

// withHelper creates a stopped helper container from image with binds,
// calls f with its ID, and removes it.
func withHelper(ctx context.Context, e Engine, node, image string, binds []string, f func(id string) error) error {
	if err := EnsureImage(ctx, e, node, image); err != nil {
		return err
	}
	id, err := createHelper(ctx, e, image, []string{helperCommand}, RunOptions{Binds: binds})
	if err != nil {
		return fmt.Errorf("node %s: create helper container: %w", node, err)
	}
	defer func() { _ = e.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true}) }()
	return f(id)
}

func createHelper(ctx context.Context, e Engine, image string, cmd []string, o RunOptions) (string, error) {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	resp, err := e.ContainerCreate(ctx,
		&container.Config{
			Image:           image,
			Entrypoint:      cmd[:1],
			Cmd:             cmd[1:],
			Env:             o.Env,
			Labels:          map[string]string{LabelHelper: "true"},
			NetworkDisabled: o.NetworkMode == "",
		},
		&container.HostConfig{Binds: o.Binds, NetworkMode: container.NetworkMode(o.NetworkMode)},
		nil, nil, "rigger-helper-"+hex.EncodeToString(suffix[:]))
	if err != nil {
		return "", err
	}
	return resp.ID, nil
}

// ReadDir returns every regular file under dir on the node, keyed by its
// path on the node, read through a helper container created from image
// that bind-mounts dir read-only. A dir that does not exist gives no files.
func ReadDir(ctx context.Context, e Engine, node, image, dir string) (map[string][]byte, error) {
	dir = path.Clean(dir)
	var files map[string][]byte
	err := withHelper(ctx, e, node, image, []string{dir + ":" + dir + ":ro"}, func(id string) (err error) {
		files, err = copyDir(ctx, e, id, dir)
		if errdefs.IsNotFound(err) {
			files, err = map[string][]byte{}, nil // the helper exists: dir does not
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: read %s: %w", node, dir, err)
	}
	return files, nil
}

// ReadDirVia is ReadDir through the container id, which bind-mounts dir at
// the same path (a component's container): one call instead of a helper's
// four. The engine reads a bind mount's files from the host, whether the
// container runs or not. A container that is gone is an error (not an
// empty dir): its mount point always exists.
func ReadDirVia(ctx context.Context, e Engine, node, id, dir string) (map[string][]byte, error) {
	dir = path.Clean(dir)
	files, err := copyDir(ctx, e, id, dir)
	if err != nil {
		return nil, fmt.Errorf("node %s: read %s: %w", node, dir, err)
	}
	return files, nil
}

// copyDir reads the regular files under dir in container id's filesystem.
func copyDir(ctx context.Context, e Engine, id, dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	rc, _, err := e.CopyFromContainer(ctx, id, dir)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return files, readTar(rc, path.Dir(dir), dir, files)
}

// readTar adds the regular files of an archive whose names are relative to
// base to files, each keyed by its path, which must be within dir. The
// archive (untrusted: a node sends it) is read up to MaxReadSize bytes, and
// files may then hold at most MaxReadSize bytes of content in all, what it
// held before included. Sparse files are refused: rigger writes none, and
// their holes would make a small archive expand.
func readTar(r io.Reader, base, dir string, files map[string][]byte) error {
	total := int64(0)
	for _, b := range files {
		total += int64(len(b))
	}
	lr := &io.LimitedReader{R: r, N: MaxReadSize + 1}
	tooLong := fmt.Errorf("read archive: more than %d MiB: not rigger's files only", MaxReadSize>>20)
	tr := tar.NewReader(lr)
	for {
		h, err := tr.Next()
		if lr.N <= 0 {
			return tooLong
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := path.Join(base, h.Name)
		if p != dir && !strings.HasPrefix(p, dir+"/") {
			return fmt.Errorf("read archive: %s is outside %s", h.Name, dir)
		}
		if sparse(h) {
			return fmt.Errorf("read archive: %s is a sparse file: not one rigger wrote", h.Name)
		}
		total += h.Size
		if total > MaxReadSize {
			return tooLong
		}
		b, err := io.ReadAll(tr)
		if lr.N <= 0 {
			return tooLong
		}
		if err != nil {
			return fmt.Errorf("read archive: %s: %w", h.Name, err)
		}
		files[p] = b
	}
}

// sparse reports whether h is a GNU sparse file in one of the PAX forms,
// which archive/tar expands as it reads.
func sparse(h *tar.Header) bool {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// WriteFiles writes files (path on the node → content) through a helper
// container created from image that bind-mounts root, under which every
// path must be. Files get FileMode and root ownership; missing directories
// are created. Each file is replaced whole: the engine extracts the archive
// file by file, so a reader sees the old or the new content of a file.
func WriteFiles(ctx context.Context, e Engine, node, image, root string, files map[string][]byte) error {
	root = path.Clean(root)
	archive, err := tarFiles(root, files)
	if err != nil {
		return fmt.Errorf("node %s: write files: %w", node, err)
	}
	err = withHelper(ctx, e, node, image, []string{root + ":" + root}, func(id string) error {
		return e.CopyToContainer(ctx, id, "/", archive, container.CopyToContainerOptions{})
	})
	if err != nil {
		return fmt.Errorf("node %s: write files under %s: %w", node, root, err)
	}
	return nil
}

// tarFiles archives files with names relative to "/", with a header for
// every directory below root so that missing ones are created.
func tarFiles(root string, files map[string][]byte) (*bytes.Buffer, error) {
	paths := make([]string, 0, len(files))
	dirs := map[string]bool{}
	for p := range files {
		clean := path.Clean(p)
		if clean != p || !strings.HasPrefix(p, root+"/") {
			return nil, fmt.Errorf("%s is not a clean path under %s", p, root)
		}
		paths = append(paths, p)
		for d := path.Dir(p); d != root; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	slices.Sort(paths)
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	slices.Sort(dirList) // parents sort before their children

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/",
			Mode: dirMode, ModTime: now}); err != nil {
			return nil, err
		}
	}
	for _, p := range paths {
		b := files[p]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"),
			Mode: FileMode, Size: int64(len(b)), ModTime: now}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}
