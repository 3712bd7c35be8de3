package dockerop

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
)

// MaxOutput bounds the standard output RunOutput keeps.
const MaxOutput = 4 << 20

// RunOptions are the settings of a one-shot helper container beyond its
// image and command.
type RunOptions struct {
	// Binds are Docker bind mounts `host:container[:options]`.
	Binds []string
	// Env is `NAME=value`. It shows in `docker inspect`: paths and
	// settings only, never a secret.
	Env []string
	// NetworkMode is the Docker network mode ("host" to reach the node's
	// own ports); empty means no network at all.
	NetworkMode string
}

// Run runs cmd in a one-shot helper container created from image with
// binds, waits for it to end and removes it. A non-zero exit is an error
// with the container's last log lines.
func Run(ctx context.Context, e Engine, node, image string, cmd, binds []string) error {
	_, err := RunOutput(ctx, e, node, image, cmd, RunOptions{Binds: binds})
	return err
}

// RunOutput runs cmd as Run does, with the settings o, and returns what it
// wrote to its standard output (at most MaxOutput bytes). A non-zero exit
// is an error with the container's last log lines.
func RunOutput(ctx context.Context, e Engine, node, image string, cmd []string, o RunOptions) ([]byte, error) {
	if err := EnsureImage(ctx, e, node, image); err != nil {
		return nil, err
	}
	id, err := createHelper(ctx, e, image, cmd, o)
	if err != nil {
		return nil, fmt.Errorf("node %s: create helper container: %w", node, err)
	}
	defer func() { _ = e.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true}) }()
	waitC, errC := e.ContainerWait(ctx, id, container.WaitConditionNextExit)
	if err := start(ctx, e, id); err != nil {
		return nil, fmt.Errorf("node %s: start helper container: %w", node, err)
	}
	select {
	case err := <-errC:
		return nil, fmt.Errorf("node %s: wait for helper container: %w", node, err)
	case res := <-waitC:
		if res.StatusCode != 0 {
			msg := fmt.Sprintf("node %s: %s exited with code %d", node, strings.Join(cmd, " "), res.StatusCode)
			if logs := Logs(ctx, e, id); logs != "" {
				msg += ":\n" + logs
			}
			return nil, errors.New(msg)
		}
	}
	rc, err := e.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true})
	if err != nil {
		return nil, fmt.Errorf("node %s: read the output of %s: %w", node, cmd[0], err)
	}
	defer rc.Close()
	var out bytes.Buffer
	lw := &limitWriter{w: &out, n: MaxOutput}
	if err := demux(lw, io.Discard, rc); err != nil {
		if errors.Is(err, errLimit) {
			return nil, fmt.Errorf("node %s: %s wrote more than %d MiB", node, cmd[0], MaxOutput>>20)
		}
		return nil, fmt.Errorf("node %s: read the output of %s: %w", node, cmd[0], err)
	}
	return out.Bytes(), nil
}

// FileInfo is a regular file on a node.
type FileInfo struct {
	// Path on the node.
	Path    string
	Size    int64
	ModTime time.Time
}

