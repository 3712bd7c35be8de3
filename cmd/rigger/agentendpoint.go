package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/replicas"
	"github.com/rigger/rigger/internal/shellquote"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/agenttun"
)

// agentPathPrefix is where serve's agent endpoint serves each cluster's
// tunnel: <prefix><cluster_name>, the URL an agent's --server names.
const agentPathPrefix = "/agent/"

// agentStoreDir is where serve keeps the agent tunnel's CA, tokens and node
// certificates, under its --state-dir (beside the clones, where no cluster
// state directory can be).
func agentStoreDir(stateDir string) string {
	return filepath.Join(stateDir, gitops.ServeDir, "agent-tunnel")
}

// openAgentStore opens the agent tunnel's store: in agentStoreDir(stateDir),
// or, when records is not nil, in the Secrets it names, shared by serve's
// replicas. A directory's records (serve kept them there before it kept
// them in Secrets) are moved into Secrets that hold no CA yet, so that
// the agents' --ca-checksum, tokens and certificates stay good.
func openAgentStore(ctx context.Context, stateDir string, records *secretstate.AgentRecords, log *slog.Logger, now time.Time) (*agenttun.Store, error) {
	if records == nil {
		return agenttun.OpenStore(agentStoreDir(stateDir), now)
	}
	dir := agentStoreDir(stateDir)
	_, _, err := records.ReadCA(ctx)
	switch {
	case errors.Is(err, fs.ErrNotExist) && dirHoldsCA(ctx, dir):
		from, err := agenttun.OpenStore(dir, now)
		if err != nil {
			return nil, err
		}
		n, err := agenttun.Copy(ctx, from.Backend(), records)
		if err != nil && !errors.Is(err, agenttun.ErrExists) {
			return nil, fmt.Errorf("move the agent tunnel's records from %s into %s: %w", dir, records.Where(), err)
		}
		log.Info("the agent tunnel's CA and records moved from the state directory into Secrets; the directory's copy is no longer read",
			"from", dir, "namespace", records.Namespace, "records", n, "ca_checksum", from.CA().Checksum())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("agent tunnel state: %w", err)
	}
	return agenttun.NewStore(ctx, records, now)
}

// dirHoldsCA says whether the agent tunnel's directory dir holds a CA.
func dirHoldsCA(ctx context.Context, dir string) bool {
	if _, err := os.Stat(dir); err != nil {
		return false
	}
	d, err := agenttun.NewDir(dir)
	if err != nil {
		return false
	}
	_, _, err = d.ReadCA(ctx)
	return !errors.Is(err, fs.ErrNotExist)
}

// agentServerURL is the --server of a cluster's agents.
func agentServerURL(base, cluster string) string {
	return strings.TrimSuffix(base, "/") + agentPathPrefix + cluster
}

// agentEndpoint is rigger serve's agent tunnel endpoint: one TLS listener
// and one CA for every cluster, and a tunnel server per cluster, made when
// the cluster is first reconciled and admitting the nodes its cluster.yml
// declares with transport: agent.
type agentEndpoint struct {
	store *agenttun.Store
	url   string // the endpoint's public base URL, for the docker run lines
	log   *slog.Logger
	// answers is serve's pool for the nodes' Docker answers.
	answers *transport.AnswerPool

	// peerClient dials serve's other replicas for the tunnels they hold,
	// and peerAddress is where they reach this one (host:port); nil and
	// "" without --leader-elect.
	peerClient  *agenttun.PeerClient
	peerAddress string

	mu        sync.Mutex
	servers   map[string]*agenttun.Server // by cluster_name
	announced map[string]bool             // cluster/node whose docker run line was logged
	// self and members are this replica and the live replicas, once the
	// replicas' Set runs (setReplicas).
	self    string
	members func() []replicas.Member
}

// setReplicas makes the replicas of members, but self, the peers of every
// cluster's tunnel server: a node whose agent reached another replica is
// reached through it.
func (e *agentEndpoint) setReplicas(self string, members func() []replicas.Member) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.self, e.members = self, members
}

