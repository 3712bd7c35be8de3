package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/sshtun"
)

func load(t testing.TB, path string) *spec.Cluster {
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

// sandboxCluster writes a cluster.yml for the nodes of s, every node with
// every role, and loads it.
func sandboxCluster(t testing.TB, s *sandbox.Sandbox) *spec.Cluster {
	t.Helper()
	yml := fmt.Sprintf("ssh_key_path: %s\nrigger:\n  ssh:\n    known_hosts_file: %s\n    connect_timeout: 3s\nnodes:\n", s.KeyPath, s.KnownHostsPath)
	for _, n := range s.Nodes {
		yml += fmt.Sprintf("  - {address: %s, user: %s, role: [etcd, controlplane, worker], hostname_override: %s}\n", n.Address, n.User, n.Hostname)
	}
	path := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return load(t, path)
}

// TestSandbox runs against a real sandbox and a cluster.yml written for it.
func TestSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 3})
	c := sandboxCluster(t, s)
	t.Run("each node's Docker client reaches its own engine", func(t *testing.T) { checkSSHReachesNodes(t, s, c) })
	t.Run("plan of a fresh cluster, then with a node partitioned", func(t *testing.T) { checkPlan(t, s, c) })
}

func checkPlan(t *testing.T, s *sandbox.Sandbox, c *spec.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Plan(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	perNode := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}
	if got, want := p.Count(plan.Create), len(perNode)*len(s.Nodes); got != want || len(p.Steps) != want || len(p.Unreachable) != 0 {
		t.Errorf("fresh cluster: %d creates of %d steps, %d unreachable; want %d creates and none unreachable", got, len(p.Steps), len(p.Unreachable), want)
	}
	if err := s.Partition(ctx, "node3"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Heal(context.Background(), "node3"); err != nil {
			t.Error(err)
		}
	}()
	p, err = Plan(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	third := s.Nodes[2].Address
	if len(p.Unreachable) != 1 || p.Unreachable[0].Node != third || p.Count(plan.Remove) != 0 {
		t.Errorf("node3 partitioned: unreachable %+v, %d removals; want only %s unreachable and nothing removed", p.Unreachable, p.Count(plan.Remove), third)
	}
	for _, st := range p.Steps {
		if st.Node == third {
			t.Errorf("a step for the unreachable node: %+v", st)
		}
	}
	if got, want := p.Count(plan.Create), len(perNode)*(len(s.Nodes)-1); got != want {
		t.Errorf("node3 partitioned: %d creates, want %d", got, want)
	}
}

func checkSSHReachesNodes(t *testing.T, s *sandbox.Sandbox, c *spec.Cluster) {
	cfg, err := SSHConfig(c, nil)
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
