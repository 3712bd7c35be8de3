// Package transport is how rigger reaches a node: a Docker API client for the
// node's engine and dials to addresses as seen from the node (etcd's
// 127.0.0.1:2379, healthz ports). Nothing else: rigger drives nodes through
// the Docker API only, so a transport never runs commands.
//
// Two implementations exist: transport/sshtun (the Docker socket tunnelled
// over SSH, as RKE does) and the agent tunnel. Both return the typed errors
// declared here where the failure means the same thing for both, so that
// status and retries never depend on which transport reached a node.
// transport/transporttest holds the conformance suite every implementation
// runs in its tests.
package transport

import (
	"context"
	"errors"
	"net"

	"github.com/docker/docker/client"
)

// Transport reaches the nodes it was built for, named as rigger names them.
// It is safe for concurrent use by many goroutines.
//
// It exists so that the reconcile layer does not know how a node is reached;
// a transport owns its connections and reuses them across calls.
type Transport interface {
	// Docker returns a client for the node's Docker engine. The first call
	// for a node connects, checks that the engine answers and is recent
	// enough (MinDockerAPIVersion), and negotiates the API version; later
	// calls return the same client. The client belongs to the transport:
	// Close closes it, callers do not.
	Docker(ctx context.Context, node string) (*client.Client, error)

	// Dial connects to addr as seen from the node: network "tcp" for
	// node-local ports such as "127.0.0.1:2379", "unix" for a socket path on
	// the node. A port nothing listens on gives a *DialError.
	Dial(ctx context.Context, node, network, addr string) (net.Conn, error)

	// Close closes every connection, including those returned by Dial and
	// the Docker clients. Later calls fail with ErrClosed. Close may be
	// called more than once.
	Close() error
}

// Dialer dials an address. It has the signature of
// net.Dialer.DialContext and http.Transport.DialContext, so a transport's
// dial to one node plugs straight into an HTTP or gRPC client.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// ErrClosed is returned by every call on a transport after Close.
var ErrClosed = errors.New("transport is closed")

// ErrUnknownNode is returned for a node the transport was not built for.
var ErrUnknownNode = errors.New("not a node of this transport")

// NodeDialer returns a Dialer that dials through t to the given node.
func NodeDialer(t Transport, node string) Dialer {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return t.Dial(ctx, node, network, addr)
	}
}