// ListDir returns the regular files directly in dir on the node (not in
// its subdirectories), sorted by path, found by `find` in a one-shot
// helper container created from image (which must have find) and stat'ed
// through the archive API. A dir that does not exist has no files.
func ListDir(ctx context.Context, e Engine, node, image, dir string) ([]FileInfo, error) {
	dir = path.Clean(dir)
	bind := []string{dir + ":" + dir + ":ro"}
	out, err := RunOutput(ctx, e, node, image, []string{"find", dir, "-maxdepth", "1", "-type", "f"}, RunOptions{Binds: bind})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var paths []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && path.Dir(l) == dir {
			paths = append(paths, l)
		}
	}
	if len(paths) == 0 {
		return nil, nil
	}
	var infos []FileInfo
	err = withHelper(ctx, e, node, image, bind, func(id string) error {
		for _, p := range paths {
			st, err := e.ContainerStatPath(ctx, id, p)
			if errdefs.IsNotFound(err) {
				continue // removed meanwhile
			}
			if err != nil {
				return err
			}
			if st.Mode.IsRegular() {
				infos = append(infos, FileInfo{Path: p, Size: st.Size, ModTime: st.Mtime})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: list %s: %w", node, dir, err)
	}
	return infos, nil
}

// ReadFiles returns the files paths (all in one directory) that exist on
// the node, read through one helper container that binds their directory
// read-only. Together they must be at most MaxReadSize bytes.
func ReadFiles(ctx context.Context, e Engine, node, image string, paths []string) (map[string][]byte, error) {
	files := map[string][]byte{}
	if len(paths) == 0 {
		return files, nil
	}
	dir := path.Dir(paths[0])
	for _, p := range paths {
		if path.Dir(p) != dir || path.Clean(p) != p {
			return nil, fmt.Errorf("node %s: read files: %s is not a clean path in %s", node, p, dir)
		}
	}
	err := withHelper(ctx, e, node, image, []string{dir + ":" + dir + ":ro"}, func(id string) error {
		for _, p := range paths {
			rc, _, err := e.CopyFromContainer(ctx, id, p)
			if errdefs.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			err = readTar(rc, dir, dir, files)
			rc.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: read files in %s: %w", node, dir, err)
	}
	return files, nil
}

// OpenFile streams the regular file p from the node through a helper
// container created from image that binds p's directory read-only, and
// returns its size. Closing the reader removes the helper. A missing file
// is an error that wraps fs.ErrNotExist.
func OpenFile(ctx context.Context, e Engine, node, image, p string) (io.ReadCloser, int64, error) {
	p = path.Clean(p)
	dir := path.Dir(p)
	if err := EnsureImage(ctx, e, node, image); err != nil {
		return nil, 0, err
	}
	id, err := createHelper(ctx, e, image, []string{helperCommand}, RunOptions{Binds: []string{dir + ":" + dir + ":ro"}})
	if err != nil {
		return nil, 0, fmt.Errorf("node %s: create helper container: %w", node, err)
	}
	remove := func() { _ = e.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true}) }
	rc, _, err := e.CopyFromContainer(ctx, id, p)
	if err != nil {
		remove()
		if errdefs.IsNotFound(err) {
			return nil, 0, fmt.Errorf("node %s: %s: %w", node, p, fs.ErrNotExist)
		}
		return nil, 0, fmt.Errorf("node %s: read %s: %w", node, p, err)
	}
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err == nil && h.Typeflag != tar.TypeReg {
		err = fmt.Errorf("not a regular file")
	}
	if err != nil {
		rc.Close()
		remove()
		return nil, 0, fmt.Errorf("node %s: read %s: %w", node, p, err)
	}
	return &helperReader{Reader: tr, close: func() error { err := rc.Close(); remove(); return err }}, h.Size, nil
}

type helperReader struct {
	io.Reader
	close func() error
}

func (r *helperReader) Close() error { return r.close() }

// WriteStream writes size bytes from r to the file p on the node (mode
// FileMode), through a helper container created from image that binds p's
// directory (created when missing). A failed write may leave a partial
// file: the caller verifies and removes it.
func WriteStream(ctx context.Context, e Engine, node, image, p string, size int64, r io.Reader) error {
	p = path.Clean(p)
	if !path.IsAbs(p) || p == "/" {
		return fmt.Errorf("node %s: write %s: not an absolute file path", node, p)
	}
	dir := path.Dir(p)
	err := withHelper(ctx, e, node, image, []string{dir + ":" + dir}, func(id string) error {
		return copyIn(ctx, e, id, p, FileMode, size, r)
	})
	if err != nil {
		return fmt.Errorf("node %s: write %s: %w", node, p, err)
	}
	return nil
}

// copyIn writes size bytes from r to the file p (mode mode) in the
// container id, streamed: the parent directories are created when missing.
func copyIn(ctx context.Context, e Engine, id, p string, mode, size int64, r io.Reader) error {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"),
			Mode: mode, Size: size, ModTime: time.Now()})
		if err == nil {
			var n int64
			n, err = io.Copy(tw, io.LimitReader(r, size))
			if err == nil && n != size {
				err = fmt.Errorf("source ended after %d of %d bytes", n, size)
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := e.CopyToContainer(ctx, id, "/", pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errors.New("copy ended"))
	<-done // r is not read after copyIn returns
	return err
}

// StatFile returns the size and time of the file p on the node, read
// through a helper container created from image that binds p's directory
// read-only. A missing file is an error that wraps fs.ErrNotExist.
func StatFile(ctx context.Context, e Engine, node, image, p string) (FileInfo, error) {
	p = path.Clean(p)
	dir := path.Dir(p)
	var fi FileInfo
	err := withHelper(ctx, e, node, image, []string{dir + ":" + dir + ":ro"}, func(id string) error {
		st, err := e.ContainerStatPath(ctx, id, p)
		if errdefs.IsNotFound(err) {
			return fs.ErrNotExist
		}
		if err != nil {
			return err
		}
		if !st.Mode.IsRegular() {
			return errors.New("not a regular file")
		}
		fi = FileInfo{Path: p, Size: st.Size, ModTime: st.Mtime}
		return nil
	})
	if err != nil {
		return FileInfo{}, fmt.Errorf("node %s: stat %s: %w", node, p, err)
	}
	return fi, nil
}
