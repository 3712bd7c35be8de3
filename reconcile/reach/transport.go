// Package reach is how rigger reaches a cluster's nodes and the services
// on them: the transport of each node as cluster.yml says (SSH, or the
// agent tunnel for nodes with transport: agent), and through it the API
// server, the etcd members and the components' health endpoints, with the
// cluster's certificates.
package reach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"

	"github.com/docker/docker/api/types"
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

// sshTransport returns the SSH transport of c's nodes with transport: ssh
// (nil when there are none). A node of former, the nodes of the last apply
// that cluster.yml no longer has, whose key or certificate can no longer
// be used (gone with the machine, or moved away) is left out of it, with
// its error: like a removed node that does not answer, it is reported and
// left for a later apply, instead of stopping every apply of the cluster.
// With keysPerNode, so is any node's.
func sshTransport(c *spec.Cluster, former []spec.Node, keysPerNode bool, answers *transport.AnswerPool, log *slog.Logger) (transport.Transport, map[string]error, error) {
	cfg, err := SSHConfig(c, log)
	if err != nil || len(cfg.Nodes) == 0 {
		return nil, nil, err
	}
	cfg.Answers = answers
	ssh, err := sshtun.New(cfg)
	if err == nil {
		return ssh, nil, nil
	}
	unusable := keyErrors(err, former, keysPerNode)
	if unusable == nil {
		return nil, nil, err
	}
	cfg.Nodes = slices.DeleteFunc(cfg.Nodes, func(n sshtun.Node) bool { return unusable[n.Name] != nil })
	if len(cfg.Nodes) == 0 {
		return nil, unusable, nil
	}
	if ssh, err = sshtun.New(cfg); err != nil {
		return nil, nil, err
	}
	return ssh, unusable, nil
}

// keyErrors returns the errors of sshtun.New by node when each is a
// *sshtun.KeyError of a node of former (as *FormerNodeError) or, with
// every, of any node; nil when one is not.
func keyErrors(err error, former []spec.Node, every bool) map[string]error {
	errs := []error{err}
	if joined, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	out := map[string]error{}
	for _, e := range errs {
		var ke *sshtun.KeyError
		switch {
		case !errors.As(e, &ke):
			return nil
		case slices.ContainsFunc(former, func(n spec.Node) bool { return n.Address == ke.Node }):
			out[ke.Node] = &FormerNodeError{Err: ke}
		case every:
			out[ke.Node] = ke
		default:
			return nil
		}
	}
	return out
}

// FormerNodeError is a node of the last apply that cluster.yml no longer
// has, which cannot be reached as the last apply reached it: the key or
// certificate recorded for it in the state directory cannot be used.
type FormerNodeError struct{ Err error }

func (*FormerNodeError) TransportNodeError() {}

func (e *FormerNodeError) Error() string {
	return fmt.Sprintf("%v (the node is no longer in cluster.yml: this is how the last apply reached it, "+
		"as recorded in the state directory's nodes.json)", e.Err)
}

func (e *FormerNodeError) Unwrap() error { return e.Err }

// Transport is the transport to the nodes of c (and of the last apply,
// former, reached as that apply reached them): SSH as cluster.yml says,
// and agents (rigger serve's tunnel of the cluster; nil: none) for the
// nodes with transport: agent. With keysPerNode, a node whose SSH key or
// certificate cannot be used (a missing ssh_key_path file) is not an
// error of the whole transport but of that node's calls, for rigger
// doctor to report with the node's other findings. The weight of the SSH
// nodes' Docker answers is drawn from answers (transport.AnswerPool).
func Transport(c *spec.Cluster, former []spec.Node, agents transport.Transport, keysPerNode bool, answers *transport.AnswerPool, log *slog.Logger) (transport.Transport, error) {
	reach := *c
	reach.Nodes = slices.Concat(c.Nodes, former)
	ssh, unusable, err := sshTransport(&reach, former, keysPerNode, answers, log)
	if err != nil {
		return nil, err
	}
	return routeNodes(&reach, ssh, agents, unusable), nil
}

// routeNodes returns ssh when c has no node with transport: agent and
// unusable is empty, and otherwise a transport that answers a node of
// unusable with its error, sends the calls of nodes with transport: agent
// to agents (nil: a *NoTunnelError) and the others' to ssh (nil when there
// are none). Closing it closes ssh only: the agent tunnel belongs to rigger
// serve.
func routeNodes(c *spec.Cluster, ssh, agents transport.Transport, unusable map[string]error) transport.Transport {
	viaAgent := map[string]bool{}
	for _, n := range c.Nodes {
		if n.Transport == spec.TransportAgent {
			viaAgent[n.Address] = true
		}
	}
	if len(viaAgent) == 0 && len(unusable) == 0 && ssh != nil {
		return ssh
	}
	return &nodeRouter{ssh: ssh, agents: agents, viaAgent: viaAgent, unusable: unusable}
}

// nodeRouter sends each node's calls to the transport that reaches it.
type nodeRouter struct {
	ssh, agents transport.Transport
	viaAgent    map[string]bool
	unusable    map[string]error
}

func (r *nodeRouter) pick(node string) (transport.Transport, error) {
	if err := r.unusable[node]; err != nil {
		return nil, err
	}
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

// EngineVersion is the version of node's engine its transport read on
// connecting, when it keeps it (transport.EngineVersions).
func (r *nodeRouter) EngineVersion(node string) (types.Version, bool) {
	t, err := r.pick(node)
	if err != nil {
		return types.Version{}, false
	}
	if ev, ok := t.(transport.EngineVersions); ok {
		return ev.EngineVersion(node)
	}
	return types.Version{}, false
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
