package agenttun

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/docker/docker/client"
	"github.com/libp2p/go-yamux/v5"

	"github.com/rigger/rigger/transport"
)

var _ transport.Transport = (*Server)(nil)

// DefaultConnectWait is how long a call to a declared node whose agent is
// not connected waits for it to connect (after a restart of the server,
// agents come back within their backoff).
const DefaultConnectWait = 10 * time.Second

// maxJoinBody bounds a join request.
const maxJoinBody = 64 << 10

// Node is a node the server admits: declared in cluster.yml with
// `transport: agent`.
type Node struct {
	Name string // the node as rigger names it (its address in cluster.yml)
	// DockerSocket is the path of the Docker socket on the node.
	DockerSocket string
}

// Config is what a Server needs.
type Config struct {
	// Cluster is the cluster_name of the cluster whose nodes the server
	// admits: only tokens and certificates of that cluster are accepted.
	Cluster string
	// Store holds the CA, the tokens and the nodes' certificates.
	Store *Store
	// Nodes are admitted; see Server.SetNodes.
	Nodes []Node
	// KeepaliveInterval: DefaultKeepaliveInterval when zero.
	KeepaliveInterval time.Duration
	// ConnectWait: DefaultConnectWait when zero.
	ConnectWait time.Duration
	// Answers is the pool the weight of the nodes' Docker answers is
	// drawn from, shared with the other clusters' servers and transports
	// (nil: each node has its budget only; see transport.AnswerPool).
	Answers *transport.AnswerPool
	// Peers are the other replicas of rigger serve on the same Store,
	// whose endpoints a node's agent may reach instead of this one, and
	// PeerClient dials them: a node whose tunnel is not here is reached
	// through the peer that holds it (peer.go). Nil: none.
	Peers      func() []Peer
	PeerClient *PeerClient
	Logger     *slog.Logger     // nil: discard
	Now        func() time.Time // nil: time.Now
}

// Server is the tunnel server of one cluster: it serves the join and the
// tunnels over HTTP (mount it under a listener that uses the CA's
// TLSConfig, without a proxy that terminates TLS in front: node
// certificates authenticate tunnels), and reaches the connected nodes as a
// transport.Transport.
type Server struct {
	cluster string
	store   *Store
	log     *slog.Logger
	now     func() time.Time
	cfg     Config
	mux     *http.ServeMux

	mu      sync.Mutex
	closed  bool
	done    chan struct{} // closed by Close
	nodes   map[string]*nodeState
	pending map[string]PendingAgent
	wg      sync.WaitGroup // live tunnels' handlers
	// refusals logs the joins refused for their token, a line a minute
	// at most.
	refusals *sampledLog
}

// nodeState is an admitted node and its tunnel.
type nodeState struct {
	name, socket string
	sess         *session      // nil while the agent is not connected
	up           chan struct{} // closed when sess is set
	lastSeen     time.Time
	// via is the peer that held the tunnel when last asked, while the
	// tunnel is not here.
	via        *Peer
	journal    []JoinStep // the join as the server saw it (journal.go)
	dockerLock chan struct{}
	docker     *client.Client
}

// session is one agent's tunnel.
type session struct {
	node     string
	mux      *yamux.Session
	remote   string
	hostname string
	since    time.Time
}

// NewServer returns a server that admits cfg.Nodes. It revokes no
// certificate: SetNodes does, so that a server made before its cluster.yml
// is read does not revoke its nodes.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Cluster == "" {
		return nil, errors.New("agent tunnel server: no store or no cluster")
	}
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if cfg.ConnectWait <= 0 {
		cfg.ConnectWait = DefaultConnectWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		cluster: cfg.Cluster, store: cfg.Store, log: cfg.Logger.With("cluster", cfg.Cluster), now: cfg.Now, cfg: cfg,
		done: make(chan struct{}), nodes: map[string]*nodeState{}, pending: map[string]PendingAgent{},
	}
	s.refusals = newSampledLog(s.log, refusalLogInterval, "agent joins refused: the join token is not valid (unknown, used, expired, or for another node or cluster)")
	s.setNodes(cfg.Nodes, false)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET "+PathCACerts, s.serveCACerts)
	s.mux.HandleFunc("POST "+PathJoin, s.serveJoin)
	s.mux.HandleFunc("GET "+PathConnect, s.serveConnect)
	s.mux.HandleFunc("GET "+PathPeer, s.servePeer)
	return s, nil
}

