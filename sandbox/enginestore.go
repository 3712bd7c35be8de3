package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
// directories) that holds the sandbox's images, made once per machine by
// an engine of its own. A new node's /var/lib/docker starts as a copy of it
// whose layer files are hard links: importing about 700 MB into every node
// of every sandbox cost 25 to 40 s per sandbox under load, and as much disk
// writing. The node's engine then owns its copy as if it had imported the
// images itself (a node that removes an image unlinks its own names only:
// layers are read-only lower directories of the containers' overlays, never
// written).
//
// The store holds every image the machine's sandboxes have asked for: a
// sandbox that asks for one the store lacks (another Kubernetes release,
// RKE's stand-ins) makes a new store with it and every image of the old
// one whose archive is still the cache's (one per ref: a rebuilt image
// takes the place of its older content), and the old store goes once no
// node is being seeded from it. So `make test`'s sandboxes and `make
// test-long`'s, with two more releases and RKE's images (about 1.1 GB per
// node to import), all start from one store; an image a node does not use
// costs it hard links.
//
// The images made with rigger's own binary are left out (builtImage.Rigger):
// they change with every build of rigger, and loadImages imports them (70
// to 180 MB) into each node as before.

// engineStoreFormat changes when the way the store is made changes, so
// that stores made before are made anew.
const engineStoreFormat = "rigger-sandbox-engine/2"

// storeDirs are the parts of a data root the store holds: the image and
// layer metadata, and the layers. Everything else (networks, containers,
// the engine's own databases) each node's engine makes for itself.
var storeDirs = []string{"image", "overlay2"}

// storeManifest is the file of a store that lists its images (JSON, the
// builtImages it imported).
const storeManifest = "images.json"

// storeImages are the images a store may hold: all but those made with
// rigger's binary.
func storeImages(imgs []builtImage) []builtImage {
	var out []builtImage
	for _, img := range imgs {
		if !img.Rigger {
			out = append(out, img)
		}
	}
	return out
}

// engineStoreKey names a store by its format, the engine that made it
// (its layout is the engine's) and every image's ref and content key, in
// any order.
func engineStoreKey(engineVersion string, imgs []builtImage) string {
	lines := make([]string, 0, len(imgs))
	for _, img := range imgs {
		lines = append(lines, img.Ref+" "+img.Key)
	}
	slices.Sort(lines)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", engineStoreFormat, strings.TrimSpace(engineVersion))
	for _, l := range lines {
		fmt.Fprintln(h, l)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// engineStore is a complete store: its directory and the images it holds.
type engineStore struct {
	dir    string
	images []builtImage
}

// holds says whether the store has every one of imgs, with the same
// content.
func (st engineStore) holds(imgs []builtImage) bool {
	for _, img := range imgs {
		if !slices.ContainsFunc(st.images, func(have builtImage) bool { return have.Ref == img.Ref && have.Key == img.Key }) {
			return false
		}
	}
	return true
}

// engineStores lists the complete stores in base, newest first: those
// with a manifest (a store's is written last). A store of another engine
// version is not listed: its key says so, and it is never chosen.
func engineStores(base, version string) []engineStore {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	type dated struct {
		engineStore
		made time.Time
	}
	var found []dated
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "new-") {
			continue
		}
		dir := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, storeManifest))
		if err != nil {
			continue
		}
		var imgs []builtImage
		if json.Unmarshal(b, &imgs) != nil || engineStoreKey(version, imgs) != e.Name() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		found = append(found, dated{engineStore{dir, imgs}, info.ModTime()})
	}
	slices.SortFunc(found, func(a, b dated) int { return b.made.Compare(a.made) })
	out := make([]engineStore, len(found))
	for i, d := range found {
		out[i] = d.engineStore
	}
	return out
}

// ensureEngineStore returns the directory of an engine store in cache that
// holds imgs (but rigger's), making one when none does: an engine of its
// own (private network and mount namespaces, data root in the cache)
// imports imgs and the images of the newest store that are still the
// cache's, and stops; its image and overlay2 directories become the store.
// The other stores are removed, but for one a node is being seeded from.
func ensureEngineStore(ctx context.Context, cache string, imgs []builtImage, p *progress) (string, error) {
	version, err := run(ctx, "dockerd", "--version")
	if err != nil {
		return "", err
	}
	imgs = storeImages(imgs)
	base := filepath.Join(cache, "engine")
	find := func() (string, []engineStore) {
		stores := engineStores(base, version)
		for _, st := range stores {
			if st.holds(imgs) {
				return st.dir, stores
			}
		}
		return "", stores
	}
	if dir, _ := find(); dir != "" {
		return dir, nil
	}
	lock, err := lockFile(ctx, filepath.Join(cache, "engine.lock"), func() { p.info("waiting for another rigger making the engine store") })
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	dir, stores := find()
	if dir != "" {
		return dir, nil
	}
	all := imgs
	if len(stores) > 0 {
		all = storeUnion(imgs, stores[0].images)
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
	if err := importIntoNewEngine(ctx, root, all); err != nil {
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
	manifest, err := json.Marshal(all)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, storeManifest), manifest, 0o600); err != nil {
		return "", err
	}
	dir = filepath.Join(base, engineStoreKey(version, all))
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(root, dir); err != nil {
		return "", err
	}
	p.info("engine store: %d images imported once in %s (%s)", len(all), time.Since(start).Round(10*time.Millisecond), dir)
	removeEngineStores(base, dir, p)
	return dir, nil
}

// storeUnion is what a new store holds: imgs, and the images of the
// newest store (had) but for those of a ref imgs has (with other content)
// and those whose archive the cache no longer has (it keeps one per ref).
func storeUnion(imgs, had []builtImage) []builtImage {
	all := slices.Clone(imgs)
	for _, h := range had {
		if slices.ContainsFunc(all, func(img builtImage) bool { return img.Ref == h.Ref }) {
			continue
		}
		if _, err := os.Stat(h.Archive); err == nil {
			all = append(all, h)
		}
	}
	return all
}

// removeEngineStores removes every store in base but keep, with whatever
// a killed run left, and leaves a store that a node is being seeded from
// (its lock held shared) to the next store's making.
func removeEngineStores(base, keep string, p *progress) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(base, e.Name())
		if !e.IsDir() || dir == keep {
			continue
		}
		l, ok := tryLockFile(dir + ".lock")
		if !ok {
			p.info("engine store %s: a node is being seeded from it; removed with the next store", dir)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			p.info("engine store %s: not removed: %v", dir, err)
		}
		_ = os.Remove(dir + ".lock")
		l.unlock()
	}
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
	// The store's lock is held shared while the nodes are seeded: a rigger
	// making a newer store leaves this one in place meanwhile. One removed
	// between its choice and the lock is chosen again.
	var store string
	for {
		var err error
		if store, err = ensureEngineStore(ctx, cache, imgs, p); err != nil {
			return err
		}
		lock, err := lockFileShared(ctx, store+".lock")
		if err != nil {
			return err
		}
		if _, err := os.Stat(store); err == nil {
			defer lock.unlock()
			break
		}
		lock.unlock()
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
