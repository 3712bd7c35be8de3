// Package dockerop is what rigger does to one node through its Docker
// engine: make sure an image is there, create, replace and remove component
// containers, read and write the files rigger manages (through a short-lived
// helper container and the archive API), and run one-shot helper containers.
// No shell commands run on the node: the Docker API is the only channel, as
// in RKE.
//
// Every error names the node, and where it helps, what to do.
package dockerop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/registryauth"
	"github.com/rigger/rigger/spec/rkemeta"
)

// Engine is the part of the Docker client dockerop calls. It exists so
// that fault injection in tests can stand in for one call; *client.Client
// implements it.
type Engine interface {
	client.ContainerAPIClient
	client.ImageAPIClient
}

var _ Engine = (*client.Client)(nil)

// Timeouts of container operations.
const (
	// StopTimeout is how long a component gets to stop on SIGTERM before
	// it is killed (etcd and the API server close their connections).
	StopTimeout = 30 * time.Second
	// logTail is how many of a failed container's last log lines an error
	// shows.
	logTail = 20
)

// LabelHelper marks rigger's helper containers (file writers, cleaners):
// they carry no io.rigger.cluster label, so no plan ever sees them, and a
// helper left behind by a killed run is removed by the next one.
const LabelHelper = "io.rigger.helper"

// oldSuffix is appended to the name of a container being replaced while
// its successor starts, so that a failed start can put it back.
const oldSuffix = "-rigger-old"

// EnsureImage makes sure ref is on the node: inspected, or pulled when
// missing, with the credentials of its private registry when e has them
// (WithRegistries). A failed pull says what to do.
func EnsureImage(ctx context.Context, e Engine, node, ref string) error {
	if _, err := e.ImageInspect(ctx, ref); err == nil {
		return nil
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("node %s: inspect image %s: %w", node, ref, err)
	}
	var pull registryauth.Pull
	if r, ok := e.(*registries); ok {
		var err error
		if pull, err = r.set.For(ref); err != nil {
			return &ImageError{Node: node, Image: ref, Err: err}
		}
	}
	rc, err := e.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: pull.Auth})
	if err == nil {
		err = drainPull(rc)
	}
	if err != nil {
		return &ImageError{Node: node, Image: ref, Registry: pull.Registry, User: pull.User, Err: err}
	}
	return nil
}

// ImageError is an image that is not on a node and could not be pulled.
type ImageError struct {
	Node, Image string
	// Registry and User are the private registry whose credentials the
	// pull carried and its user; Registry is "" for a pull without.
	Registry, User string
	Err            error
}

func (e *ImageError) Error() string {
	if rkemeta.IsExtendedLifeImage(e.Image) {
		from := "without credentials"
		if e.Registry != "" {
			from = fmt.Sprintf("from private registry %s as user %q", e.Registry, e.User)
		}
		return fmt.Sprintf("node %s: image %s is not on the node and pulling it %s failed: %v; "+
			"%s/ images are RKE's extended-life builds, which SUSE Rancher serves to its subscribers only, so the likely cause is "+
			"no subscription's access to them: give a registry that serves them, with its credentials, in private_registries "+
			"(is_default: true puts its URL before every image of the version table), set system_images.kubernetes to an image "+
			"the node can pull, or choose a kubernetes_version before v1.31.11 or v1.32.7 (rigger config versions marks the extended-life ones)",
			e.Node, e.Image, from, e.Err, rkemeta.ExtendedLifeNamespace)
	}
	if e.Registry != "" {
		return fmt.Sprintf("node %s: image %s is not on the node and pulling it from private registry %s as user %q failed: %v; "+
			"check the user and password of %s in private_registries, and that the node reaches the registry",
			e.Node, e.Image, e.Registry, e.User, e.Err, e.Registry)
	}
	return fmt.Sprintf("node %s: image %s is not on the node and pulling it failed: %v; "+
		"load it on the node (docker load) or point system_images and private_registries at a registry the node can reach",
		e.Node, e.Image, e.Err)
}

func (e *ImageError) Unwrap() error { return e.Err }

// Create creates the component container c on the node and starts it,
// pulling its image when missing. extraArgs are appended to c.Args for this
// creation only (etcd's bootstrap flags). A container of the same name must
// not exist (Remove or Replace it first).
func Create(ctx context.Context, e Engine, node string, c *desired.Container, extraArgs []string) (string, error) {
	if err := EnsureImage(ctx, e, node, c.Image); err != nil {
		return "", err
	}
	return create(ctx, e, node, c, extraArgs)
}