// ServeHTTP serves PathCACerts, PathJoin, PathConnect and PathPeer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetNodes replaces the admitted nodes. The tunnel of a node no longer
// admitted is closed, and the certificate of every node of the cluster not
// admitted is revoked (also of nodes removed while the server was not
// running): declared again, a node must join again with a token.
func (s *Server) SetNodes(nodes []Node) { s.setNodes(nodes, true) }

// Admit replaces the admitted nodes as SetNodes does, but revokes no
// certificate: for a replica of serve that does not hold the cluster,
// which admits the nodes its cluster.yml declares for the holder to reach
// through it, while the holder revokes (it knows the nodes still to clean).
func (s *Server) Admit(nodes []Node) { s.setNodes(nodes, false) }

func (s *Server) setNodes(nodes []Node, revoke bool) {
	s.mu.Lock()
	var gone []*nodeState
	var closers []func()
	want := map[string]Node{}
	for _, n := range nodes {
		want[n.Name] = n
	}
	for name, st := range s.nodes {
		if n, ok := want[name]; !ok || n.DockerSocket != st.socket {
			delete(s.nodes, name)
			if !ok {
				gone = append(gone, st)
			} else {
				closers = append(closers, st.detachLocked())
			}
		}
	}
	for name, n := range want {
		if _, ok := s.nodes[name]; !ok {
			s.nodes[name] = &nodeState{name: name, socket: n.DockerSocket, up: make(chan struct{}), dockerLock: make(chan struct{}, 1)}
			delete(s.pending, name)
		}
	}
	for _, st := range gone {
		closers = append(closers, st.detachLocked())
	}
	s.mu.Unlock()
	for _, c := range closers {
		c()
	}
	if !revoke {
		return
	}
	held, err := s.store.nodes(s.cluster)
	if err != nil {
		s.log.Error("find the certificates of nodes removed from cluster.yml, to revoke them", "err", err)
	}
	for _, node := range held {
		if _, ok := want[node]; ok {
			continue
		}
		if err := s.store.revoke(s.cluster, node); err != nil {
			s.log.Error("revoke the certificate of a node removed from cluster.yml", "node", node, "err", err)
			continue
		}
		s.log.Info("node removed from cluster.yml: its tunnel is closed and its certificate revoked", "node", node)
	}
}

// detachLocked takes the node's tunnel and Docker client from it and
// returns what closes them, to be called once the server's lock is
// released: closing a tunnel waits on its connection, which its peer
// controls.
func (n *nodeState) detachLocked() func() {
	sess, docker := n.sess, n.docker
	n.docker = nil
	return func() {
		if sess != nil {
			sess.mux.Close()
		}
		if docker != nil {
			docker.Close()
		}
	}
}

// AgentStatus is an admitted node's tunnel, for status.
type AgentStatus struct {
	Node      string
	Connected bool
	// Remote and Hostname are where the tunnel comes from, while connected.
	Remote, Hostname string
	// LastSeen is now while connected, when the tunnel was lost otherwise
	// (zero: never connected since the server started).
	LastSeen time.Time
	// Via is the replica of rigger serve that holds the tunnel, when it
	// is not this one (as last found: Remote and Hostname are unknown).
	Via string
}