// peers are the other live replicas' endpoints for cluster.
func (e *agentEndpoint) peers(cluster string) []agenttun.Peer {
	e.mu.Lock()
	self, members := e.self, e.members
	e.mu.Unlock()
	if members == nil {
		return nil
	}
	var out []agenttun.Peer
	for _, m := range members() {
		if m.ID != self && m.AgentAddress != "" {
			out = append(out, agenttun.Peer{ID: m.ID, URL: "https://" + m.AgentAddress + agentPathPrefix + cluster})
		}
	}
	return out
}

func newAgentEndpoint(store *agenttun.Store, url string, answers *transport.AnswerPool, log *slog.Logger) *agentEndpoint {
	return &agentEndpoint{store: store, url: url, answers: answers, log: log, servers: map[string]*agenttun.Server{}, announced: map[string]bool{}}
}

// ServeHTTP hands <prefix><cluster>/... to the cluster's tunnel server.
func (e *agentEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cluster, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, agentPathPrefix), "/")
	e.mu.Lock()
	srv := e.servers[cluster]
	e.mu.Unlock()
	if !strings.HasPrefix(r.URL.Path, agentPathPrefix) || srv == nil {
		http.Error(w, fmt.Sprintf("no cluster %q with nodes of transport: agent is known to this rigger serve yet: "+
			"declare the node so in its cluster.yml", cluster), http.StatusNotFound)
		return
	}
	http.StripPrefix(agentPathPrefix+cluster, srv).ServeHTTP(w, r)
}

// open is serve's gitops.Opener: the session reaches the cluster's agent
// nodes through the cluster's tunnel server, which admits exactly the
// nodes this cluster.yml declares with transport: agent, and those of the
// last apply it no longer declares until an apply has cleaned them.
func (e *agentEndpoint) open(c *spec.Cluster, opts reconcile.Options) (gitops.Session, error) {
	s, err := e.openSession(c, opts)
	if err != nil {
		return nil, err
	}
	return gitops.NewEngine(s, c, opts.StateDir), nil
}

// openSession opens the reconcile session of open.
func (e *agentEndpoint) openSession(c *spec.Cluster, opts reconcile.Options) (*reconcile.Session, error) {
	srv, err := e.server(c.ClusterName)
	if err != nil {
		return nil, err
	}
	opts.Agents = srv
	former, err := reconcile.FormerNodes(c, opts.StateDir)
	if err != nil {
		return nil, err
	}
	s, err := reconcile.Open(c, opts)
	if err != nil {
		return nil, err
	}
	e.admit(srv, c, former)
	return s, nil
}

// server is the cluster's tunnel server, made on first use.
func (e *agentEndpoint) server(cluster string) (*agenttun.Server, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if srv := e.servers[cluster]; srv != nil {
		return srv, nil
	}
	cfg := agenttun.Config{Cluster: cluster, Store: e.store, Answers: e.answers, Logger: e.log}
	if e.peerClient != nil {
		cfg.PeerClient = e.peerClient
		cfg.Peers = func() []agenttun.Peer { return e.peers(cluster) }
	}
	srv, err := agenttun.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	e.servers[cluster] = srv
	return srv, nil
}

// admit sets the nodes srv admits, and logs the docker run line of each
// declared agent node not connected, once per node.
func (e *agentEndpoint) admit(srv *agenttun.Server, c *spec.Cluster, former []spec.Node) {
	var nodes []agenttun.Node
	var agentNodes []spec.Node
	for i, n := range slices.Concat(c.Nodes, former) {
		if n.Transport == spec.TransportAgent {
			nodes = append(nodes, agenttun.Node{Name: n.Address, DockerSocket: n.DockerSocket})
			if i < len(c.Nodes) {
				agentNodes = append(agentNodes, n)
			}
		}
	}
	srv.SetNodes(nodes)
	connected := map[string]bool{}
	for _, a := range srv.Agents() {
		connected[a.Node] = a.Connected
	}
	for _, n := range agentNodes {
		e.mu.Lock()
		first := !e.announced[c.ClusterName+"/"+n.Address]
		e.announced[c.ClusterName+"/"+n.Address] = true
		e.mu.Unlock()
		if first && !connected[n.Address] {
			e.log.Info("agent node not connected: start its agent with this command, RIGGER_TOKEN set to a token "+
				"from `rigger agent command` (which prints the same line with a token)", "cluster", c.ClusterName,
				"node", n.Address, "command", agentRunLine(agentServerURL(e.url, c.ClusterName), e.store.CA().Checksum(),
					"rigger/rigger:"+version, n, ""))
		}
	}
}

