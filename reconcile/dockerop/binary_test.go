package dockerop

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/internal/nodebin/nodebintest"
	"github.com/rigger/rigger/reconcile/desired"
)

// copyEngine is an engine with one image, of arch, whose containers are
// created, filled and started in memory.
type copyEngine struct {
	Engine
	arch    string
	copied  map[string][]byte // path in the container → content
	modes   map[string]int64
	started bool
	removed bool
}

func (e *copyEngine) ImageInspect(context.Context, string, ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{Architecture: e.arch}, nil
}

func (e *copyEngine) ContainerCreate(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
	return container.CreateResponse{ID: "c1"}, nil
}

func (e *copyEngine) CopyToContainer(_ context.Context, _, dst string, r io.Reader, _ container.CopyToContainerOptions) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		e.copied[dst+h.Name], e.modes[dst+h.Name] = b, h.Mode
	}
}

func (e *copyEngine) ContainerStart(context.Context, string, container.StartOptions) error {
	e.started = true
	return nil
}

func (e *copyEngine) ContainerRemove(context.Context, string, container.RemoveOptions) error {
	e.removed = true
	return nil
}

// TestCreateCopiesBinary: a container that runs rigger's own binary gets
// it at desired.BinaryPath, executable, before it starts; a binary that
// changed since the plan, one for another architecture than the image's,
// or one that cannot run without libraries is refused with the node and
// what to do, and the created container is removed, never started.
func TestCreateCopiesBinary(t *testing.T) {
	t.Cleanup(func() { nodebin.Use("") })
	static := nodebintest.Build(t)
	nodebin.Use(static)
	bin, err := nodebin.Get()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(static)
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if bin.Arch == other {
		other = "amd64"
	}
	for _, tc := range []struct {
		name, arch, binary, use string
		err                     []string // substrings of the error; none: the copy is made
	}{
		{name: "copied", arch: bin.Arch, binary: bin.ID},
		{name: "image without an architecture", binary: bin.ID},
		{name: "changed since the plan", arch: bin.Arch, binary: "older-build", err: []string{"node 10.0.0.1", "changed since this run planned it", "run rigger again"}},
		{name: "another architecture", arch: other, binary: bin.ID, err: []string{"node 10.0.0.1", "is for " + other, "built for " + bin.Arch, "rigger.image"}},
		{name: "dynamically linked", arch: bin.Arch, binary: bin.ID, use: "/bin/sh", err: []string{"node 10.0.0.1", "dynamically linked", "make build", "rigger.image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.use != "" {
				nodebin.Use(tc.use)
				defer nodebin.Use(static)
			}
			e := &copyEngine{arch: tc.arch, copied: map[string][]byte{}, modes: map[string]int64{}}
			c := &desired.Container{Name: desired.EtcdRollingSnapshots, Image: "rancher/rke-tools:v0.1.114", Entrypoint: []string{desired.BinaryPath}, Binary: tc.binary}
			_, err := Create(context.Background(), e, "10.0.0.1", c, nil)
			if len(tc.err) == 0 {
				got, ok := e.copied[desired.BinaryPath]
				if err != nil || !ok || !bytes.Equal(got, want) || e.modes[desired.BinaryPath] != 0o755 || !e.started {
					t.Errorf("Create: %v; copied %v (%d bytes of %d, mode %o), started %v", err, ok, len(got), len(want), e.modes[desired.BinaryPath], e.started)
				}
				return
			}
			if err == nil {
				t.Fatalf("Create made the container, want an error with %q", tc.err)
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if e.started || !e.removed || len(e.copied) > 0 {
				t.Errorf("after the error: started %v, removed %v, copied %d files", e.started, e.removed, len(e.copied))
			}
		})
	}
}
