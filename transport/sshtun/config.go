package sshtun

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rigger/rigger/transport"
)

// Config is what sshtun needs to reach a set of nodes. The reconcile layer
// fills it from cluster.yml; each field names the key it comes from.
type Config struct {
	// Nodes are the nodes this transport reaches, by Node.Name.
	Nodes []Node

	// Bastion is the jump host (bastion_host) every node is reached
	// through, or nil to reach nodes directly. One connection to it carries
	// the connections to all nodes.
	Bastion *Host

	// KnownHostsFiles are the known_hosts files host keys are checked
	// against (rigger.ssh.known_hosts_file in cluster.yml). Empty means
	// ~/.ssh/known_hosts. A missing file counts as empty. With
	// HostKeyPolicyAcceptNew, new keys are recorded in the first one.
	KnownHostsFiles []string

	// HostKeyPolicy is rigger.ssh.host_key_policy. Empty means strict.
	HostKeyPolicy HostKeyPolicy

	// ConnectTimeout bounds the TCP connection to a node (or the channel
	// through the bastion) (rigger.ssh.connect_timeout). Default 10s.
	ConnectTimeout time.Duration

	// HandshakeTimeout bounds the SSH handshake: key exchange, host key
	// check and authentication. Default: ConnectTimeout, and at least
	// MinHandshakeTimeout: a node that answered is busy, not gone, and a
	// loaded sshd takes seconds to log in.
	HandshakeTimeout time.Duration

	// KeepaliveInterval is how often an idle connection is probed with a
	// keepalive@openssh.com request (rigger.ssh.keepalive_interval). A
	// connection that leaves KeepaliveCountMax probes in a row unanswered
	// is closed, and the next use reconnects. Default 15s; negative turns
	// keepalives off.
	KeepaliveInterval time.Duration

	// MaxParallelDials is how many SSH connections may be being set up at
	// once, across all nodes (rigger.max_parallel). Established connections
	// and the channels they carry are not limited. Default 10.
	MaxParallelDials int

	// AgentSocket is the ssh-agent socket used by hosts with AgentAuth.
	// Empty means $SSH_AUTH_SOCK.
	AgentSocket string

	// Answers is the pool the weight of the nodes' Docker answers is
	// drawn from, shared with other transports of the process (nil: each
	// node has its budget only; see transport.AnswerPool).
	Answers *transport.AnswerPool

	// Logger receives operator logs (connects, reconnects, keys recorded).
	// Default: discard.
	Logger *slog.Logger
}

// Defaults for Config's zero fields.
const (
	DefaultConnectTimeout    = 10 * time.Second
	MinHandshakeTimeout      = 30 * time.Second
	DefaultKeepaliveInterval = 15 * time.Second
	DefaultMaxParallelDials  = 10
	DefaultDockerSocket      = "/var/run/docker.sock"
	DefaultPort              = 22

	// KeepaliveCountMax is how many keepalive intervals may pass without a
	// reply before a connection is declared dead (as OpenSSH's
	// ServerAliveCountMax).
	KeepaliveCountMax = 3
)

// Host is one SSH endpoint and the credentials to log in to it.
type Host struct {
	Address string // address: IP or DNS name
	Port    int    // port; 0 means 22
	User    string // user

	// Key is a PEM private key (ssh_key). It takes precedence over KeyPath.
	// It is never logged nor put into an error.
	Key []byte
	// KeyPath is the private key file (ssh_key_path); a leading ~ is the
	// user's home directory.
	KeyPath string
	// Cert is an OpenSSH user certificate as in a -cert.pub file (ssh_cert).
	Cert []byte
	// CertPath is the certificate file (ssh_cert_path), ~ expanded.
	CertPath string
	// AgentAuth offers the keys held by ssh-agent (ssh_agent_auth).
	AgentAuth bool
}

// Node is a node reached over SSH.
type Node struct {
	// Name is how rigger names the node in calls and messages. Empty
	// means Address.
	Name string
	Host
	// DockerSocket is the Docker engine's socket on the node
	// (docker_socket). Empty means /var/run/docker.sock.
	DockerSocket string
}

// hostPort is the address dialed and looked up in known_hosts.
func (h *Host) hostPort() string {
	port := h.Port
	if port == 0 {
		port = DefaultPort
	}
	return net.JoinHostPort(h.Address, strconv.Itoa(port))
}

// withDefaults returns c with its zero fields set, and checks what can be
// checked without connecting. Every problem is reported, each prefixed by
// the node it belongs to.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = max(c.ConnectTimeout, MinHandshakeTimeout)
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if c.MaxParallelDials <= 0 {
		c.MaxParallelDials = DefaultMaxParallelDials
	}
	if c.HostKeyPolicy == "" {
		c.HostKeyPolicy = HostKeyPolicyStrict
	}
	if _, err := ParseHostKeyPolicy(string(c.HostKeyPolicy)); err != nil {
		errs = append(errs, err)
	}
	if c.AgentSocket == "" {
		c.AgentSocket = os.Getenv("SSH_AUTH_SOCK")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(c.KnownHostsFiles) == 0 {
		c.KnownHostsFiles = []string{"~/.ssh/known_hosts"}
	}
	files := make([]string, 0, len(c.KnownHostsFiles))
	for _, f := range c.KnownHostsFiles {
		p, err := expandHome(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("known_hosts file %s: %w", f, err))
			continue
		}
		files = append(files, p)
	}
	c.KnownHostsFiles = files

	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("no nodes to reach"))
	}
	nodes := make([]Node, len(c.Nodes))
	seen := make(map[string]bool)
	for i, n := range c.Nodes {
		if n.Name == "" {
			n.Name = n.Address
		}
		if n.DockerSocket == "" {
			n.DockerSocket = DefaultDockerSocket
		}
		if seen[n.Name] {
			errs = append(errs, fmt.Errorf("node %s: listed twice", n.Name))
		}
		seen[n.Name] = true
		if err := n.Host.check(); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		}
		if !strings.HasPrefix(n.DockerSocket, "/") {
			errs = append(errs, fmt.Errorf("node %s: docker_socket %q is not an absolute path", n.Name, n.DockerSocket))
		}
		nodes[i] = n
	}
	c.Nodes = nodes
	if c.Bastion != nil {
		b := *c.Bastion
		if err := b.check(); err != nil {
			errs = append(errs, fmt.Errorf("bastion_host: %w", err))
		}
		c.Bastion = &b
	}
	return c, errors.Join(errs...)
}

func (h *Host) check() error {
	var errs []error
	if h.Address == "" {
		errs = append(errs, errors.New("address is empty"))
	}
	if h.Port < 0 || h.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is out of range", h.Port))
	}
	if h.User == "" {
		errs = append(errs, errors.New("user is empty"))
	}
	if len(h.Key) == 0 && h.KeyPath == "" && !h.AgentAuth {
		errs = append(errs, errors.New("no SSH credentials: set ssh_key_path, ssh_key or ssh_agent_auth: true"))
	}
	return errors.Join(errs...)
}

// expandHome replaces a leading ~ or ~/ with the user's home directory.
func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand ~: %w", err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}