// Agents is the state of every admitted node's tunnel, sorted by node.
func (s *Server) Agents() []AgentStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]AgentStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		a := AgentStatus{Node: n.name, LastSeen: n.lastSeen}
		switch {
		case n.sess != nil:
			a.Connected, a.Remote, a.Hostname, a.LastSeen = true, n.sess.remote, n.sess.hostname, s.now()
		case n.via != nil:
			a.Connected, a.Via, a.LastSeen = true, n.via.ID, s.now()
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b AgentStatus) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// PendingAgent is an agent that presented a valid token or certificate for
// a node not declared with `transport: agent`. It is never admitted by
// itself: declaring the node in cluster.yml admits it.
type PendingAgent struct {
	Node, Hostname, Remote string
	LastSeen               time.Time
	// Key is set for a join of a declared node that holds a valid
	// certificate: it waits for an operator's approval of that key
	// (rigger agent approve).
	Key string
}

// Pending lists the pending agents, sorted by node.
func (s *Server) Pending() []PendingAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PendingAgent, 0, len(s.pending))
	for _, p := range s.pending {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PendingAgent) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// maxPending bounds the pending list: a token holder cannot grow it
// without limit.
const maxPending = 50

func (s *Server) notePending(p PendingAgent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pending[p.Node]; ok || len(s.pending) < maxPending {
		s.pending[p.Node] = p
	}
}

