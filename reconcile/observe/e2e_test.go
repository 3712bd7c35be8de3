package observe

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/sshtun"
)

// e2eCallTimeout bounds each Observe in the end-to-end test, so that a
// partition that is not noticed fails the test instead of hanging it.
const e2eCallTimeout = 30 * time.Second

// TestObserveSandbox observes the containers of one cluster on a real
// two-node sandbox through the SSH transport, then again with one node
// partitioned away.
func TestObserveSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Name: "observe", Subnet: 6, Nodes: 2, Images: true})
	n1, n2 := s.Nodes[0], s.Nodes[1]
	cfg := sshtun.Config{
		KnownHostsFiles: []string{s.KnownHostsPath},
		ConnectTimeout:  3 * time.Second,
		// A partitioned node's live connection is found dead within
		// 4 intervals, well inside e2eCallTimeout.
		KeepaliveInterval: time.Second,
	}
	for _, n := range s.Nodes {
		cfg.Nodes = append(cfg.Nodes, sshtun.Node{Name: n.Address,
			Host: sshtun.Host{Address: n.Address, Port: n.Port, User: n.User, KeyPath: s.KeyPath}})
	}
	tr, err := sshtun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := tr.Docker(ctx, n1.Address)
	if err != nil {
		t.Fatal(err)
	}
	// On node1: a running, an exited and a created container of cluster
	// e2e, and a running one of another cluster that must not show.
	running := create(ctx, t, cli, "kubelet", sandbox.PauseImage, nil, map[string]string{
		desired.LabelCluster: "e2e", desired.LabelComponent: desired.Kubelet, desired.LabelSpecHash: "hash-kubelet",
		desired.LabelSpec: `{"name":"kubelet"}`,
	})
	start(ctx, t, cli, running)
	exited := create(ctx, t, cli, "nginx-proxy", sandbox.RiggerImage, []string{"version"}, map[string]string{
		desired.LabelCluster: "e2e", desired.LabelComponent: desired.NginxProxy, desired.LabelSpecHash: "hash-nginx",
	})
	start(ctx, t, cli, exited)
	waitC, errC := cli.ContainerWait(ctx, exited, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatalf("wait for nginx-proxy to exit: %v", err)
	}
	created := create(ctx, t, cli, "kube-proxy", sandbox.RiggerImage, []string{"version"}, map[string]string{
		desired.LabelCluster: "e2e", desired.LabelComponent: desired.KubeProxy, desired.LabelSpecHash: "hash-proxy",
	})
	other := create(ctx, t, cli, "etcd", sandbox.PauseImage, nil, map[string]string{
		desired.LabelCluster: "other", desired.LabelComponent: desired.Etcd, desired.LabelSpecHash: "hash-etcd",
	})
	start(ctx, t, cli, other)

	exitedWith := 0 // rigger version's exit code, read from Docker's status text
	wantNode1 := map[string]Container{
		"kubelet": {ID: running, Name: "kubelet", Image: sandbox.PauseImage, State: "running",
			Component: desired.Kubelet, SpecHash: "hash-kubelet", Spec: `{"name":"kubelet"}`},
		"nginx-proxy": {ID: exited, Name: "nginx-proxy", Image: sandbox.RiggerImage, State: "exited", ExitCode: &exitedWith,
			Component: desired.NginxProxy, SpecHash: "hash-nginx"},
		"kube-proxy": {ID: created, Name: "kube-proxy", Image: sandbox.RiggerImage, State: "created",
			Component: desired.KubeProxy, SpecHash: "hash-proxy"},
	}
	nodes := []string{n1.Address, n2.Address}
	observe := func() *Cluster {
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		defer cancel()
		return Observe(ctx, tr, Request{Cluster: "e2e", Nodes: nodes, MaxParallel: 2})
	}
	checkNode1 := func(got *Cluster) {
		t.Helper()
		n := got.Nodes[n1.Address]
		if n == nil || !n.Reachable {
			t.Fatalf("node1: %+v, want reachable", n)
		}
		if n.DockerVersion == "" || n.DockerAPIVersion == "" {
			t.Errorf("node1: engine version %q, API version %q, want both", n.DockerVersion, n.DockerAPIVersion)
		}
		if diff := cmp.Diff(wantNode1, n.Containers); diff != "" {
			t.Errorf("node1 containers (-want +got)\n%s", diff)
		}
	}

	got := observe()
	checkNode1(got)
	if n := got.Nodes[n2.Address]; n == nil || !n.Reachable || n.Err != nil || len(n.Containers) != 0 || n.DockerVersion == "" {
		t.Errorf("node2: %+v, want reachable with no containers", n)
	}

	sandboxtest.Partition(ctx, t, s, n2.Name)
	begin := time.Now()
	got = observe()
	t.Logf("Observe with node2 partitioned took %s; node2: %v", time.Since(begin), got.Nodes[n2.Address].Err)
	checkNode1(got)
	n := got.Nodes[n2.Address]
	var ue *transport.UnreachableError
	switch {
	case n == nil:
		t.Fatal("node2 is missing from the observation")
	case n.Reachable || n.Error == "" || !errors.As(n.Err, &ue):
		t.Errorf("node2 partitioned: reachable %v, error %v, want unreachable with a *transport.UnreachableError", n.Reachable, n.Err)
	case n.Containers != nil:
		t.Errorf("node2 partitioned: containers %v, want none (not known, not gone)", n.Containers)
	}

	if err := s.Heal(ctx, n2.Name); err != nil {
		t.Fatal(err)
	}
	// The transport backs off after failed dials; node2 comes back within
	// its maximum backoff.
	healed := time.Now()
	testwait.For(t, sshtun.BackoffMax+10*time.Second, "node2 observed again after healing", func() error {
		got = observe()
		if n := got.Nodes[n2.Address]; !n.Reachable {
			return fmt.Errorf("node2 still unreachable: %v", n.Err)
		}
		return nil
	})
	t.Logf("node2 observed again %s after healing", time.Since(healed))
	checkNode1(got)
}

func create(ctx context.Context, t *testing.T, cli *client.Client, name, image string, cmd []string, labels map[string]string) string {
	t.Helper()
	resp, err := cli.ContainerCreate(ctx,
		&container.Config{Image: image, Cmd: cmd, Labels: labels},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatalf("create container %s: %v", name, err)
	}
	return resp.ID
}

func start(ctx context.Context, t *testing.T, cli *client.Client, id string) {
	t.Helper()
	if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		t.Fatalf("start container %s: %v", id, err)
	}
}