// create is Create once c's image is on the node.
func create(ctx context.Context, e Engine, node string, c *desired.Container, extraArgs []string) (string, error) {
	cfg, host := containerConfig(c, extraArgs)
	resp, err := e.ContainerCreate(ctx, cfg, host, nil, nil, c.Name)
	if err != nil {
		return "", fmt.Errorf("node %s: create container %s: %w", node, c.Name, err)
	}
	if c.Binary != "" {
		if err := copyBinary(ctx, e, node, resp.ID, c); err != nil {
			_ = e.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
			return "", err
		}
	}
	if err := start(ctx, e, resp.ID); err != nil {
		// Leave nothing half made behind: the next plan sees "missing".
		_ = e.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
		return "", fmt.Errorf("node %s: start container %s: %w", node, c.Name, err)
	}
	return resp.ID, nil
}

// How start tries again when the engine lost its runtime.
const (
	startTries      = 3
	startRetryAfter = time.Second
)

// start starts container id (every start of dockerop goes through it),
// and starts it again, up to startTries in all, when the engine answered
// that it lost its connection to the container's runtime (runtimeLost):
// the container is sound, and a second start is what the engine's own next
// try would be. A start of a container that did start and runs answers
// without error; one that ran and exited runs again, which rigger's
// containers that exit at once (service-sidekick, the helpers of Run) bear.
func start(ctx context.Context, e Engine, id string) error {
	err := e.ContainerStart(ctx, id, container.StartOptions{})
	for try := 2; try <= startTries && runtimeLost(err); try++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(startRetryAfter):
		}
		if err = e.ContainerStart(ctx, id, container.StartOptions{}); err != nil && try == startTries {
			err = fmt.Errorf("%w (started %d times)", err, startTries)
		}
	}
	return err
}

// runtimeLost reports whether a container's start failed because the
// engine's connection to containerd's shim for it closed while the shim
// started the task ("ttrpc: closed"): seen once on a busy sandbox node of a
// cold machine, Docker 20.10 and containerd 1.6, starting rigger's
// service-sidekick in place of RKE's.
func runtimeLost(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ttrpc: closed")
}

// copyBinary copies rigger's own binary (nodebin) into the created
// container id of c, at desired.BinaryPath, when it is the binary c was
// planned with and it runs on c's image's architecture.
func copyBinary(ctx context.Context, e Engine, node, id string, c *desired.Container) error {
	f, bin, err := nodebin.Open()
	if err != nil {
		return fmt.Errorf("node %s: container %s: %w; or set rigger.image to rigger's image", node, c.Name, err)
	}
	defer f.Close()
	if bin.ID != c.Binary {
		return fmt.Errorf("node %s: container %s: rigger's binary %s changed since this run planned it (build ID %s, now %s): run rigger again", node, c.Name, bin.Path, c.Binary, bin.ID)
	}
	if im, err := e.ImageInspect(ctx, c.Image); err == nil && im.Architecture != "" && im.Architecture != bin.Arch {
		return fmt.Errorf("node %s: container %s: image %s is for %s and this rigger is built for %s: run a rigger built for %s, or set rigger.image to rigger's image for it",
			node, c.Name, c.Image, im.Architecture, bin.Arch, im.Architecture)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("node %s: container %s: rigger's own binary: %w", node, c.Name, err)
	}
	if err := copyIn(ctx, e, id, desired.BinaryPath, 0o755, st.Size(), f); err != nil {
		return fmt.Errorf("node %s: copy rigger's binary into container %s: %w", node, c.Name, err)
	}
	return nil
}

// containerConfig is the Docker spec of a component container.
func containerConfig(c *desired.Container, extraArgs []string) (*container.Config, *container.HostConfig) {
	args := append(append([]string(nil), c.Args...), extraArgs...)
	labels := make(map[string]string, len(c.Labels))
	for k, v := range c.Labels {
		labels[k] = v
	}
	cfg := &container.Config{
		Image:      c.Image,
		Entrypoint: c.Entrypoint,
		Cmd:        args,
		Env:        c.Env,
		User:       c.User,
		Labels:     labels,
	}
	host := &container.HostConfig{
		Binds:         c.Binds,
		NetworkMode:   container.NetworkMode(c.NetworkMode),
		PidMode:       container.PidMode(c.PidMode),
		Privileged:    c.Privileged,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyMode(c.RestartPolicy)},
		VolumesFrom:   c.VolumesFrom,
	}
	if c.Confined {
		host.CapDrop = []string{"ALL"}
		host.SecurityOpt = []string{"no-new-privileges"}
	}
	return cfg, host
}