func (s *Server) serveCACerts(w http.ResponseWriter, r *http.Request) {
	// Agents name their node (join step 2); nothing proves it: the
	// journal keeps it as an unproven step.
	if node := r.URL.Query().Get("node"); checkNodeName(node) == nil {
		s.note(node, JoinStep{Step: StepCAFetched, Remote: r.RemoteAddr, Unproven: true})
	}
	if r.ContentLength != 0 {
		// A fetch of the CA has no body: this one is not read, nor
		// waited for.
		w.Header().Set("Connection", "close")
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Write(s.store.CA().CertPEM())
}

// refuse answers a request with a refusal, and closes its connection: a
// body left unread is not waited for (net/http reads what is left of one
// before it answers on a connection it keeps).
func refuse(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(refusal{Code: code, Message: msg})
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// serveJoin checks the token first, so that nothing else is said to a
// client without one, then the node's admission, and issues the node's
// certificate.
func (s *Server) serveJoin(w http.ResponseWriter, r *http.Request) {
	if s.isClosed() {
		refuse(w, http.StatusServiceUnavailable, codeClosed, "the server is shutting down")
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	var rec TokenRecord
	var err error
	if ok {
		rec, err = s.store.checkToken(s.cluster, tok, s.now())
		if err != nil && !errors.Is(err, errBadToken) {
			s.log.Error("agent join: read the token's record", "err", err, "remote", r.RemoteAddr)
			refuse(w, http.StatusServiceUnavailable, codeUnavailable, "the server could not read its join tokens; the agent tries again")
			return
		}
	}
	badToken := func() {
		s.refusals.note(r.RemoteAddr)
		refuse(w, http.StatusUnauthorized, codeBadToken, errBadToken.Error()+": ask for a new one (rigger agent command --node)")
	}
	if !ok || err != nil {
		// Nothing of a request without a valid token is read. The node
		// it names (in the URL, as the CA's fetch) goes in its journal,
		// unproven like the CA's fetch: a token refused is the most common
		// stop of a join.
		if node := r.URL.Query().Get("node"); checkNodeName(node) == nil {
			s.note(node, JoinStep{Step: StepJoinRefused, Remote: r.RemoteAddr, Unproven: true,
				Detail: errBadToken.Error() + ": issue a new one (rigger agent command --node " + node + ")"})
		}
		badToken()
		return
	}
	var req joinRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxJoinBody)).Decode(&req); err != nil {
		refuse(w, http.StatusBadRequest, codeBadRequest, "malformed join request")
		return
	}
	if err := errors.Join(checkNodeName(req.Node), checkHostname(req.Hostname)); err != nil {
		refuse(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	if req.Node != rec.Node {
		badToken() // the same refusal: it says nothing about the token's node
		return
	}
	log := s.log.With("node", req.Node, "remote", r.RemoteAddr, "hostname", req.Hostname)
	s.mu.Lock()
	n := s.nodes[req.Node]
	var holder *session
	if n != nil {
		holder = n.sess
	}
	s.mu.Unlock()
	if n == nil {
		s.notePending(PendingAgent{Node: req.Node, Hostname: req.Hostname, Remote: r.RemoteAddr, LastSeen: s.now()})
		log.Info("agent join pending: the node is not declared with transport: agent in cluster.yml")
		refuse(w, http.StatusForbidden, codePending, fmt.Sprintf("node %s is not declared in cluster.yml with "+
			"transport: agent; the agent is listed as pending and waits until it is", req.Node))
		return
	}
	if holder != nil {
		log.Warn("agent join refused: the node's tunnel is held", "holder", holder.remote)
		msg := fmt.Sprintf("node %s is connected from %s (host %q) since %s: "+
			"a node joins from one host only; stop the agent there first",
			req.Node, holder.remote, holder.hostname, holder.since.UTC().Format(time.RFC3339))
		s.note(req.Node, JoinStep{Step: StepJoinRefused, Remote: r.RemoteAddr, Hostname: req.Hostname, Detail: msg})
		refuse(w, http.StatusConflict, codeHeld, msg)
		return
	}
	key, err := csrKey([]byte(req.CSR))
	if err != nil {
		refuse(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	// A join never replaces a valid certificate by itself: whoever holds
	// a token would take the node's traffic and lock its agent out.
	held, valid, err := s.store.validCert(s.cluster, req.Node, s.now())
	if err != nil {
		log.Error("agent join: read the node's certificate record", "err", err)
		refuse(w, http.StatusServiceUnavailable, codeUnavailable, "the server could not read the node's records; the agent tries again")
		return
	}
	if valid {
		approved, err := s.store.askApproval(Approval{Cluster: s.cluster, Node: req.Node, Hostname: req.Hostname,
			Remote: r.RemoteAddr, Key: key, Requested: s.now().UTC()})
		if !approved {
			s.notePending(PendingAgent{Node: req.Node, Hostname: req.Hostname, Remote: r.RemoteAddr, LastSeen: s.now(), Key: key})
			log.Warn("agent join waits for approval: the node holds a valid certificate", "key", key, "err", err)
			msg := fmt.Sprintf("node %s holds a valid certificate (issued %s): "+
				"a join does not replace it; the agent waits until an operator approves this join on the server "+
				"(rigger agent approve --node %s --key %.16s), or run the agent with the node's old state directory",
				req.Node, held.Issued.UTC().Format(time.RFC3339), req.Node, key)
			s.note(req.Node, JoinStep{Step: StepJoinRefused, Remote: r.RemoteAddr, Hostname: req.Hostname, Detail: msg})
			refuse(w, http.StatusConflict, codeApproval, msg)
			return
		}
		log.Info("agent join approved by an operator: the node's certificate is replaced", "key", key)
	}
	if err := s.store.useToken(tok); err != nil {
		badToken()
		return
	}
	cert, certPEM, err := s.store.CA().signNode(s.cluster, req.Node, []byte(req.CSR), s.now())
	if err != nil {
		refuse(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	if err := s.store.setNode(s.cluster, req.Node, serialString(cert), s.now(), cert.NotAfter); err != nil {
		log.Error("agent join: record the node's certificate", "err", err)
		http.Error(w, "the server could not record the node's certificate", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	delete(s.pending, req.Node)
	s.mu.Unlock()
	s.note(req.Node, JoinStep{Step: StepCertIssued, Remote: r.RemoteAddr, Hostname: req.Hostname})
	log.Info("agent joined: certificate issued", "serial", serialString(cert))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(joinResponse{Cert: string(certPEM)})
}

// csrKey is the hex SHA-256 of the public key of a PEM certificate
// request whose signature holds.
func csrKey(csrPEM []byte) (string, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return "", errors.New("csr: no CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return "", fmt.Errorf("csr: %w", err)
	}
	sum := sha256.Sum256(csr.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:]), nil
}

// maxHostname bounds the host name an agent reports (RFC 1035's bound
// for a name), so that pending agents cannot bloat status.yml.
const maxHostname = 253

// checkHostname refuses what no host name is; empty is allowed (the agent
// could not tell).
func checkHostname(h string) error {
	if len(h) > maxHostname {
		return fmt.Errorf("the host name is %d bytes, more than the %d a host name may have", len(h), maxHostname)
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return fmt.Errorf("the host name %q holds a character no host name has", h)
		}
	}
	return nil
}

// checkNodeName refuses names no cluster.yml address can be.
func checkNodeName(n string) error {
	if n == "" || len(n) > 253 {
		return errors.New("the node name must be 1 to 253 characters (the node's address in cluster.yml)")
	}
	for _, r := range n {
		if r <= ' ' || r == 0x7f || r > 0x7e {
			return fmt.Errorf("the node name %q holds a character no address has", n)
		}
	}
	return nil
}

// serveConnect authenticates a tunnel by its client certificate alone and
// serves it until it ends.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	if s.isClosed() {
		refuse(w, http.StatusServiceUnavailable, codeClosed, "the server is shutting down")
		return
	}
	node := r.URL.Query().Get("node")
	var cert *x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert = r.TLS.VerifiedChains[0][0]
	}
	if cert == nil || !slices.Contains(cert.Subject.Organization, nodeOrganization) {
		refuse(w, http.StatusUnauthorized, codeRevoked, "no node certificate of this server was presented: "+
			"join first (and keep TLS end to end: no proxy may terminate it in front of the tunnel endpoint)")
		return
	}
	certNode := cert.Subject.CommonName
	log := s.log.With("node", certNode, "remote", r.RemoteAddr)
	if certCluster := cert.Subject.OrganizationalUnit; !slices.Equal(certCluster, []string{s.cluster}) {
		log.Warn("agent tunnel refused: another cluster's certificate", "cert_cluster", certCluster)
		msg := fmt.Sprintf("the certificate presented is for cluster %v, not %s: check --server", certCluster, s.cluster)
		s.note(certNode, JoinStep{Step: StepTunnelRefused, Remote: r.RemoteAddr, Detail: msg})
		refuse(w, http.StatusForbidden, codeNotYourself, msg)
		return
	}
	if node != certNode {
		log.Warn("agent tunnel refused: a node's certificate used for another node", "claimed", node)
		msg := fmt.Sprintf("the certificate presented is node %s's, not node %s's: a node can only open its own tunnel", certNode, node)
		s.note(node, JoinStep{Step: StepTunnelRefused, Remote: r.RemoteAddr, Detail: msg})
		refuse(w, http.StatusForbidden, codeNotYourself, msg)
		return
	}
	serial, err := s.store.nodeSerial(s.cluster, node)
	if err != nil {
		log.Error("agent tunnel: read the node's certificate record", "err", err)
		refuse(w, http.StatusServiceUnavailable, codeUnavailable, "the server could not read the node's records; the agent tries again")
		return
	}
	if serialString(cert) != serial {
		log.Warn("agent tunnel refused: the certificate was replaced or revoked")
		msg := fmt.Sprintf("the certificate of node %s was replaced or revoked: remove the agent's state directory and join again with a new token", node)
		s.note(node, JoinStep{Step: StepTunnelRefused, Remote: r.RemoteAddr, Detail: msg})
		refuse(w, http.StatusUnauthorized, codeRevoked, msg)
		return
	}
	hostname := r.Header.Get(headerHostname)
	if err := checkHostname(hostname); err != nil {
		refuse(w, http.StatusBadRequest, codeBadRequest, "header "+headerHostname+": "+err.Error())
		return
	}
	s.mu.Lock()
	n := s.nodes[node]
	s.mu.Unlock()
	if n == nil {
		s.notePending(PendingAgent{Node: node, Hostname: hostname, Remote: r.RemoteAddr, LastSeen: s.now()})
		refuse(w, http.StatusForbidden, codePending, fmt.Sprintf("node %s is not declared in cluster.yml with "+
			"transport: agent; the agent is listed as pending and waits until it is", node))
		return
	}
	// The request's deadlines (NewHTTPServer) do not bound the tunnel,
	// which its pings watch from now on.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		log.Warn("agent tunnel: websocket handshake", "err", err)
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mux, err := yamux.Client(newTunnelConn(ctx, c), muxConfig(s.cfg.KeepaliveInterval, serverIncomingStreams, s.log),
		newWindowBudget(tunnelWindowBudget))
	if err != nil {
		log.Error("agent tunnel: start the multiplexer", "err", err)
		return
	}
	defer mux.Close()
	sess := &session{node: node, mux: mux, remote: r.RemoteAddr, hostname: hostname, since: s.now()}
	if !s.attach(n, sess) {
		return
	}
	defer s.wg.Done()
	log.Info("agent tunnel up", "hostname", hostname)
	select {
	case <-mux.CloseChan():
	case <-s.done:
	}
	s.detach(n, sess)
	log.Info("agent tunnel down")
}

// Deadlines of the tunnel endpoint's listener (NewHTTPServer): the TLS
// handshake and a request's headers must come within HandshakeTimeout,
// the rest of the request (a join's body) and its answer within
// RequestTimeout, the next request on a kept-alive connection within
// IdleTimeout, so that connections that say nothing, or say it a byte at a
// time, are not held. A tunnel, once its certificate is checked, is a
// hijacked connection they do not bound: its pings find a dead one.
const (
	HandshakeTimeout = 10 * time.Second
	RequestTimeout   = 5 * time.Second
	IdleTimeout      = 15 * time.Second
	maxHeaderBytes   = 64 << 10
)

// NewHTTPServer is the HTTP server to serve h (a Server, or what routes to
// Servers) on a TLS listener with cfg: with the endpoint's deadlines, set
// on each request (the tunnel's lifts them once authenticated), and
// HTTP/1.1 only, which agents speak: HTTP/2 would keep a connection open
// for as many requests as a client likes.
func NewHTTPServer(h http.Handler, cfg *tls.Config) *http.Server {
	return newHTTPServer(h, cfg, HandshakeTimeout, RequestTimeout)
}

func newHTTPServer(h http.Handler, cfg *tls.Config, handshake, request time.Duration) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	bounded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		d := time.Now().Add(request)
		_ = rc.SetReadDeadline(d)
		_ = rc.SetWriteDeadline(d)
		h.ServeHTTP(w, r)
	})
	// Not a line for every connection that fails its TLS handshake: anyone
	// can open them. An agent that cannot join says why in its own log.
	return &http.Server{Handler: bounded, TLSConfig: cfg, ReadHeaderTimeout: handshake,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: maxHeaderBytes, Protocols: &protocols,
		ErrorLog: log.New(io.Discard, "", 0)}
}

// headerHostname carries the agent's host name on PathConnect, for
// messages only.
const headerHostname = "X-Rigger-Agent-Hostname"

// attach makes sess the node's tunnel, closing the one it replaces: the
// newest authenticated tunnel of a node wins. The old tunnel is closed
// after the lock is released: its peer may make that slow.
func (s *Server) attach(n *nodeState, sess *session) bool {
	s.mu.Lock()
	if s.closed || s.nodes[n.name] != n {
		s.mu.Unlock()
		return false
	}
	old := n.sess
	if old != nil {
		s.log.Info("agent tunnel replaced by a newer one", "node", n.name, "old", old.remote, "new", sess.remote)
	} else {
		close(n.up)
	}
	n.sess, n.via = sess, nil
	s.noteLocked(n, JoinStep{Step: StepTunnelUp, Remote: sess.remote, Hostname: sess.hostname})
	s.wg.Add(1)
	s.mu.Unlock()
	if old != nil {
		old.mux.Close()
	}
	return true
}

func (s *Server) detach(n *nodeState, sess *session) {
	sess.mux.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.sess == sess {
		n.sess = nil
		n.up = make(chan struct{})
		n.lastSeen = s.now()
		s.noteLocked(n, JoinStep{Step: StepTunnelLost, Remote: sess.remote, Hostname: sess.hostname})
	}
}

// NotConnectedError means a node declared with the agent transport has no
// tunnel: its agent is not running, cannot reach the server, or has not
// joined.
type NotConnectedError struct {
	Node string
	// LastSeen is when its last tunnel ended; zero: none since the server
	// started.
	LastSeen time.Time
	Waited   time.Duration
	// Peers is how many other replicas were asked for the tunnel.
	Peers int
	Err   error // what broke the tunnel, if it broke during the call
	// Journal is the node's join as the server saw it, oldest first, and
	// Next where it stopped and what to do.
	Journal []JoinStep
	Next    string
}

func (*NotConnectedError) TransportNodeError() {}

func (e *NotConnectedError) Error() string {
	seen := "no tunnel since the server started"
	if !e.LastSeen.IsZero() {
		seen = "last tunnel ended " + e.LastSeen.UTC().Format(time.RFC3339)
	}
	msg := fmt.Sprintf("node %s: its agent is not connected (%s; waited %s): check that the agent runs on the node "+
		"(docker logs rigger-agent) and reaches the server; its log says which join step fails", e.Node, seen, e.Waited)
	if e.Peers > 0 {
		msg += fmt.Sprintf(" (none of the %d other replicas holds its tunnel either)", e.Peers)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Next != "" {
		msg += "; " + e.Next
	}
	if len(e.Journal) > 0 {
		msg += "; the join as the server saw it: " + journalText(e.Journal)
	}
	return msg
}

func (e *NotConnectedError) Unwrap() error { return e.Err }

// peerRetry is how often a wait for a node's tunnel asks the peers again.
const peerRetry = time.Second

// tunnel returns node's tunnel here, or the peer that holds it, waiting up
// to ConnectWait for either.
func (s *Server) tunnel(ctx context.Context, node string) (*nodeState, *session, *Peer, error) {
	var timer, retry <-chan time.Time
	start := time.Now()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, nil, nil, fmt.Errorf("node %s: %w", node, transport.ErrClosed)
		}
		n := s.nodes[node]
		if n == nil {
			s.mu.Unlock()
			return nil, nil, nil, fmt.Errorf("node %s: %w", node, transport.ErrUnknownNode)
		}
		sess, via, up, lastSeen := n.sess, n.via, n.up, n.lastSeen
		s.mu.Unlock()
		if sess != nil {
			return n, sess, nil, nil
		}
		if via == nil {
			via = s.findPeer(ctx, node)
			s.setVia(n, nil, via)
		}
		if via != nil {
			return n, nil, via, nil
		}
		if timer == nil {
			t := time.NewTimer(s.cfg.ConnectWait)
			defer t.Stop()
			timer = t.C
			if s.cfg.Peers != nil {
				tk := time.NewTicker(peerRetry)
				defer tk.Stop()
				retry = tk.C
			}
		}
		peers := 0
		if s.cfg.Peers != nil {
			peers = len(s.cfg.Peers())
		}
		select {
		case <-up:
		case <-retry:
		case <-timer:
			journal := s.Journal(node)
			return nil, nil, nil, &NotConnectedError{Node: node, LastSeen: lastSeen, Waited: s.cfg.ConnectWait, Peers: peers,
				Journal: journal, Next: nextStep(journal, s.certState(node))}
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, nil, nil, fmt.Errorf("node %s: wait for its agent: %w", node, ctx.Err())
			}
			// The caller's time ran out first: the agent is not
			// connected all the same (rigger doctor places it so).
			journal := s.Journal(node)
			return nil, nil, nil, &NotConnectedError{Node: node, LastSeen: lastSeen, Waited: time.Since(start).Round(time.Millisecond),
				Peers: peers, Err: ctx.Err(), Journal: journal, Next: nextStep(journal, s.certState(node))}
		case <-s.done:
		}
	}
}

