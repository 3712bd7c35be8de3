package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
)

// MinDockerAPIVersion is the oldest Docker engine API rigger drives. API
// 1.41 is Docker Engine 20.10, the oldest engine RKE still supports and the
// one Debian 12 ships.
const MinDockerAPIVersion = "1.41"

// MinDockerEngine names the engine release that speaks MinDockerAPIVersion,
// for messages.
const MinDockerEngine = "Docker Engine 20.10"

// DockerPingTimeout bounds CheckDocker's version read: an engine that accepts
// connections but does not answer is hung.
const DockerPingTimeout = 20 * time.Second

// DockerIdleChannels is how many idle connections to a node's engine a
// Docker client keeps open for reuse (Go's default is 2), so that
// concurrent calls to one node do not open and close a channel each.
const DockerIdleChannels = 16

// NewDockerClient returns a Docker API client that reaches the engine of
// node at socket (a path on the node) through dial. Its answers are read
// within their bounds (answers.go), their weight drawn from a budget of
// the node's own (DockerNodeBudget) and from pool (nil: none). It does no
// I/O: call CheckDocker before handing it out. Every transport builds its
// clients here so that they behave the same.
func NewDockerClient(node, socket string, dial Dialer, pool *AnswerPool) (*client.Client, error) {
	// Idle connections are open channels kept for the next request:
	// opening a channel costs a round trip, and several ms against
	// OpenSSH when channels are closed and opened back to back.
	base := &http.Transport{
		MaxIdleConnsPerHost:    DockerIdleChannels,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: DockerMaxHeader,
		ReadBufferSize:         DockerChannelBuffer,
		WriteBufferSize:        DockerChannelBuffer,
	}
	hc := &http.Client{Transport: base}
	cli, err := client.NewClientWithOpts(
		client.WithHTTPClient(hc),
		// The host only shapes the requests (scheme, Host header); dial
		// decides where the bytes go. It must come before WithDialContext,
		// which replaces the dialer WithHost installs.
		client.WithHost("unix://"+socket),
		client.WithDialContext(func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, "unix", socket)
		}),
		client.WithAPIVersionNegotiation(),
	)
	if err != nil {
		return nil, fmt.Errorf("create docker client: %w", err)
	}
	// Wrapped once the client is made: its options want the
	// *http.Transport itself, which it keeps for its dialer and idle
	// connections. The client wrapped it in OpenTelemetry's HTTP
	// instrumentation, which rigger does not use (it sets no tracer or
	// meter) and which cost every call a span and a metric's attributes
	// all the same, about 3 % of a 1,000-node plan's CPU: base, not the
	// client's wrapper, is what the bound wraps.
	hc.Transport = newBoundedAnswers(base, node, pool)
	return cli, nil
}

// DockerChannelBuffer is the size of the read and the write buffer of
// each connection to an engine (Go's default is 4 KiB each). A node keeps
// its idle connections, each an open channel, for the whole run: with a
// thousand nodes the default buffers were a fifth of a plan's heap.
// Requests are small; a larger answer is read through it in more,
// in-memory, reads from the channel.
const DockerChannelBuffer = 1 << 10

// CheckDocker reads the version of the engine behind cli (one round trip,
// in place of a ping: the version says the API versions too), refuses one
// older than MinDockerAPIVersion with a *DockerVersionError, and fixes the
// API version the client uses from then on. A socket that cannot be opened
// gives the transport's *DockerSocketError. The version it returns is what
// a transport's EngineVersion gives.
func CheckDocker(ctx context.Context, node string, cli *client.Client) (types.Version, error) {
	pctx, cancel := context.WithTimeout(ctx, DockerPingTimeout)
	defer cancel()
	v, err := readVersion(pctx, cli)
	if err != nil {
		var nodeErr NodeError
		switch {
		case errors.As(err, &nodeErr):
			return v, nodeErr // without the HTTP request it is wrapped in
		case ctx.Err() != nil:
			return v, fmt.Errorf("node %s: ask the docker engine its version: %w", node, ctx.Err())
		case pctx.Err() != nil:
			return v, fmt.Errorf("node %s: the Docker engine did not answer within %s: check that dockerd "+
				"on the node is healthy (systemctl status docker)", node, DockerPingTimeout)
		}
		return v, fmt.Errorf("node %s: ask the docker engine its version: %w", node, err)
	}
	if v.APIVersion == "" {
		// Engines older than API 1.25 do not announce their version.
		return v, &DockerVersionError{Node: node, APIVersion: "older than 1.25", EngineVersion: v.Version, MinAPIVersion: MinDockerAPIVersion}
	}
	cli.NegotiateAPIVersionPing(types.Ping{APIVersion: v.APIVersion, OSType: v.Os})
	if versions.LessThan(v.APIVersion, MinDockerAPIVersion) {
		return v, &DockerVersionError{Node: node, APIVersion: v.APIVersion, EngineVersion: v.Version, MinAPIVersion: MinDockerAPIVersion}
	}
	return v, nil
}

// readVersion asks the engine its version at the API's unversioned path,
// which every engine answers, before the client knows which version to
// speak.
func readVersion(ctx context.Context, cli *client.Client) (types.Version, error) {
	var v types.Version
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+client.DummyHost+"/version", nil)
	if err != nil {
		return v, err
	}
	resp, err := cli.HTTPClient().Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return v, fmt.Errorf("GET /version answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, fmt.Errorf("GET /version: %w", err)
	}
	return v, nil
}

// EngineVersions is a Transport that keeps what each node's engine
// answered CheckDocker when its client was made, so that observing the
// node need not ask again.
type EngineVersions interface {
	// EngineVersion is node's engine version read when its Docker client
	// was made; false when there is none yet.
	EngineVersion(node string) (types.Version, bool)
}

// EngineVersion is the version of node's engine: the one t read on
// connecting when it keeps it (EngineVersions), else read through cli.
func EngineVersion(ctx context.Context, t Transport, node string, cli *client.Client) (types.Version, error) {
	if ev, ok := t.(EngineVersions); ok {
		if v, ok := ev.EngineVersion(node); ok {
			return v, nil
		}
	}
	return cli.ServerVersion(ctx)
}