// Replace swaps the running container named c.Name for one created from c.
// The old one is stopped and renamed first (host ports are freed), then the
// new one is created and started; if that fails, the new one is removed and
// the old one is put back and started again, so a failed replace leaves the
// node as it was. On success the old container is removed. The old one
// gets grace to stop on SIGTERM before it is killed (StopTimeout when 0).
func Replace(ctx context.Context, e Engine, node string, c *desired.Container, extraArgs []string, grace time.Duration) (string, error) {
	if err := EnsureImage(ctx, e, node, c.Image); err != nil {
		return "", err // before anything stops
	}
	old := c.Name + oldSuffix
	if err := removeIfExists(ctx, e, old); err != nil {
		return "", fmt.Errorf("node %s: remove %s left by an earlier run: %w", node, old, err)
	}
	if err := stop(ctx, e, c.Name, grace); err != nil {
		return "", fmt.Errorf("node %s: stop container %s: %w", node, c.Name, err)
	}
	if err := e.ContainerRename(ctx, c.Name, old); err != nil {
		_ = start(context.WithoutCancel(ctx), e, c.Name)
		return "", fmt.Errorf("node %s: rename container %s: %w", node, c.Name, err)
	}
	crashpoint.Reach(crashpoint.ReplaceStopped)
	// The image was made sure of above: a second inspect would cost every
	// replaced container one more round trip to its node.
	id, err := create(ctx, e, node, c, extraArgs)
	if err != nil {
		restoreCtx := context.WithoutCancel(ctx)
		if rerr := e.ContainerRename(restoreCtx, old, c.Name); rerr == nil {
			_ = start(restoreCtx, e, c.Name)
		}
		return "", err
	}
	if err := removeIfExists(ctx, e, old); err != nil {
		return id, fmt.Errorf("node %s: remove replaced container %s: %w", node, old, err)
	}
	return id, nil
}

// Remove stops and removes the container name; a container that is not
// there is not an error.
func Remove(ctx context.Context, e Engine, node, name string) error {
	if err := stop(ctx, e, name, 0); err != nil {
		return fmt.Errorf("node %s: stop container %s: %w", node, name, err)
	}
	if err := removeIfExists(ctx, e, name); err != nil {
		return fmt.Errorf("node %s: remove container %s: %w", node, name, err)
	}
	return nil
}

// Restart starts the container name again (stopped first if it runs, with
// grace to stop as Replace gives it).
func Restart(ctx context.Context, e Engine, node, name string, grace time.Duration) error {
	if err := e.ContainerRestart(ctx, name, stopOptions(grace)); err != nil {
		return fmt.Errorf("node %s: restart container %s: %w", node, name, err)
	}
	return nil
}

// stopOptions gives a container grace (StopTimeout when 0) to stop on
// SIGTERM before it is killed.
func stopOptions(grace time.Duration) container.StopOptions {
	timeout := int(cmp.Or(grace, StopTimeout) / time.Second)
	return container.StopOptions{Timeout: &timeout}
}

func stop(ctx context.Context, e Engine, name string, grace time.Duration) error {
	err := e.ContainerStop(ctx, name, stopOptions(grace))
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

func removeIfExists(ctx context.Context, e Engine, name string) error {
	err := e.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// Logs returns the last lines a container wrote, for errors people read;
// it returns "" when they cannot be read.
func Logs(ctx context.Context, e Engine, name string) string {
	rc, err := e.ContainerLogs(ctx, name, container.LogsOptions{
		ShowStdout: true, ShowStderr: true, Tail: fmt.Sprint(logTail),
	})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out strings.Builder
	// Component containers have no TTY: the stream is multiplexed.
	if err := demux(&limitWriter{w: &out, n: 64 << 10}, &limitWriter{w: &out, n: 64 << 10}, rc); err != nil &&
		!errors.Is(err, errLimit) && out.Len() == 0 {
		return ""
	}
	return strings.TrimRight(out.String(), "\n")
}

var errLimit = errors.New("output limit reached")

// limitWriter keeps at most n bytes.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errLimit
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= n
	return n, err
}