// setVia records that peer holds n's tunnel (nil: none known), unless
// another was recorded since was.
func (s *Server) setVia(n *nodeState, was, peer *Peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.via == was {
		n.via = peer
	}
}

// Dial connects to addr as seen from the node; see transport.Transport.
// The agent refuses what it does not allow with a *transport.DialError.
func (s *Server) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
		network = "tcp"
	case "unix":
	default:
		return nil, fmt.Errorf("node %s: dial %s %s: network not supported by the agent tunnel", node, network, addr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("node %s: dial %s: %w", node, addr, err)
	}
	var err error
	for range 2 {
		var n *nodeState
		var sess *session
		var peer *Peer
		if n, sess, peer, err = s.tunnel(ctx, node); err != nil {
			return nil, err
		}
		if sess != nil {
			return s.dialStream(ctx, sess, network, addr)
		}
		var conn net.Conn
		conn, err = s.dialPeer(ctx, peer, node, network, addr)
		var de *transport.DialError
		if err == nil || errors.As(err, &de) || ctx.Err() != nil {
			return conn, err
		}
		// The tunnel moved (its agent connected elsewhere), or the peer
		// is gone: look again, once.
		s.log.Debug("agent tunnel: through a peer", "node", node, "peer", peer.ID, "err", err)
		s.setVia(n, peer, nil)
	}
	return nil, &NotConnectedError{Node: node, LastSeen: s.now(), Err: err}
}

