package reconcile

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
