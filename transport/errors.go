package transport

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// NodeError is implemented by every error a transport returns because a
// node cannot be reached or used (unreachable, authentication refused, host
// key unknown or changed, Docker socket or version): each names the node and
// says what to check. Callers that get one wrapped by a client library, such
// as Docker's, unwrap it with errors.As and pass it on as it is.
type NodeError interface {
	error
	// TransportNodeError marks the type; it does nothing.
	TransportNodeError()
}

// UnreachableError means rigger could not open a working connection to a
// node: the TCP connection failed or timed out, or the peer accepted it but
// did not complete the protocol handshake in time. It does not mean the node
// is gone: unreachable nodes are never removed.
type UnreachableError struct {
	Node string // the node as rigger names it
	Addr string // host:port that was dialed
	Via  string // the jump host the dial went through, if any
	// Op is the step that failed: OpConnect or OpHandshake.
	Op string
	// Timeout is the limit that expired, zero when the step failed
	// otherwise (connection refused, no route, reset).
	Timeout time.Duration
	Err     error
}

// Steps of a connection an UnreachableError names.
const (
	OpConnect   = "connect"
	OpHandshake = "handshake"
)

func (*UnreachableError) TransportNodeError() {}

func (e *UnreachableError) Error() string {
	via := ""
	if e.Via != "" {
		via = " via " + e.Via
	}
	switch {
	case e.Op == OpHandshake && e.Timeout > 0:
		return fmt.Sprintf("node %s: %s%s accepted the connection but did not complete the SSH handshake within %s: "+
			"check that sshd (not another service) listens on that port and is not overloaded (MaxStartups), "+
			"or raise rigger.ssh.connect_timeout", e.Node, e.Addr, via, e.Timeout)
	case e.Op == OpHandshake:
		return fmt.Sprintf("node %s: SSH handshake with %s%s failed: %v: check that sshd listens on that port and "+
			"shares a key exchange algorithm with rigger", e.Node, e.Addr, via, e.Err)
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		// Worded without "connection refused": Docker's client replaces
		// any error that says so with "Cannot connect to the Docker
		// daemon", which would hide that SSH itself was refused.
		return fmt.Sprintf("node %s: %s%s refused the connection: nothing listens on that port: check the node's "+
			"address and port (port in cluster.yml, 22 by default) and that sshd runs there", e.Node, e.Addr, via)
	case e.Timeout > 0:
		return fmt.Sprintf("node %s: cannot reach %s%s: no answer within %s: check the node's address and port, "+
			"that it is up, and that no firewall drops the connection; or raise rigger.ssh.connect_timeout",
			e.Node, e.Addr, via, e.Timeout)
	default:
		return fmt.Sprintf("node %s: cannot reach %s%s: %v: check the node's address and port, that it is up, "+
			"and that sshd runs there", e.Node, e.Addr, via, e.Err)
	}
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// DialError means the connection to a node works but the address dialed
// from the node did not answer: nothing listens on the port, or the node's
// SSH server or agent refused to forward to it.
type DialError struct {
	Node    string
	Network string // "tcp" or "unix"
	Addr    string // as seen from the node
	Err     error
}

func (*DialError) TransportNodeError() {}

func (e *DialError) Error() string {
	return fmt.Sprintf("node %s: dial %s %s on the node: %v", e.Node, e.Network, e.Addr, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// SocketProblem says why a Docker socket could not be used.
type SocketProblem int

const (
	// SocketUnavailable: the socket could not be opened, and the node did
	// not say why. OpenSSH's sshd reports a missing socket and a refused
	// permission the same way.
	SocketUnavailable SocketProblem = iota
	// SocketMissing: nothing exists at the path.
	SocketMissing
	// SocketPermissionDenied: the socket exists but the user may not open
	// it, usually because it is not in the docker group.
	SocketPermissionDenied
	// SocketForwardingRefused: the node refuses to forward Unix sockets at
	// all (sshd's AllowStreamLocalForwarding or DisableForwarding).
	SocketForwardingRefused
	// SocketNotDocker: something answers at the path but it is not a Docker
	// engine API.
	SocketNotDocker
)

// DockerSocketError means the node's Docker socket could not be used. Its
// message says what to check for each Problem.
type DockerSocketError struct {
	Node    string
	Path    string // the docker_socket path on the node
	User    string // the user the socket is opened as, if known
	Problem SocketProblem
	// Detail is what the node said, if anything (never secret).
	Detail string
	Err    error
}

func (*DockerSocketError) TransportNodeError() {}

func (e *DockerSocketError) Error() string {
	user := e.User
	if user == "" {
		user = "the SSH user"
	}
	head := fmt.Sprintf("node %s: Docker socket %s", e.Node, e.Path)
	var msg string
	switch e.Problem {
	case SocketMissing:
		msg = fmt.Sprintf("%s does not exist: check that dockerd runs on the node and that docker_socket "+
			"names the socket it listens on", head)
	case SocketPermissionDenied:
		msg = fmt.Sprintf("%s: permission denied for user %s: add the user to the docker group "+
			"(usermod -aG docker %s) or use a user that is in it", head, user, user)
	case SocketForwardingRefused:
		msg = fmt.Sprintf("%s: the node's sshd refuses to forward Unix sockets: set AllowStreamLocalForwarding yes "+
			"(and not DisableForwarding yes) in its sshd_config and reload sshd", head)
	case SocketNotDocker:
		msg = fmt.Sprintf("%s does not answer like a Docker engine: check docker_socket", head)
	default:
		msg = fmt.Sprintf("%s cannot be opened as user %s. Either it does not exist (dockerd is not running, "+
			"or docker_socket names the wrong path), or %s may not use it (add it to the docker group: "+
			"usermod -aG docker %s), or the node's sshd does not forward Unix sockets (AllowStreamLocalForwarding)",
			head, user, user, user)
	}
	if e.Detail != "" {
		msg += " (node says: " + e.Detail + ")"
	}
	return msg
}

func (e *DockerSocketError) Unwrap() error { return e.Err }

// DockerVersionError means the node's Docker engine is older than rigger
// supports (MinDockerAPIVersion).
type DockerVersionError struct {
	Node          string
	APIVersion    string // what the engine speaks
	EngineVersion string // the engine's release, when it could be read
	MinAPIVersion string
}

func (*DockerVersionError) TransportNodeError() {}

func (e *DockerVersionError) Error() string {
	engine := ""
	if e.EngineVersion != "" {
		engine = " " + e.EngineVersion
	}
	return fmt.Sprintf("node %s: Docker engine%s speaks API %s, rigger needs API %s or newer (%s): "+
		"upgrade Docker on the node", e.Node, engine, e.APIVersion, e.MinAPIVersion, MinDockerEngine)
}
