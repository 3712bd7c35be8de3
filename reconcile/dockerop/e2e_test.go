package dockerop

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
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
	cli := sandboxtest.DockerClient(t, n)
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

	t.Run("run with options and output", func(t *testing.T) {
		out, err := RunOutput(ctx, cli, n.Name, sandbox.ToolsImage, []string{"sh", "-c", `echo "$GREETING"; echo to-stderr >&2`},
			RunOptions{Env: []string{"GREETING=hello from the node"}})
		if err != nil || string(out) != "hello from the node\n" {
			t.Fatalf("output %q, %v; want stdout only", out, err)
		}
		// No network unless asked; the node's own network with "host".
		out, err = RunOutput(ctx, cli, n.Name, sandbox.ToolsImage, []string{"ls", "/sys/class/net"}, RunOptions{})
		if err != nil || strings.TrimSpace(string(out)) != "lo" {
			t.Errorf("default network: %q %v; want loopback only", out, err)
		}
		out, err = RunOutput(ctx, cli, n.Name, sandbox.ToolsImage, []string{"ls", "/sys/class/net"}, RunOptions{NetworkMode: "host"})
		if err != nil || !strings.Contains(string(out), "eth") && strings.Count(string(out), "\n") < 2 {
			t.Errorf("host network: %q %v; want the node's interfaces", out, err)
		}
		assertNoHelpers(ctx, t, cli)
	})

	t.Run("streams, lists and stats", func(t *testing.T) {
		dir := "/opt/rke/dockerop-e2e"
		big := make([]byte, 3<<20+17)
		for i := range big {
			big[i] = byte(i * 7)
		}
		if err := WriteStream(ctx, cli, n.Name, sandbox.ToolsImage, dir+"/big", int64(len(big)), bytes.NewReader(big)); err != nil {
			t.Fatal(err)
		}
		if err := WriteStream(ctx, cli, n.Name, sandbox.ToolsImage, dir+"/short", 10, strings.NewReader("abc")); err == nil {
			t.Error("a source shorter than its size was written without an error")
		}
		if err := WriteFiles(ctx, cli, n.Name, sandbox.ToolsImage, dir, map[string][]byte{dir + "/small.json": []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		rc, size, err := OpenFile(ctx, cli, n.Name, sandbox.ToolsImage, dir+"/big")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || size != int64(len(big)) || !bytes.Equal(got, big) {
			t.Fatalf("read back %d of %d bytes (size %d): %v", len(got), len(big), size, err)
		}
		if _, _, err := OpenFile(ctx, cli, n.Name, sandbox.ToolsImage, dir+"/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing file: %v", err)
		}
		fi, err := StatFile(ctx, cli, n.Name, sandbox.ToolsImage, dir+"/big")
		if err != nil || fi.Size != int64(len(big)) {
			t.Errorf("stat: %+v %v", fi, err)
		}
		if _, err := StatFile(ctx, cli, n.Name, sandbox.ToolsImage, dir+"/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat of a missing file: %v", err)
		}
		list, err := ListDir(ctx, cli, n.Name, sandbox.ToolsImage, dir)
		var names []string
		for _, f := range list {
			names = append(names, path.Base(f.Path))
		}
		if err != nil || !slices.Contains(names, "big") || !slices.Contains(names, "small.json") {
			t.Errorf("list: %v %v", names, err)
		}
		files, err := ReadFiles(ctx, cli, n.Name, sandbox.ToolsImage, []string{dir + "/small.json", dir + "/gone.json"})
		if err != nil || len(files) != 1 || string(files[dir+"/small.json"]) != "{}" {
			t.Errorf("read files: %v %v", files, err)
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
		id2, err := Replace(ctx, cli, n.Name, &c2, nil, 0)
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
		if _, err := Replace(ctx, cli, n.Name, &bad, nil, 0); err == nil {
			t.Fatal("a replace with an invalid bind succeeded")
		}
		insp, err = cli.ContainerInspect(ctx, c.Name)
		if err != nil || insp.ID != id2 || !insp.State.Running {
			t.Fatalf("after a failed replace: %v, id %s running %v; want the old container %s running", err, insp.ID, insp.State, id2)
		}

		if err := Restart(ctx, cli, n.Name, c.Name, 0); err != nil {
			t.Fatal(err)
		}
		if err := Remove(ctx, cli, n.Name, c.Name); err != nil {
			t.Fatal(err)
		}
		if err := Remove(ctx, cli, n.Name, c.Name); err != nil {
			t.Fatalf("removing a container that is gone: %v", err)
		}
	})

	t.Run("a container that stays up, one that crash-loops", func(t *testing.T) {
		// The real engine's restart policy flips a crashing container
		// between running and restarting; its restart count starts again
		// from 0 when it is started through the API.
		sh := func(name, script string) *desired.Container {
			return &desired.Container{
				Name: name, Image: sandbox.ToolsImage, Entrypoint: []string{"sh", "-c", script},
				NetworkMode: desired.NetworkModeHost, RestartPolicy: desired.RestartAlways,
				Labels: map[string]string{desired.LabelComponent: "e2e"},
			}
		}
		for _, c := range []*desired.Container{
			sh("rigger-e2e-up", "echo up; exec busybox sleep 3600"),
			sh("rigger-e2e-crash", "echo cannot bind 127.0.0.1:10259: address already in use >&2; busybox sleep 0.3; exit 3"),
		} {
			// Killed: neither shell stops on SIGTERM.
			defer cli.ContainerRemove(context.WithoutCancel(ctx), c.Name, container.RemoveOptions{Force: true})
			if _, err := Create(ctx, cli, n.Name, c, nil); err != nil {
				t.Fatal(err)
			}
		}
		const minUp = 3 * time.Second
		began := time.Now()
		if _, err := WaitUp(ctx, cli, n.Name, "rigger-e2e-up", Up{MinUptime: minUp, Timeout: time.Minute}); err != nil {
			t.Errorf("a container that stays up: %v", err)
		}
		if took := time.Since(began); took < minUp || took > minUp+5*time.Second {
			t.Errorf("a container that stays up took %s, want about %s", took, minUp)
		}
		began = time.Now()
		_, err := WaitUp(ctx, cli, n.Name, "rigger-e2e-crash", Up{MinUptime: minUp, Timeout: time.Minute})
		// Docker waits 0.1 s before the first restart and twice as long
		// each time: the restarts past maxRestarts come within seconds.
		if took := time.Since(began); took > 30*time.Second {
			t.Errorf("the crash loop was found after %s", took)
		}
		var crash *CrashLoopError
		if !errors.As(err, &crash) || crash.ExitCode != 3 || crash.Restarts <= maxRestarts || crash.Policy != desired.RestartAlways ||
			!strings.Contains(err.Error(), "node "+n.Name+": rigger-e2e-crash does not stay up: exited with code 3, and Docker restarted it") ||
			!strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("a crash-looping container: %v (%+v); want a *CrashLoopError with its exit code, restarts and last lines", err, crash)
		}
		t.Logf("%v", err)
		// Restarted through the API, its count starts again.
		if err := Restart(ctx, cli, n.Name, "rigger-e2e-crash", 0); err != nil {
			t.Fatal(err)
		}
		if insp, err := cli.ContainerInspect(ctx, "rigger-e2e-crash"); err != nil || insp.RestartCount > 1 {
			t.Errorf("restart count after a restart through the API: %d (%v), want 0 or 1", insp.RestartCount, err)
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
