package reach

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
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
	c := load(t, "../../examples/clusters/bastion/cluster.yml")
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

// fakeTransport records the nodes dialled and whether it was closed.
type fakeTransport struct {
	name   string
	dialed []string
	closed bool
}

func (f *fakeTransport) Docker(_ context.Context, node string) (*client.Client, error) {
	f.dialed = append(f.dialed, node)
	return nil, errors.New(f.name)
}

func (f *fakeTransport) Dial(_ context.Context, node, _, _ string) (net.Conn, error) {
	f.dialed = append(f.dialed, node)
	return nil, errors.New(f.name)
}

func (f *fakeTransport) Close() error {
	f.closed = true
	return nil
}

func TestAgentNodesRoutedToTheTunnel(t *testing.T) {
	c := load(t, "../../examples/clusters/bastion/cluster.yml")
	c.Nodes[2].Transport = spec.TransportAgent
	agentNode := c.Nodes[2].Address
	ssh, agents := &fakeTransport{name: "ssh"}, &fakeTransport{name: "agents"}
	tr := routeNodes(c, ssh, agents, nil)
	for _, n := range c.Nodes {
		tr.Dial(t.Context(), n.Address, "tcp", "127.0.0.1:2379")
		tr.Docker(t.Context(), n.Address)
	}
	if want := []string{c.Nodes[0].Address, c.Nodes[0].Address, c.Nodes[1].Address, c.Nodes[1].Address}; !cmp.Equal(ssh.dialed, want) {
		t.Errorf("SSH reached %v, want %v", ssh.dialed, want)
	}
	if want := []string{agentNode, agentNode}; !cmp.Equal(agents.dialed, want) {
		t.Errorf("the agent tunnel reached %v, want %v", agents.dialed, want)
	}
	tr.Close()
	if !ssh.closed || agents.closed {
		t.Errorf("Close closed SSH: %v, the agent tunnel: %v; want SSH only (the tunnel is serve's)", ssh.closed, agents.closed)
	}

	// Without a tunnel (rigger apply), the agent node is unreachable and
	// the message says why.
	_, err := routeNodes(c, ssh, nil, nil).Dial(t.Context(), agentNode, "tcp", "127.0.0.1:2379")
	var nt *NoTunnelError
	var ne transport.NodeError
	if !errors.As(err, &nt) || !errors.As(err, &ne) || !strings.Contains(err.Error(), "only rigger serve reaches it") {
		t.Errorf("Dial to an agent node without a tunnel: %v, want a *NoTunnelError (a transport.NodeError)", err)
	}

	// A cluster of agent nodes only has no SSH transport.
	only := *c
	only.Nodes = c.Nodes[2:]
	agents.dialed = nil
	tr = routeNodes(&only, nil, agents, nil)
	tr.Dial(t.Context(), agentNode, "tcp", "127.0.0.1:2379")
	if want := []string{agentNode}; !cmp.Equal(agents.dialed, want) {
		t.Errorf("the agent tunnel reached %v, want %v", agents.dialed, want)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("Close without SSH: %v", err)
	}

	// A cluster without agent nodes gets SSH itself.
	c.Nodes[2].Transport = spec.TransportSSH
	if tr := routeNodes(c, ssh, agents, nil); tr != transport.Transport(ssh) {
		t.Errorf("routeNodes without agent nodes = %T, want the SSH transport", tr)
	}
}
