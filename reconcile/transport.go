package reconcile

import (
	"fmt"
	"log/slog"
	"strconv"

	"github.com/rigger/rigger/spec"
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
