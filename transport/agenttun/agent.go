package agenttun

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-yamux/v5"
)

// Reconnection backoff of an agent: the wait after the first failure,
// doubling with each failure in a row up to the maximum; each wait is
// drawn between half of that and all of it, so that agents that lost the
// server together do not come back together.
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = time.Minute
)

// Limits of one stream on the agent.
const (
	streamRequestTimeout = 10 * time.Second
	localDialTimeout     = 10 * time.Second
	maxCACertBytes       = 64 << 10
)

// Files of an agent's state directory, which holds its credentials.
const (
	agentCAFile   = "ca.pem"
	agentCertFile = "node.pem"
	agentKeyFile  = "node-key.pem"
)

// AgentConfig is what an Agent needs; the flags of `rigger agent` fill it.
type AgentConfig struct {
	// Server is the tunnel endpoint's base URL (https://host:port/agent).
	Server string
	// Token is the join token; needed only while the agent holds no
	// certificate in StateDir.
	Token string
	// CAChecksum is the hex SHA-256 of the server's CA (see Checksum).
	CAChecksum string
	// Node is the node's name in cluster.yml (its address).
	Node string
	// Addresses are the node's own addresses (address, internal
	// address): besides loopback, the only hosts dials may go to.
	Addresses []string
	// DockerSocket is the only Unix socket dials may go to.
	DockerSocket string
	// AllowPorts are the only TCP ports dials may go to.
	AllowPorts []int
	// StateDir keeps the node's credentials; "" keeps them in memory.
	StateDir string
	// Hostname names the host in the server's messages (os.Hostname when
	// empty).
	Hostname string

	KeepaliveInterval       time.Duration // DefaultKeepaliveInterval when zero
	BackoffBase, BackoffMax time.Duration // the defaults when zero
	Logger                  *slog.Logger  // nil: discard
}

// Agent is the node's side of the tunnel.
type Agent struct {
	cfg      AgentConfig
	log      *slog.Logger
	checksum string
	firstReq sync.Once
	key      *ecdsa.PrivateKey // the key joins ask a certificate for
}

// RefusedError is a refusal the agent must not retry: it exits with it.
type RefusedError struct {
	Step    string // "join" or "connect"
	Code    string
	Message string
}

func (e *RefusedError) Error() string { return e.Step + " refused by the server: " + e.Message }

// ChecksumError means the server's CA is not the one --ca-checksum names:
// the agent stopped before sending its token.
type ChecksumError struct {
	Server    string
	Got, Want string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("the CA served by %s has SHA-256 %s, not the --ca-checksum %s: the token was not sent; "+
		"check the server URL and the checksum (rigger agent command prints both)", e.Server, e.Got, e.Want)
}

// NewAgent checks cfg.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	var errs []error
	u, err := url.Parse(cfg.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("--server %q: want an https:// URL of rigger serve's agent endpoint", cfg.Server))
	}
	sum := strings.ToLower(strings.TrimPrefix(cfg.CAChecksum, "sha256:"))
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		errs = append(errs, fmt.Errorf("--ca-checksum %q: want the 64 hex digits of a SHA-256", cfg.CAChecksum))
	}
	if err := checkNodeName(cfg.Node); err != nil {
		errs = append(errs, fmt.Errorf("--node-name: %w", err))
	}
	if cfg.DockerSocket == "" {
		errs = append(errs, errors.New("--docker-socket: empty"))
	}
	for _, p := range cfg.AllowPorts {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("allowed port %d: not a TCP port", p))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Server = strings.TrimSuffix(cfg.Server, "/")
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		cfg.BackoffMax = max(DefaultBackoffMax, cfg.BackoffBase)
	}
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, log: cfg.Logger.With("node", cfg.Node), checksum: sum}, nil
}

// credentials is what the agent connects with.
type credentials struct {
	caPEM []byte
	roots *x509.CertPool
	cert  tls.Certificate
}

