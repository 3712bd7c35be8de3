package agenttun

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rigger/rigger/transport"
)

// The peer relay: rigger serve's replicas share the clusters (a Lease
// each) and the agent tunnel's CA and records (a shared Backend), while
// each node's agent reaches one replica, the one its connection to the
// endpoint's Service lands on. A replica that needs a node whose tunnel is
// on another replica asks its peers, and the one that holds the tunnel
// carries the stream: each dial is a WebSocket to that peer's PathPeer,
// authenticated by a peer certificate of the shared CA, which the peer
// joins to a stream of the node's tunnel, as Rancher's remotedialer peers
// do.

// PathPeer is where a replica reaches a node through the replica that
// holds its tunnel: GET ?node=&network=&addr= with a peer certificate,
// upgraded to a WebSocket carrying the stream's bytes; with probe=1, 204
// when the tunnel is here and nothing more.
const PathPeer = "/v1/peer"

// peerOrganization marks the peer certificates the CA issues to serve's
// replicas, which only a holder of the CA's key can issue: a node's
// certificate (nodeOrganization) never passes for one.
const peerOrganization = "rigger:serve-peers"

// PeerValidity is how long a replica's peer certificate is valid; a
// replica signs a new one before it expires.
const PeerValidity = 7 * 24 * time.Hour

// Peer is another replica of rigger serve on the same Backend.
type Peer struct {
	// ID names it in messages.
	ID string
	// URL is where this cluster's Server is mounted on its agent
	// endpoint (https://10.42.1.7:9443/agent/<cluster_name>); its serving
	// certificate names the host.
	URL string
}

// codeNotHere answers a peer asking for a node whose tunnel is not here.
const codeNotHere = "not_here"

// peerProbeTimeout bounds each look for the peer holding a node's tunnel.
const peerProbeTimeout = 3 * time.Second

// peerCert issues a client certificate naming replica id as a peer.
func (ca *CA) peerCert(id string, now time.Time) (tls.Certificate, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: id, Organization: []string{peerOrganization}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(PeerValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, "the replica's peer certificate")
}

// PeerClient dials the peers of a replica with its peer certificate,
// trusting the CA alone: it is shared by the Servers of every cluster.
type PeerClient struct {
	ca  *CA
	id  string
	now func() time.Time

	mu   sync.Mutex
	cert tls.Certificate
	hc   *http.Client
}

// NewPeerClient is the peer client of replica id, with store's CA.
func NewPeerClient(store *Store, id string) *PeerClient {
	return &PeerClient{ca: store.CA(), id: id, now: time.Now}
}

// client is the HTTP client to the peers, with a peer certificate that is
// not about to expire.
func (p *PeerClient) client() (*http.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.hc != nil && now.Before(p.cert.Leaf.NotAfter.Add(-PeerValidity/2)) {
		return p.hc, nil
	}
	cert, err := p.ca.peerCert(p.id, now)
	if err != nil {
		return nil, err
	}
	if p.hc != nil {
		p.hc.CloseIdleConnections()
	}
	p.cert = cert
	p.hc = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			RootCAs:      p.ca.pool(),
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"http/1.1"},
		},
		TLSHandshakeTimeout: HandshakeTimeout,
		MaxIdleConnsPerHost: 4,
	}}
	return p.hc, nil
}

// peerURL is the URL of path on peer for node (and what to dial).
func peerURL(peer Peer, node, network, addr string, probe bool) string {
	q := url.Values{"node": {node}}
	if probe {
		q.Set("probe", "1")
	} else {
		q.Set("network", network)
		q.Set("addr", addr)
	}
	return peer.URL + PathPeer + "?" + q.Encode()
}