func (s *Server) dialStream(ctx context.Context, sess *session, network, addr string) (net.Conn, error) {
	st, err := sess.mux.OpenStream(ctx)
	if err != nil {
		return nil, &NotConnectedError{Node: sess.node, LastSeen: s.now(), Err: err}
	}
	// A stream's request and reply take one round trip; ctx bounds it.
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Now()) })
	if dl, ok := ctx.Deadline(); ok {
		st.SetDeadline(dl)
	}
	var reply streamReply
	err = writeFrame(st, streamRequest{Network: network, Addr: addr})
	if err == nil {
		err = readFrame(st, &reply)
	}
	if !stop() || ctx.Err() != nil {
		st.Close()
		return nil, fmt.Errorf("node %s: dial %s %s: %w", sess.node, network, addr, ctx.Err())
	}
	if err != nil {
		st.Close()
		return nil, &NotConnectedError{Node: sess.node, LastSeen: s.now(), Err: fmt.Errorf("open a stream: %w", err)}
	}
	if reply.Error != "" {
		st.Close()
		return nil, &transport.DialError{Node: sess.node, Network: network, Addr: addr, Err: errors.New(reply.Error)}
	}
	st.SetDeadline(time.Time{})
	return st, nil
}

// Docker returns the node's Docker client; see transport.Transport. The
// client outlives tunnels: each request goes through the node's tunnel of
// the moment.
func (s *Server) Docker(ctx context.Context, node string) (*client.Client, error) {
	n, _, _, err := s.tunnel(ctx, node)
	if err != nil {
		return nil, err
	}
	select {
	case n.dockerLock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-n.dockerLock }()
	s.mu.Lock()
	cli := n.docker
	s.mu.Unlock()
	if cli != nil {
		return cli, nil
	}
	cli, err = transport.NewDockerClient(node, n.socket, func(ctx context.Context, network, addr string) (net.Conn, error) {
		return s.Dial(ctx, node, network, addr)
	}, s.cfg.Answers)
	if err != nil {
		return nil, err
	}
	// The version is not kept: the client outlives the tunnels, and the
	// next tunnel may come from an upgraded engine.
	if _, err := transport.CheckDocker(ctx, node, cli); err != nil {
		cli.Close()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.nodes[node] != n {
		cli.Close()
		return nil, fmt.Errorf("node %s: %w", node, transport.ErrClosed)
	}
	n.docker = cli
	return cli, nil
}

// Close closes every tunnel and Docker client and refuses new ones; it
// waits for the tunnels' handlers to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.refusals.stop()
	var closers []func()
	for _, n := range s.nodes {
		closers = append(closers, n.detachLocked())
	}
	s.mu.Unlock()
	for _, c := range closers {
		c()
	}
	s.wg.Wait()
	return nil
}
