package dockerop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// TestSandbox drives a real engine of a one-node sandbox: files through a
// helper container, and the life of a component container.
func TestSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Name: "dockerop", Subnet: 8, Nodes: 1, Images: true})
	n := s.Nodes[0]
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+n.DockerSocket), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("files", func(t *testing.T) {
		files := map[string][]byte{
			"/etc/kubernetes/ssl/kube-ca.pem":   []byte("ca\n"),
			"/etc/kubernetes/ssl/deep/x/y.yaml": []byte("y: 1\n"),
			"/etc/kubernetes/admission.yaml":    []byte("kind: AdmissionConfiguration\n"),
		}
		if err := WriteFiles(ctx, cli, n.Name, sandbox.RiggerImage, "/etc/kubernetes", files); err != nil {
			t.Fatal(err)
		}
		// The files are on the node, with mode 0600.
		hostDir := filepath.Join(n.Dir, "etc-kubernetes")
		if fi, err := os.Stat(filepath.Join(hostDir, "ssl", "kube-ca.pem")); err != nil {
			t.Fatalf("written file is not in the node's /etc/kubernetes (%s): %v", hostDir, err)
		} else if fi.Mode().Perm() != FileMode {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), os.FileMode(FileMode))
		}
		got, err := ReadDir(ctx, cli, n.Name, sandbox.RiggerImage, "/etc/kubernetes")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(files, got); diff != "" {
			t.Errorf("read back (-written +read):\n%s", diff)
		}
		none, err := ReadDir(ctx, cli, n.Name, sandbox.RiggerImage, "/opt/rke/does-not-exist")
		if err != nil || len(none) != 0 {
			t.Errorf("missing dir: %v, %v; want no files and no error", none, err)
		}
		if err := WriteFiles(ctx, cli, n.Name, sandbox.RiggerImage, "/etc/kubernetes",
			map[string][]byte{"/etc/passwd": nil}); err == nil {
			t.Error("a path outside the root was written")
		}
		assertNoHelpers(ctx, t, cli)
	})

	t.Run("run", func(t *testing.T) {
		if err := Run(ctx, cli, n.Name, sandbox.RiggerImage, []string{"/usr/local/bin/rigger", "version"}, nil); err != nil {
			t.Fatal(err)
		}
		err := Run(ctx, cli, n.Name, sandbox.RiggerImage, []string{"/usr/local/bin/rigger", "no-such-command"}, nil)
		if err == nil || !strings.Contains(err.Error(), "exited with code") || !strings.Contains(err.Error(), "no-such-command") {
			t.Fatalf("failing command: %v; want the exit code and its output", err)
		}
		assertNoHelpers(ctx, t, cli)
	})

	t.Run("image missing", func(t *testing.T) {
		// A registry on the node's loopback that nothing serves: the pull
		// fails at once and never leaves the node.
		err := EnsureImage(ctx, cli, n.Name, "127.0.0.1:1/rigger/missing:v1")
		var ie *ImageError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "docker load") || !strings.Contains(err.Error(), n.Name) {
			t.Fatalf("got %v; want an *ImageError naming the node and what to do", err)
		}
	})

	t.Run("container lifecycle", func(t *testing.T) {
		c := &desired.Container{
			Name: "rigger-e2e-pause", Image: sandbox.PauseImage,
			NetworkMode: desired.NetworkModeHost, RestartPolicy: desired.RestartAlways,
			Labels: map[string]string{desired.LabelComponent: "e2e"},
		}
		defer Remove(context.WithoutCancel(ctx), cli, n.Name, c.Name)
		id1, err := Create(ctx, cli, n.Name, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		c2 := *c
		c2.Labels = map[string]string{desired.LabelComponent: "e2e", "v": "2"}
		id2, err := Replace(ctx, cli, n.Name, &c2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id1 == id2 {
			t.Fatal("replace kept the container")
		}
		insp, err := cli.ContainerInspect(ctx, c.Name)
		if err != nil || insp.ID != id2 || insp.Config.Labels["v"] != "2" {
			t.Fatalf("after replace: %v %+v", err, insp.Config)
		}
		if _, err := cli.ContainerInspect(ctx, c.Name+oldSuffix); err == nil {
			t.Error("the replaced container is still there")
		}

		// A replace whose new container cannot start puts the old one back.
		bad := c2
		bad.Entrypoint = []string{"/no/such/binary"}
		if _, err := Replace(ctx, cli, n.Name, &bad, nil); err == nil {
			t.Fatal("a replace with an invalid bind succeeded")
		}
		insp, err = cli.ContainerInspect(ctx, c.Name)
		if err != nil || insp.ID != id2 || !insp.State.Running {
			t.Fatalf("after a failed replace: %v, id %s running %v; want the old container %s running", err, insp.ID, insp.State, id2)
		}

		if err := Restart(ctx, cli, n.Name, c.Name); err != nil {
			t.Fatal(err)
		}
		if err := Remove(ctx, cli, n.Name, c.Name); err != nil {
			t.Fatal(err)
		}
		if err := Remove(ctx, cli, n.Name, c.Name); err != nil {
			t.Fatalf("removing a container that is gone: %v", err)
		}
	})
}

func assertNoHelpers(ctx context.Context, t *testing.T, cli *client.Client) {
	t.Helper()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.Labels[LabelHelper] != "" {
			t.Errorf("helper container %v left behind", c.Names)
		}
	}
}