// Run joins (unless StateDir holds the node's credentials) and keeps the
// tunnel up until ctx ends, dialling again with backoff whenever it drops.
// It returns a *ChecksumError or *RefusedError for what retrying cannot
// fix, ctx's error otherwise.
func (a *Agent) Run(ctx context.Context) error {
	a.log.Info("join step 1/4: flags checked", "server", a.cfg.Server, "docker_socket", a.cfg.DockerSocket,
		"allowed_ports", a.cfg.AllowPorts, "addresses", a.cfg.Addresses)
	b := backoff{base: a.cfg.BackoffBase, max: a.cfg.BackoffMax}
	creds, err := a.loadCredentials()
	if err != nil {
		return err
	}
	if creds != nil {
		a.log.Info("join steps 2-3/4: credentials found, CA matches --ca-checksum; no token needed", "dir", a.cfg.StateDir)
	}
	for creds == nil {
		creds, err = a.join(ctx)
		if err == nil {
			break
		}
		if isFinal(err) {
			return err
		}
		if err := b.wait(ctx, a.log, "join", err); err != nil {
			return err
		}
	}
	b.reset()
	first := true
	for {
		up, err := a.connect(ctx, creds, first)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if isFinal(err) {
			return err
		}
		if up {
			first = false
			b.reset()
		}
		if err == nil {
			err = errors.New("tunnel closed")
		}
		if err := b.wait(ctx, a.log, "connect", err); err != nil {
			return err
		}
	}
}

func isFinal(err error) bool {
	var re *RefusedError
	var ce *ChecksumError
	return errors.As(err, &re) || errors.As(err, &ce)
}

// loadCredentials reads the credentials of StateDir; nil when there are
// none for this node and CA.
func (a *Agent) loadCredentials() (*credentials, error) {
	if a.cfg.StateDir == "" {
		return nil, nil
	}
	read := func(name string) ([]byte, error) {
		return readCapped(filepath.Join(a.cfg.StateDir, name), maxCACertBytes)
	}
	caPEM, err := read(agentCAFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the agent's credentials: %w", err)
	}
	certPEM, err := read(agentCertFile)
	if err != nil {
		return nil, fmt.Errorf("read the agent's credentials: %w", err)
	}
	keyPEM, err := read(agentKeyFile)
	if err != nil {
		return nil, fmt.Errorf("read the agent's credentials: %w", err)
	}
	if Checksum(caPEM) != a.checksum {
		a.log.Info("the credentials in the state directory are for another CA: joining again", "dir", a.cfg.StateDir)
		return nil, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("read the agent's credentials in %s: %w", a.cfg.StateDir, err)
	}
	if cert.Leaf.Subject.CommonName != a.cfg.Node {
		a.log.Info("the credentials in the state directory are another node's: joining again",
			"dir", a.cfg.StateDir, "holder", cert.Leaf.Subject.CommonName)
		return nil, nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("read the agent's credentials: %s holds no certificate", agentCAFile)
	}
	return &credentials{caPEM: caPEM, roots: roots, cert: cert}, nil
}

func (a *Agent) saveCredentials(c *credentials, certPEM, keyPEM []byte) error {
	if a.cfg.StateDir == "" {
		return nil
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("save the agent's credentials: %w", err)
	}
	for name, b := range map[string][]byte{agentKeyFile: keyPEM, agentCertFile: certPEM, agentCAFile: c.caPEM} {
		if err := writeFile(filepath.Join(a.cfg.StateDir, name), b); err != nil {
			return fmt.Errorf("save the agent's credentials: %w", err)
		}
	}
	return nil
}

