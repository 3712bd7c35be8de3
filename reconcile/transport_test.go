package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/sshtun"
)

func load(t *testing.T, path string) *spec.Cluster {
	t.Helper()
	c, _, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSSHConfigFromClusterYML(t *testing.T) {
	c := load(t, "../examples/clusters/bastion/cluster.yml")
	c.Nodes[2].Transport = spec.TransportAgent
	c.Nodes[1].SSHKey = "inline key"
	cfg, err := SSHConfig(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sshtun.Config{
		Nodes: []sshtun.Node{
			{Name: "172.16.0.11", DockerSocket: "/var/run/docker.sock", Host: sshtun.Host{Address: "172.16.0.11", Port: 22, User: "rke", KeyPath: "~/.ssh/nodes_ed25519"}},
			{Name: "172.16.0.12", DockerSocket: "/var/run/docker.sock", Host: sshtun.Host{Address: "172.16.0.12", Port: 22, User: "rke", KeyPath: "~/.ssh/nodes_ed25519", Key: []byte("inline key")}},
		},
		Bastion:           &sshtun.Host{Address: "bastion.example.com", Port: 2222, User: "jump", KeyPath: "~/.ssh/bastion_ed25519"},
		KnownHostsFiles:   []string{"~/.ssh/rigger_known_hosts"},
		HostKeyPolicy:     sshtun.HostKeyPolicyAcceptNew,
		ConnectTimeout:    10 * time.Second,
		KeepaliveInterval: 15 * time.Second,
		MaxParallelDials:  10,
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// TestSSHFromClusterYMLToSandbox reaches every node of a cluster.yml written
// for a real sandbox, through the SSH transport, and checks that each Docker
// client talks to that node's own engine.
func TestSSHFromClusterYMLToSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 3})
	yml := fmt.Sprintf("ssh_key_path: %s\nrigger:\n  ssh:\n    known_hosts_file: %s\nnodes:\n", s.KeyPath, s.KnownHostsPath)
	for _, n := range s.Nodes {
		yml += fmt.Sprintf("  - {address: %s, user: %s, role: [etcd, controlplane, worker], hostname_override: %s}\n", n.Address, n.User, n.Hostname)
	}
	path := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := SSHConfig(load(t, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sshtun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range s.Nodes {
		dc, err := tr.Docker(ctx, n.Address)
		if err != nil {
			t.Fatalf("%s: %v", n.Address, err)
		}
		info, err := dc.Info(ctx)
		if err != nil {
			t.Fatalf("%s: docker info: %v", n.Address, err)
		}
		if info.Name != n.Hostname {
			t.Errorf("%s: the Docker client reached the engine of %q, want %q", n.Address, info.Name, n.Hostname)
		}
	}
}
