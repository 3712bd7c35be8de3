package doctor

import (
	"context"
	"errors"
	"net"

	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/agenttun"
	"github.com/rigger/rigger/transport/sshtun"
)

// The checks of reaching a node, in the order a connection takes them. A
// node reached over SSH goes through the first five, one with the agent
// transport through AgentConnected; both then open the Docker socket and
// speak its API.
const (
	CheckAddress        = "address"
	CheckSSHPort        = "ssh-port"
	CheckSSHHandshake   = "ssh-handshake"
	CheckSSHHostKey     = "ssh-host-key"
	CheckSSHAuth        = "ssh-auth"
	CheckAgentConnected = "agent-connected"
	CheckDockerSocket   = "docker-socket"
	CheckDockerAPI      = "docker-api"
)

// ReachChecks are the checks of reaching a node, in order.
var ReachChecks = []string{CheckAddress, CheckSSHPort, CheckSSHHandshake, CheckSSHHostKey, CheckSSHAuth,
	CheckAgentConnected, CheckDockerSocket, CheckDockerAPI}

// Reach says which check of ReachChecks the error of reaching a node
// (observe.Node.Err, nil when the node answered) fails, and how; "" for
// nil. The transport's errors already name the node and what to check:
// that text is what was found, and the fix says it in a line.
func Reach(err error) (check string, r Result) {
	if err == nil {
		return "", Passed("")
	}
	found := err.Error()
	var (
		unreachable *transport.UnreachableError
		dnsErr      *net.DNSError
		unknown     *sshtun.HostKeyUnknownError
		changed     *sshtun.HostKeyChangedError
		revoked     *sshtun.HostKeyRevokedError
		auth        *sshtun.AuthError
		key         *sshtun.KeyError
		socket      *transport.DockerSocketError
		version     *transport.DockerVersionError
		notConn     *agenttun.NotConnectedError
		noTunnel    *reach.NoTunnelError
		tooLarge    *transport.DockerAnswerTooLargeError
		budget      *transport.DockerBudgetError
	)
	switch {
	case errors.As(err, &dnsErr):
		return CheckAddress, Failed("the node's address to resolve", found,
			"fix the node's address in cluster.yml, or its DNS record (no such host)")
	case errors.As(err, &unreachable) && unreachable.Op == transport.OpHandshake:
		return CheckSSHHandshake, Failed("sshd to complete the SSH handshake", found,
			"check that sshd (not another service) listens on the node's SSH port and is not overloaded (MaxStartups)")
	case errors.As(err, &unreachable):
		return CheckSSHPort, Failed("the node's SSH port to accept a connection", found,
			"check the node is up, its address and port in cluster.yml, that sshd runs, and that no firewall drops port 22 (i/o timeout, connection refused)")
	case errors.As(err, &unknown), errors.As(err, &changed), errors.As(err, &revoked):
		return CheckSSHHostKey, Failed("the node's host key in known_hosts", found,
			"if the node was reinstalled, remove its old line from known_hosts (ssh-keygen -R ADDRESS) and add the new key; otherwise find out who answers at that address (REMOTE HOST IDENTIFICATION HAS CHANGED)")
	case errors.As(err, &key):
		return CheckSSHAuth, Failed("the node's SSH key or certificate to be usable", found,
			"fix ssh_key_path (or ssh_key, ssh_cert_path) in cluster.yml: the file must exist, be readable by the user running rigger and hold an OpenSSH or PEM private key (no such file or directory, permission denied); an encrypted key goes into ssh-agent with ssh_agent_auth: true")
	case errors.As(err, &auth):
		return CheckSSHAuth, Failed("the node's sshd to accept the configured user and key", found,
			"check user and ssh_key_path in cluster.yml, and that the key's public half is in ~USER/.ssh/authorized_keys on the node (unable to authenticate, no supported methods remain)")
	case errors.As(err, &notConn) && notConn.Next != "":
		// Where the join stopped, as the tunnel server saw it.
		return CheckAgentConnected, Failed("the node's agent to be connected", found, notConn.Next+" (docs/agent.md)")
	case errors.As(err, &notConn), errors.As(err, &noTunnel):
		return CheckAgentConnected, Failed("the node's agent to be connected", found,
			"check that rigger agent runs on the node and reaches rigger serve's --agent-listen address, and its logs for the join (docs/agent.md)")
	case errors.As(err, &socket):
		fix := "check the docker_socket path, that dockerd runs, and that the SSH user is in the docker group"
		if socket.Problem == transport.SocketForwardingRefused {
			fix = "allow forwarding in the node's sshd_config (AllowTcpForwarding yes, AllowStreamLocalForwarding yes, no DisableForwarding) and reload sshd (administratively prohibited)"
		}
		return CheckDockerSocket, Failed("the node's Docker socket to open", found, fix)
	case errors.As(err, &version):
		return CheckDockerAPI, Failed("a Docker engine with API "+version.MinAPIVersion+" or newer", found,
			"upgrade Docker on the node")
	case errors.As(err, &budget) && budget.Pool:
		return CheckDockerAPI, Failed("rigger's memory for the nodes' answers to have room for this node's", found,
			"nothing on this node: other nodes answer with very large answers (their docker-api check fails); this node is read again at the next reconcile")
	case errors.As(err, &tooLarge), errors.As(err, &budget):
		return CheckDockerAPI, Failed("the Docker engine to answer within rigger's limits", found,
			"remove the containers and images left over on the node (docker ps -a, docker container prune); if it has few, its engine is not to be trusted: a compromised node answers so")
	}
	return CheckDockerAPI, Failed("the node's Docker engine to answer", found,
		"check that dockerd runs on the node and answers (docker info), and its logs (journalctl -u docker)")
}

// Proves says whether err, the error of reaching a node, proves that the
// checks of ReachChecks before the one it fails passed: a transport's
// typed error (transport.NodeError) says where the connection stopped, as
// does any other error but a timeout or a cancellation, which comes from
// whatever step was under way when the time ran out.
func Proves(err error) bool {
	var nodeErr transport.NodeError
	if errors.As(err, &nodeErr) {
		return true
	}
	return !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// Untried says whether err stopped a node's connection before it was
// attempted (its SSH key or certificate cannot be used), so that the
// checks of the connection before the failing one were not tried.
func Untried(err error) bool {
	var key *sshtun.KeyError
	return errors.As(err, &key)
}