// join fetches and checks the CA, then sends the token with a CSR to the
// verified server.
func (a *Agent) join(ctx context.Context) (*credentials, error) {
	if a.cfg.Token == "" {
		return nil, &RefusedError{Step: "join", Code: codeBadRequest,
			Message: "no credentials in the state directory and no --token to join with"}
	}
	caPEM, err := a.fetchCA(ctx)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, &ChecksumError{Server: a.cfg.Server, Got: Checksum(caPEM) + " (and not a certificate)", Want: a.checksum}
	}
	a.log.Info("join step 2/4: CA fetched and matched --ca-checksum", "ca_checksum", a.checksum)

	key, err := a.joinKey()
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: a.cfg.Node}}, key)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(joinRequest{
		Node: a.cfg.Node, Hostname: a.cfg.Hostname,
		CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
	})
	// The node in the URL too: the server reads no body of a join whose
	// token it refuses, and names the node in its journal from there.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.Server+PathJoin+"?node="+url.QueryEscape(a.cfg.Node), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	hc := verifiedClient(roots, nil)
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refusalOf("join", resp)
	}
	var jr joinResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCACertBytes)).Decode(&jr); err != nil {
		return nil, fmt.Errorf("join: read the answer: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair([]byte(jr.Cert), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("join: the certificate issued: %w", err)
	}
	c := &credentials{caPEM: caPEM, roots: roots, cert: cert}
	if err := a.saveCredentials(c, []byte(jr.Cert), keyPEM); err != nil {
		return nil, err
	}
	a.log.Info("join step 3/4: token accepted, node certificate issued", "expires", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return c, nil
}

// joinKey is the key every join of the agent asks a certificate for: the
// same across tries and restarts (kept in StateDir), so that an
// operator's approval of a join (rigger agent approve) holds for the
// agent's next try.
func (a *Agent) joinKey() (*ecdsa.PrivateKey, error) {
	if a.key != nil {
		return a.key, nil
	}
	path := filepath.Join(a.cfg.StateDir, agentKeyFile)
	if a.cfg.StateDir != "" {
		if b, err := readCapped(path, maxCACertBytes); err == nil {
			if blk, _ := pem.Decode(b); blk != nil {
				if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
					a.key = k
					return k, nil
				}
			}
		}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if a.cfg.StateDir != "" {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("save the agent's key: %w", err)
		}
		if err := writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
			return nil, fmt.Errorf("save the agent's key: %w", err)
		}
	}
	a.key = k
	return k, nil
}

// fetchCA reads the server's CA without trusting anything yet and without
// sending anything secret, and checks its checksum.
func (a *Agent) fetchCA(ctx context.Context) ([]byte, error) {
	// The node's name lets the server's journal of the node's join show
	// this step (NotConnectedError).
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.cfg.Server+PathCACerts+"?node="+url.QueryEscape(a.cfg.Node), nil)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		// The answer is checked against --ca-checksum instead: nothing
		// secret goes over this connection.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the server's CA: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the server's CA: %s answered %s", a.cfg.Server+PathCACerts, resp.Status)
	}
	caPEM, err := io.ReadAll(io.LimitReader(resp.Body, maxCACertBytes))
	if err != nil {
		return nil, fmt.Errorf("fetch the server's CA: %w", err)
	}
	if got := Checksum(caPEM); got != a.checksum {
		return nil, &ChecksumError{Server: a.cfg.Server, Got: got, Want: a.checksum}
	}
	return caPEM, nil
}

// verifiedClient trusts roots alone and presents cert when given.
func verifiedClient(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: false}}
}

// refusalOf reads the server's refusal; refusals retrying cannot fix
// become a *RefusedError.
func refusalOf(step string, resp *http.Response) error {
	var r refusal
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if json.Unmarshal(b, &r) != nil || r.Message == "" {
		return fmt.Errorf("%s: the server answered %s", step, resp.Status)
	}
	switch r.Code {
	case codeBadToken, codeBadRequest, codeRevoked, codeNotYourself:
		return &RefusedError{Step: step, Code: r.Code, Message: r.Message}
	}
	return fmt.Errorf("%s: %s", step, r.Message)
}

