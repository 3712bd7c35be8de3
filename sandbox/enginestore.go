package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The engine store: a Docker data root (its image and overlay2
// directories) that holds the sandbox's images, made once per machine and
// set of images by an engine of its own. A new node's /var/lib/docker
// starts as a copy of it whose layer files are hard links: importing about
// 700 MB into every node of every sandbox cost 25 to 40 s per sandbox under
// load, and as much disk writing. The node's engine then owns its copy as
// if it had imported the images itself (a node that removes an image
// unlinks its own names only: layers are read-only lower directories of
// the containers' overlays, never written).
//
// rigger's own image is left out: it changes with every build of rigger,
// and loadImages imports it (70 MB) into each node as before.

// engineStoreFormat changes when the way the store is made changes, so
// that stores made before are made anew.
const engineStoreFormat = "rigger-sandbox-engine/1"

// storeDirs are the parts of a data root the store holds: the image and
// layer metadata, and the layers. Everything else (networks, containers,
// the engine's own databases) each node's engine makes for itself.
var storeDirs = []string{"image", "overlay2"}

// storeImages are the images the store holds: all but rigger's own and
// the extra releases' (loadImages imports those).
func storeImages(imgs []builtImage) []builtImage {
	var out []builtImage
	for _, img := range imgs {
		if img.Ref != RiggerImage && !img.Extra {
			out = append(out, img)
		}
	}
	return out
}

// engineStoreKey names a store by its format, the engine that made it
// (its layout is the engine's) and every image's ref and content key.
func engineStoreKey(engineVersion string, imgs []builtImage) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", engineStoreFormat, strings.TrimSpace(engineVersion))
	for _, img := range imgs {
		fmt.Fprintf(h, "%s %s\n", img.Ref, img.Key)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// ensureEngineStore returns the directory of the engine store for imgs in
// cache, making it when it is not there: an engine of its own (private
// network and mount namespaces, data root in the cache) imports the
// images and stops; its image and overlay2 directories become the store.
// Stores of other image sets are removed.
func ensureEngineStore(ctx context.Context, cache string, imgs []builtImage, p *progress) (string, error) {
	version, err := run(ctx, "dockerd", "--version")
	if err != nil {
		return "", err
	}
	imgs = storeImages(imgs)
	base := filepath.Join(cache, "engine")
	dir := filepath.Join(base, engineStoreKey(version, imgs))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	lock, err := lockFile(ctx, filepath.Join(cache, "engine.lock"), func() { p.info("waiting for another rigger making the engine store") })
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	// Holding the lock, whatever else is here is an older store or a
	// half-made one of a run that was killed.
	if err := os.RemoveAll(base); err != nil {
		return "", fmt.Errorf("remove old engine stores: %w", err)
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(base, "new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := importIntoNewEngine(ctx, root, imgs); err != nil {
		return "", fmt.Errorf("engine store: %w", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !slices.Contains(storeDirs, e.Name()) {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				return "", err
			}
		}
	}
	for _, d := range storeDirs {
		if _, err := os.Stat(filepath.Join(root, d)); err != nil {
			return "", fmt.Errorf("engine store: the engine made no %s directory: %w", d, err)
		}
	}
	if err := os.Rename(root, dir); err != nil {
		return "", err
	}
	p.info("engine store: %d images imported once in %s (%s)", len(imgs), time.Since(start).Round(10*time.Millisecond), dir)
	return dir, nil
}

// importIntoNewEngine starts a dockerd on data root root, in network and
// mount namespaces of its own, imports imgs into it and stops it. Its
// socket, pid file and exec root are in a temporary directory (a Unix
// socket's path is short); the engine dies with this process.
func importIntoNewEngine(ctx context.Context, root string, imgs []builtImage) error {
	runDir, err := os.MkdirTemp("", "rigger-engine-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(runDir)
	socket := filepath.Join(runDir, "docker.sock")
	logPath := filepath.Join(filepath.Dir(root), "dockerd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	argv := []string{"--net", "--mount", "--propagation", "private", "--",
		"dockerd",
		"--data-root=" + root,
		"--exec-root=" + filepath.Join(runDir, "exec"),
		"--pidfile=" + filepath.Join(runDir, "docker.pid"),
		"--host=unix://" + socket,
	}
	cmd := exec.Command("unshare", append(argv, engineArgs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// unshare execs dockerd: the death signal reaches it, and dockerd's
	// own containerd has one too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(serviceStopGrace):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("dockerd did not stop within %s of SIGTERM", serviceStopGrace)
		}
	}
	defer stop()

	err = waitFor(ctx, 2*time.Minute, 100*time.Millisecond, "the engine store's dockerd", func() error {
		select {
		case err := <-exited:
			stopped = true
			return permanentError{fmt.Errorf("dockerd exited (%v): %s", err, logTail(logPath, 5))}
		default:
		}
		return pingDocker(ctx, socket)
	})
	if err != nil {
		return err
	}
	c, err := dockerClient(socket)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, img := range imgs {
		if err := importImage(ctx, c, img); err != nil {
			return fmt.Errorf("import %s: %w", img.Ref, err)
		}
	}
	if err := stop(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return err
		}
		return fmt.Errorf("dockerd ended with %v: %s", err, logTail(logPath, 5))
	}
	return nil
}

// seedEngine gives node n's data root the store's images when its engine
// has never run (no image or overlay2 directory): a copy of the store with
// its layer files hard-linked. It says whether it did. A copy cut short
// (the store on another file system, a killed run) leaves no part in
// place: the copy is made aside and renamed into place.
func seedEngine(ctx context.Context, n Node, store string) (bool, error) {
	root := n.mountDir("/var/lib/docker")
	for _, d := range storeDirs {
		if _, err := os.Lstat(filepath.Join(root, d)); !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	tmp := filepath.Join(root, ".rigger-seed")
	if err := os.RemoveAll(tmp); err != nil {
		return false, err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	// The layers are hard links; the metadata is copied, small as it is,
	// so that nothing an engine rewrites in place is shared.
	if _, err := run(ctx, "cp", "-a", "--link", filepath.Join(store, "overlay2"), filepath.Join(tmp, "overlay2")); err != nil {
		return false, err
	}
	if _, err := run(ctx, "cp", "-a", filepath.Join(store, "image"), filepath.Join(tmp, "image")); err != nil {
		return false, err
	}
	for _, d := range storeDirs {
		if err := os.Rename(filepath.Join(tmp, d), filepath.Join(root, d)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// seedEngines gives every node whose engine has never run the images of
// the engine store, making the store first when needed. A node that cannot
// be seeded (the cache on another file system than the sandbox) imports
// every image itself, as loadImages does for whatever a node lacks.
func (s *Sandbox) seedEngines(ctx context.Context, cache string, imgs []builtImage, p *progress) error {
	p.phase("Seed every new node's engine with the images")
	store, err := ensureEngineStore(ctx, cache, imgs, p)
	if err != nil {
		return err
	}
	for _, n := range s.Nodes {
		start := time.Now()
		seeded, err := seedEngine(ctx, n, store)
		switch {
		case err != nil:
			p.node(n.Name, "not seeded, every image is imported instead: %v", err)
		case seeded:
			p.node(n.Name, "seeded from %s (%s)", store, time.Since(start).Round(10*time.Millisecond))
		default:
			p.node(n.Name, "its engine has run before: images are checked one by one")
		}
	}
	return nil
}