// findPeer asks the peers at once which holds node's tunnel: the first
// that says so, or nil.
func (s *Server) findPeer(ctx context.Context, node string) *Peer {
	if s.cfg.Peers == nil || s.cfg.PeerClient == nil {
		return nil
	}
	peers := s.cfg.Peers()
	if len(peers) == 0 {
		return nil
	}
	hc, err := s.cfg.PeerClient.client()
	if err != nil {
		s.log.Error("agent tunnel: the peer certificate", "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, peerProbeTimeout)
	defer cancel()
	found := make(chan *Peer, len(peers))
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL(p, node, "", "", true), nil)
			if err != nil {
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				s.log.Debug("agent tunnel: ask a peer for a node's tunnel", "peer", p.ID, "node", node, "err", err)
				return
			}
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				found <- &p
			}
		})
	}
	go func() { wg.Wait(); close(found) }()
	p := <-found // the first, or nil once every peer answered
	return p
}

// dialPeer opens a stream to addr on node through peer's tunnel of node.
// A peer that no longer holds the tunnel is errNotHere.
func (s *Server) dialPeer(ctx context.Context, peer *Peer, node, network, addr string) (net.Conn, error) {
	hc, err := s.cfg.PeerClient.client()
	if err != nil {
		return nil, err
	}
	c, resp, err := websocket.Dial(ctx, peerURL(*peer, node, network, addr, false), &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var r refusal
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			json.Unmarshal(b, &r)
			switch {
			case r.Code == codeNotHere:
				return nil, errNotHere
			case resp.StatusCode == http.StatusBadGateway && r.Message != "":
				// The agent refused the dial (not a port it allows).
				return nil, &transport.DialError{Node: node, Network: network, Addr: addr, Err: errors.New(r.Message)}
			}
			return nil, fmt.Errorf("node %s: through replica %s: %s %s", node, peer.ID, resp.Status, r.Message)
		}
		return nil, fmt.Errorf("node %s: through replica %s: %w", node, peer.ID, err)
	}
	c.SetReadLimit(peerReadLimit)
	return newTunnelConn(context.Background(), c), nil
}

// errNotHere is a peer that does not hold the node's tunnel (any more).
var errNotHere = errors.New("the node's tunnel is not on that replica")

// peerReadLimit bounds a message of the peer relay: each is one write of
// the stream's copy (io.Copy's 32 KiB).
const peerReadLimit = 64 << 10

// servePeer carries a stream of a node's tunnel here for another replica.
func (s *Server) servePeer(w http.ResponseWriter, r *http.Request) {
	if s.isClosed() {
		refuse(w, http.StatusServiceUnavailable, codeClosed, "the server is shutting down")
		return
	}
	var cert *x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert = r.TLS.VerifiedChains[0][0]
	}
	if cert == nil || !slices.Equal(cert.Subject.Organization, []string{peerOrganization}) {
		refuse(w, http.StatusForbidden, codeNotYourself, "the peer relay serves rigger serve's replicas alone (a peer certificate of this CA)")
		return
	}
	q := r.URL.Query()
	node, network, addr := q.Get("node"), q.Get("network"), q.Get("addr")
	s.mu.Lock()
	var sess *session
	if n := s.nodes[node]; n != nil {
		sess = n.sess
	}
	s.mu.Unlock()
	if sess == nil {
		refuse(w, http.StatusNotFound, codeNotHere, fmt.Sprintf("node %s's tunnel is not on this replica", node))
		return
	}
	if q.Get("probe") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if network != "tcp" && network != "unix" || addr == "" {
		refuse(w, http.StatusBadRequest, codeBadRequest, "give network (tcp or unix) and addr")
		return
	}
	dctx, cancel := context.WithTimeout(r.Context(), RequestTimeout)
	st, err := s.dialStream(dctx, sess, network, addr)
	cancel()
	var de *transport.DialError
	switch {
	case errors.As(err, &de):
		refuse(w, http.StatusBadGateway, codeBadRequest, de.Err.Error())
		return
	case err != nil:
		refuse(w, http.StatusNotFound, codeNotHere, err.Error())
		return
	}
	defer st.Close()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(peerReadLimit)
	conn := newTunnelConn(context.Background(), c)
	defer conn.Close()
	s.log.Debug("agent tunnel: a stream carried for a peer", "peer", cert.Subject.CommonName, "node", node, "addr", addr)
	// Either side's end, or the server's, ends both.
	done := make(chan struct{}, 2)
	go func() { io.Copy(conn, st); done <- struct{}{} }()
	go func() { io.Copy(st, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-s.done:
	}
}