// connect opens one tunnel and serves it until it ends. up says whether
// the tunnel came up.
func (a *Agent) connect(ctx context.Context, creds *credentials, first bool) (up bool, err error) {
	hc := verifiedClient(creds.roots, &creds.cert)
	defer hc.CloseIdleConnections()
	u := a.cfg.Server + PathConnect + "?node=" + url.QueryEscape(a.cfg.Node)
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: hc,
		HTTPHeader: http.Header{headerHostname: {a.cfg.Hostname}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return false, refusalOf("connect", resp)
		}
		return false, fmt.Errorf("connect: %w", err)
	}
	defer c.CloseNow()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mux, err := yamux.Server(newTunnelConn(sctx, c), muxConfig(a.cfg.KeepaliveInterval, agentIncomingStreams, a.log),
		newWindowBudget(tunnelWindowBudget))
	if err != nil {
		return false, err
	}
	defer mux.Close()
	if first {
		a.log.Info("join step 4/4: tunnel up")
	} else {
		a.log.Info("tunnel up again")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer mux.Close() // before wg.Wait: ends the streams
	for {
		st, err := mux.AcceptStream()
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("tunnel down", "err", err)
			}
			return true, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serveStream(st)
		}()
	}
}

// serveStream dials what the server asks for, if allowed, and carries
// the bytes both ways.
func (a *Agent) serveStream(st *yamux.Stream) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(streamRequestTimeout))
	var req streamRequest
	if err := readFrame(st, &req); err != nil {
		return
	}
	a.firstReq.Do(func() { a.log.Info("first request from the server received through the tunnel") })
	if err := a.allowed(req); err != nil {
		a.log.Warn("refused a dial the agent does not allow", "network", req.Network, "addr", req.Addr)
		writeFrame(st, streamReply{Error: err.Error()})
		return
	}
	local, err := net.DialTimeout(req.Network, req.Addr, localDialTimeout)
	if err != nil {
		writeFrame(st, streamReply{Error: err.Error()})
		return
	}
	defer local.Close()
	if err := writeFrame(st, streamReply{}); err != nil {
		return
	}
	st.SetDeadline(time.Time{})
	pipe(st, local)
}

// pipe copies both ways. The server's end of a stream closes it as a
// whole, so the stream's end closes the local connection; the local
// end's only half-closes the stream, so that the server reads what is in
// flight.
func pipe(st *yamux.Stream, local net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(st, local)
		st.CloseWrite() // half-close: FIN to the server
	}()
	io.Copy(local, st)
	local.Close()
	st.Close()
	<-done
}

// allowed is the agent's whole policy: its Docker socket, and the allowed
// ports on loopback and on the node's own addresses.
func (a *Agent) allowed(req streamRequest) error {
	switch req.Network {
	case "unix":
		if filepath.Clean(req.Addr) == filepath.Clean(a.cfg.DockerSocket) {
			return nil
		}
		return fmt.Errorf("the agent allows no Unix socket but its Docker socket %s (--docker-socket)", a.cfg.DockerSocket)
	case "tcp":
		host, port, err := net.SplitHostPort(req.Addr)
		if err != nil {
			return fmt.Errorf("malformed address %q", req.Addr)
		}
		p, err := strconv.Atoi(port)
		if err != nil || !slices.Contains(a.cfg.AllowPorts, p) {
			return fmt.Errorf("the agent does not allow port %s (allowed: %v)", port, a.cfg.AllowPorts)
		}
		ip := net.ParseIP(host)
		if host == "localhost" || (ip != nil && ip.IsLoopback()) || slices.Contains(a.cfg.Addresses, host) {
			return nil
		}
		return fmt.Errorf("the agent dials only loopback and the node's own addresses %v, not %s", a.cfg.Addresses, host)
	}
	return fmt.Errorf("network %q is not allowed", req.Network)
}

// backoff spaces out an agent's attempts.
type backoff struct {
	base, max time.Duration
	failures  int
}

func (b *backoff) reset() { b.failures = 0 }

// next is the wait after one more failure: the exponential bound, less a
// random share of up to half of it.
func (b *backoff) next() time.Duration {
	d := b.base
	for i := 0; i < b.failures && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.failures++
	return d/2 + mrand.N(d/2+1)
}

// wait logs why and sleeps the next backoff, or returns ctx's error.
func (b *backoff) wait(ctx context.Context, log *slog.Logger, step string, why error) error {
	d := b.next()
	log.Warn(step+" failed: retrying", "in", d.Round(time.Millisecond), "err", why)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
