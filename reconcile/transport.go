package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/docker/docker/client"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/sshtun"
)

// SSHConfig maps a validated cluster's SSH settings to the SSH transport's
// config: every node with `transport: ssh`, named by its address, the bastion
// host, and the rigger.ssh block. Nodes reached by the agent tunnel are left
// out.
func SSHConfig(c *spec.Cluster, log *slog.Logger) (sshtun.Config, error) {
	policy, err := sshtun.ParseHostKeyPolicy(c.Rigger.SSH.HostKeyPolicy)
	if err != nil {
		return sshtun.Config{}, fmt.Errorf("rigger.ssh: %w", err)
	}
	cfg := sshtun.Config{
		KnownHostsFiles:   []string{c.Rigger.SSH.KnownHostsFile},
		HostKeyPolicy:     policy,
		ConnectTimeout:    c.Rigger.SSH.ConnectTimeout.Std(),
		KeepaliveInterval: c.Rigger.SSH.KeepaliveInterval.Std(),
		MaxParallelDials:  c.Rigger.MaxParallel,
		Logger:            log,
	}
	if b := c.BastionHost; b != nil && b.Address != "" {
		h, err := sshHost(b.Address, b.Port, b.User, b.SSHKey, b.SSHKeyPath, b.SSHCert, b.SSHCertPath, b.SSHAgentAuth)
		if err != nil {
			return sshtun.Config{}, fmt.Errorf("bastion_host: %w", err)
		}
		cfg.Bastion = &h
	}
	for _, n := range c.Nodes {
		if n.Transport != spec.TransportSSH {
			continue
		}
		h, err := sshHost(n.Address, n.Port, n.User, n.SSHKey, n.SSHKeyPath, n.SSHCert, n.SSHCertPath, n.SSHAgentAuth)
		if err != nil {
			return sshtun.Config{}, fmt.Errorf("node %s: %w", n.Address, err)
		}
		cfg.Nodes = append(cfg.Nodes, sshtun.Node{Name: n.Address, Host: h, DockerSocket: n.DockerSocket})
	}
	return cfg, nil
}

func sshHost(address, port, user, key, keyPath, cert, certPath string, agent bool) (sshtun.Host, error) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return sshtun.Host{}, fmt.Errorf("port %q is not a number", port)
	}
	h := sshtun.Host{Address: address, Port: p, User: user, KeyPath: keyPath, CertPath: certPath, AgentAuth: agent}
	if key != "" {
		h.Key = []byte(key)
	}
	if cert != "" {
		h.Cert = []byte(cert)
	}
	return h, nil
}

// routeAgentNodes returns ssh when c has no node with transport: agent,
// and otherwise a transport that sends those nodes' calls to agents (nil:
// a *NoTunnelError) and the others' to ssh (nil when there are none).
// Closing it closes ssh only: the agent tunnel belongs to rigger serve.
func routeAgentNodes(c *spec.Cluster, ssh, agents transport.Transport) transport.Transport {
	viaAgent := map[string]bool{}
	for _, n := range c.Nodes {
		if n.Transport == spec.TransportAgent {
			viaAgent[n.Address] = true
		}
	}
	if len(viaAgent) == 0 && ssh != nil {
		return ssh
	}
	return &nodeRouter{ssh: ssh, agents: agents, viaAgent: viaAgent}
}

// nodeRouter sends each node's calls to the transport that reaches it.
type nodeRouter struct {
	ssh, agents transport.Transport
	viaAgent    map[string]bool
}

func (r *nodeRouter) pick(node string) (transport.Transport, error) {
	if !r.viaAgent[node] {
		if r.ssh == nil {
			return nil, fmt.Errorf("node %s: %w", node, transport.ErrUnknownNode)
		}
		return r.ssh, nil
	}
	if r.agents == nil {
		return nil, &NoTunnelError{Node: node}
	}
	return r.agents, nil
}

func (r *nodeRouter) Docker(ctx context.Context, node string) (*client.Client, error) {
	t, err := r.pick(node)
	if err != nil {
		return nil, err
	}
	return t.Docker(ctx, node)
}

func (r *nodeRouter) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	t, err := r.pick(node)
	if err != nil {
		return nil, err
	}
	return t.Dial(ctx, node, network, addr)
}

func (r *nodeRouter) Close() error {
	if r.ssh == nil {
		return nil
	}
	return r.ssh.Close()
}

// NoTunnelError means a node declared with transport: agent was to be
// reached where no agent tunnel runs: only rigger serve, with
// --agent-listen, reaches such nodes.
type NoTunnelError struct{ Node string }

func (*NoTunnelError) TransportNodeError() {}

func (e *NoTunnelError) Error() string {
	return fmt.Sprintf("node %s: declared with transport: agent, so only rigger serve reaches it, through the "+
		"agent tunnel (--agent-listen; docs/agent.md)", e.Node)
}