// elsewhere admits the agent nodes of c, a cluster another replica holds,
// so that their agents may reach this replica and the holder reach them
// through it (gitops.Config.Elsewhere).
func (e *agentEndpoint) elsewhere(c *spec.Cluster) {
	var nodes []agenttun.Node
	for _, n := range c.Nodes {
		if n.Transport == spec.TransportAgent {
			nodes = append(nodes, agenttun.Node{Name: n.Address, DockerSocket: n.DockerSocket})
		}
	}
	e.mu.Lock()
	_, known := e.servers[c.ClusterName]
	e.mu.Unlock()
	if len(nodes) == 0 && !known {
		return
	}
	srv, err := e.server(c.ClusterName)
	if err != nil {
		e.log.Error("agent tunnel: admit the agent nodes of a cluster another replica holds", "cluster", c.ClusterName, "err", err)
		return
	}
	srv.Admit(nodes)
}

// pending lists the cluster's pending agents for its status.yml, as
// "node (host hostname)".
func (e *agentEndpoint) pending(cluster string) []string {
	e.mu.Lock()
	srv := e.servers[cluster]
	e.mu.Unlock()
	if srv == nil {
		return nil
	}
	var out []string
	for _, p := range srv.Pending() {
		if p.Key != "" {
			out = append(out, fmt.Sprintf("%s (host %s, a second join: approve it with rigger agent approve --node %s --key %.16s)",
				p.Node, p.Hostname, p.Node, p.Key))
			continue
		}
		out = append(out, fmt.Sprintf("%s (host %s)", p.Node, p.Hostname))
	}
	return out
}

// tunnels gives the tunnel of each of the cluster's agent nodes for its
// status.yml.
func (e *agentEndpoint) tunnels(cluster string) []gitops.AgentTunnel {
	e.mu.Lock()
	srv := e.servers[cluster]
	e.mu.Unlock()
	if srv == nil {
		return nil
	}
	var out []gitops.AgentTunnel
	for _, a := range srv.Agents() {
		t := gitops.AgentTunnel{Node: a.Node, Connected: a.Connected, Hostname: a.Hostname, Replica: a.Via}
		if !a.LastSeen.IsZero() {
			seen := a.LastSeen.UTC().Truncate(time.Second)
			t.LastSeen = &seen
		}
		out = append(out, t)
	}
	return out
}

// Close closes every cluster's tunnels.
func (e *agentEndpoint) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.servers {
		s.Close()
	}
}

// agentRunLine is the docker run line that starts node n's agent. With an
// empty token it passes RIGGER_TOKEN on from the caller's environment.
// Operators paste it into a root shell: every value in it is quoted for
// the shell, whatever spec's validation let through.
func agentRunLine(server, checksum, image string, n spec.Node, token string) string {
	socket := n.DockerSocket
	env := "-e RIGGER_TOKEN"
	if token != "" {
		env = "-e " + shellquote.Quote("RIGGER_TOKEN="+token)
	}
	args := []string{"docker run -d --restart=unless-stopped --net=host --name rigger-agent",
		"-v " + shellquote.Quote(socket+":"+socket), "-v /etc/kubernetes:/etc/kubernetes", env,
		shellquote.Quote(image), "agent --server " + shellquote.Quote(server), "--ca-checksum " + shellquote.Quote(checksum),
		"--address " + shellquote.Quote(n.Address)}
	if n.InternalAddress != "" && n.InternalAddress != n.Address {
		args = append(args, "--internal-address "+shellquote.Quote(n.InternalAddress))
	}
	if socket != "/var/run/docker.sock" {
		args = append(args, "--docker-socket "+shellquote.Quote(socket))
	}
	return strings.Join(args, " ")
}
