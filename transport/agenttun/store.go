package agenttun

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Files of a Store's directory, each mode 0600. Each token is a file of
// its own in tokensDir, named for its hash, so that `rigger agent command`
// issues tokens while rigger serve runs; agents.json is written by serve
// alone.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	stateFile  = "agents.json"
	tokensDir  = "tokens"
	// approvalsDir holds the joins waiting for an operator's approval
	// (rigger agent approve), one file each.
	approvalsDir = "approvals"
)

// maxApprovals bounds the joins waiting for approval: beyond it a join is
// refused without being recorded.
const maxApprovals = 100

// maxTokenFile bounds a token's file when it is read back.
const maxTokenFile = 4096

// MaxTokenTTL bounds the life of a join token: a token is for one join
// soon, not a standing credential.
const MaxTokenTTL = 7 * 24 * time.Hour

// Sweeps of the store's directory: tokens that expired, and joins that
// wait for an approval no agent asks for any more (an agent asks again
// within a minute) or an approval not used, are removed, at most once in
// sweepInterval.
const (
	sweepInterval  = time.Hour
	approvalStale  = time.Hour
	approvedUnused = 24 * time.Hour
)

// tokenPrefix starts every join token, so that one is recognisable in a
// leak scanner.
const tokenPrefix = "rgt_"

// maxStateBytes bounds agents.json when it is read back.
const maxStateBytes = 16 << 20

// Store keeps what the tunnel servers of one rigger serve must remember
// across restarts: the CA they share (one TLS endpoint serves every
// cluster), the join tokens (their SHA-256 only: a token is shown once,
// when it is issued), each for one cluster, and the serial of each node's
// current certificate (an older certificate of the node, or one whose node
// was revoked, is refused). With an empty directory it keeps everything in
// memory. It is safe for concurrent use.
type Store struct {
	dir string
	ca  *CA

	mu        sync.Mutex
	state     storeState
	memTokens []TokenRecord // without a directory
	swept     time.Time     // the last sweep
}

type storeState struct {
	// Nodes are keyed by cluster and node: "cluster/node".
	Nodes map[string]*NodeRecord `json:"nodes"`
}

// TokenRecord is a join token as the store keeps it.
type TokenRecord struct {
	// SHA256 is the hex SHA-256 of the token; the token itself is not kept.
	SHA256  string `json:"sha256"`
	Cluster string `json:"cluster"`
	// Node is the only node the token joins.
	Node    string    `json:"node"`
	Created time.Time `json:"created"`
	// Expires is when the token stops being accepted.
	Expires time.Time `json:"expires"`
}

// NodeRecord is the credential a node holds.
type NodeRecord struct {
	// Serial is the hex serial of the node's current certificate; only
	// that certificate is accepted for the node.
	Serial string    `json:"serial"`
	Issued time.Time `json:"issued"`
	// Expires is the certificate's NotAfter (zero in records written
	// before it was kept: Issued + NodeValidity).
	Expires time.Time `json:"expires,omitzero"`
}

// OpenStore reads the store in dir, creating the directory and a new CA
// when the directory holds none. An empty dir keeps the store in memory.
func OpenStore(dir string, now time.Time) (*Store, error) {
	s := &Store{dir: dir, state: storeState{Nodes: map[string]*NodeRecord{}}}
	if dir == "" {
		ca, err := NewCA(now)
		if err != nil {
			return nil, err
		}
		s.ca = ca
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent tunnel state: %w", err)
	}
	certPEM, cerr := os.ReadFile(filepath.Join(dir, caCertFile))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, caKeyFile))
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		ca, err := NewCA(now)
		if err != nil {
			return nil, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(dir, caKeyFile), keyPEM); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(dir, caCertFile), ca.CertPEM()); err != nil {
			return nil, err
		}
		s.ca = ca
	case cerr != nil || kerr != nil:
		return nil, fmt.Errorf("agent tunnel state %s: the CA is incomplete (%w): restore %s and %s from a backup; "+
			"a new CA would make every agent's --ca-checksum wrong", dir, errors.Join(cerr, kerr), caCertFile, caKeyFile)
	default:
		ca, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("agent tunnel state %s: %w", dir, err)
		}
		s.ca = ca
	}
	b, err := readCapped(filepath.Join(dir, stateFile), maxStateBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("agent tunnel state: %w", err)
	default:
		if err := json.Unmarshal(b, &s.state); err != nil {
			return nil, fmt.Errorf("agent tunnel state %s: %w", filepath.Join(dir, stateFile), err)
		}
		if s.state.Nodes == nil {
			s.state.Nodes = map[string]*NodeRecord{}
		}
	}
	s.sweep(now)
	return s, nil
}

// sweep removes, at most once in sweepInterval, the tokens no join may
// use any more (expired, or past MaxTokenTTL, or unreadable) and the
// stale joins waiting for approval.
func (s *Store) sweep(now time.Time) {
	s.mu.Lock()
	if !s.swept.IsZero() && now.Sub(s.swept) < sweepInterval {
		s.mu.Unlock()
		return
	}
	s.swept = now
	s.memTokens = slices.DeleteFunc(s.memTokens, func(r TokenRecord) bool { return !r.usable(now) })
	s.mu.Unlock()
	if s.dir == "" {
		return
	}
	sweepDir(filepath.Join(s.dir, tokensDir), func(b []byte) bool {
		var r TokenRecord
		return json.Unmarshal(b, &r) != nil || !r.usable(now)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	sweepDir(filepath.Join(s.dir, approvalsDir), func(b []byte) bool {
		var a Approval
		switch {
		case json.Unmarshal(b, &a) != nil:
			return true
		case a.Approved:
			return now.Sub(a.Requested) > approvedUnused
		}
		return now.Sub(a.Requested) > approvalStale
	})
}

// sweepDir removes the JSON files of dir that gone says are (and those
// that cannot be read).
func sweepDir(dir string, gone func([]byte) bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if b, err := readCapped(p, maxTokenFile); err != nil || gone(b) {
			os.Remove(p)
		}
	}
}

// usable says whether a join may use the token at now: it names a node,
// has not expired, and its life is within MaxTokenTTL (an older rigger
// issued tokens of any life).
func (r TokenRecord) usable(now time.Time) bool {
	return r.Node != "" && !r.Expires.IsZero() && now.Before(r.Expires) && r.Expires.Sub(r.Created) <= MaxTokenTTL
}

// CA is the store's certificate authority.
func (s *Store) CA() *CA { return s.ca }

// IssueToken creates a join token for node of cluster, valid for ttl and
// for one join. The token is returned once and only its hash is kept.
func (s *Store) IssueToken(cluster, node string, ttl time.Duration, now time.Time) (string, error) {
	if ttl <= 0 || ttl > MaxTokenTTL {
		return "", fmt.Errorf("issue a join token: a token lives at most %s (ttl %s): it is for one join soon; issue another when the node is ready", MaxTokenTTL, ttl)
	}
	s.sweep(now)
	if err := checkNodeName(node); err != nil {
		return "", fmt.Errorf("issue a join token: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	rec := TokenRecord{SHA256: hashToken(tok), Cluster: cluster, Node: node, Created: now.UTC(), Expires: now.Add(ttl).UTC()}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.memTokens = append(s.memTokens, rec)
		return tok, nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(s.dir, tokensDir), 0o700); err != nil {
		return "", fmt.Errorf("issue a join token: %w", err)
	}
	if err := writeFile(filepath.Join(s.dir, tokensDir, rec.SHA256+".json"), b); err != nil {
		return "", fmt.Errorf("issue a join token: %w", err)
	}
	return tok, nil
}

// errBadToken is what checkToken returns for every refused token, so that
// a refusal says nothing about which tokens exist.
var errBadToken = errors.New("the join token is not valid for this node (unknown, used, expired, or for another node or cluster)")

// checkToken returns the record of tok if it was issued for cluster and
// has not expired. It does not use the token up: useToken does.
func (s *Store) checkToken(cluster, tok string, now time.Time) (TokenRecord, error) {
	if !strings.HasPrefix(tok, tokenPrefix) {
		return TokenRecord{}, errBadToken
	}
	s.sweep(now)
	// The hash of a 256-bit secret, looked up in variable time: that
	// tells an attacker nothing about a token.
	h := hashToken(tok)
	var recs []TokenRecord
	if s.dir == "" {
		s.mu.Lock()
		recs = slices.Clone(s.memTokens)
		s.mu.Unlock()
	} else {
		b, err := readCapped(filepath.Join(s.dir, tokensDir, h+".json"), maxTokenFile)
		if err != nil {
			return TokenRecord{}, errBadToken
		}
		var r TokenRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return TokenRecord{}, errBadToken
		}
		recs = append(recs, r)
	}
	for _, r := range recs {
		// A token without a node or an expiry, or of a life past
		// MaxTokenTTL (issued by an older rigger), is refused: issue a
		// new one.
		if r.SHA256 == h && r.Cluster == cluster && r.usable(now) {
			return r, nil
		}
	}
	return TokenRecord{}, errBadToken
}

// useToken uses tok up: of two joins with one token, one gets nil.
func (s *Store) useToken(tok string) error {
	h := hashToken(tok)
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := slices.IndexFunc(s.memTokens, func(r TokenRecord) bool { return r.SHA256 == h })
		if i < 0 {
			return errBadToken
		}
		s.memTokens = slices.Delete(s.memTokens, i, i+1)
		return nil
	}
	if err := os.Remove(filepath.Join(s.dir, tokensDir, h+".json")); err != nil {
		return errBadToken
	}
	return nil
}

// setNode records the certificate node holds from now on, valid until
// expires.
func (s *Store) setNode(cluster, node, serial string, now, expires time.Time) error {
	node = nodeKey(cluster, node)
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Nodes[node]
	s.state.Nodes[node] = &NodeRecord{Serial: serial, Issued: now.UTC(), Expires: expires.UTC()}
	if err := s.saveLocked(); err != nil {
		if old == nil {
			delete(s.state.Nodes, node)
		} else {
			s.state.Nodes[node] = old
		}
		return err
	}
	return nil
}

// nodeSerial is the serial of node's current certificate, "" if none.
func (s *Store) nodeSerial(cluster, node string) string {
	node = nodeKey(cluster, node)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.state.Nodes[node]; r != nil {
		return r.Serial
	}
	return ""
}

// validCert is the record of node's certificate if it holds one that has
// not expired at now.
func (s *Store) validCert(cluster, node string, now time.Time) (NodeRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.state.Nodes[nodeKey(cluster, node)]
	if r == nil {
		return NodeRecord{}, false
	}
	exp := r.Expires
	if exp.IsZero() {
		exp = r.Issued.Add(NodeValidity)
	}
	return *r, now.Before(exp)
}

// nodes are the nodes of cluster that hold a certificate.
func (s *Store) nodes(cluster string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for key := range s.state.Nodes {
		if node, ok := strings.CutPrefix(key, cluster+"/"); ok {
			out = append(out, node)
		}
	}
	return out
}

// revoke forgets node's certificate: it is refused from then on.
func (s *Store) revoke(cluster, node string) error {
	node = nodeKey(cluster, node)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.state.Nodes[node]
	if !ok {
		return nil
	}
	delete(s.state.Nodes, node)
	if err := s.saveLocked(); err != nil {
		s.state.Nodes[node] = old
		return err
	}
	return nil
}

func (s *Store) saveLocked() error {
	if s.dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(s.state, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(s.dir, stateFile), b)
}

func nodeKey(cluster, node string) string { return cluster + "/" + node }

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// writeFile replaces path with b, mode 0600, so that a crash leaves the
// old file or the new one, never a torn one.
func writeFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// readCapped reads path, refusing a file over max bytes.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", path, max)
	}
	return b, nil
}

// Approval is a join for a node that holds a valid certificate: a join
// never replaces one by itself; an operator approves it (rigger agent
// approve), and the agent's next try joins.
type Approval struct {
	Cluster  string `json:"cluster"`
	Node     string `json:"node"`
	Hostname string `json:"hostname"`
	Remote   string `json:"remote"`
	// Key is the hex SHA-256 of the public key the join asks a
	// certificate for: the approval is for that key alone.
	Key       string    `json:"key"`
	Requested time.Time `json:"requested"`
	Approved  bool      `json:"approved,omitempty"`
}

func (a Approval) file() string {
	return hashToken(a.Cluster+"/"+a.Node+"/"+a.Key) + ".json"
}

// askApproval records a join waiting for approval, or, if an operator has
// approved it, uses the approval up and says so.
func (s *Store) askApproval(a Approval) (approved bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		return false, errors.New("no state directory to keep approvals in")
	}
	dir := filepath.Join(s.dir, approvalsDir)
	path := filepath.Join(dir, a.file())
	if b, err := readCapped(path, maxTokenFile); err == nil {
		var old Approval
		if json.Unmarshal(b, &old) == nil && old.Approved {
			if err := os.Remove(path); err != nil {
				return false, err
			}
			return true, nil
		}
	} else if entries, _ := os.ReadDir(dir); len(entries) >= maxApprovals {
		return false, fmt.Errorf("%d joins already wait for approval in %s", len(entries), dir)
	}
	b, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	return false, writeFile(path, b)
}

// Approvals lists the joins of cluster waiting for approval.
func (s *Store) Approvals(cluster string) ([]Approval, error) {
	if s.dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, approvalsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the joins waiting for approval: %w", err)
	}
	var out []Approval
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := readCapped(filepath.Join(s.dir, approvalsDir, e.Name()), maxTokenFile)
		if err != nil {
			continue
		}
		var a Approval
		if json.Unmarshal(b, &a) == nil && a.Cluster == cluster && !a.Approved {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Approval) int { return strings.Compare(a.Node+a.Key, b.Node+b.Key) })
	return out, nil
}

// Approve approves the join of node of cluster waiting for approval whose
// key starts with key (any, if there is one only and key is empty).
func (s *Store) Approve(cluster, node, key string) (Approval, error) {
	all, err := s.Approvals(cluster)
	if err != nil {
		return Approval{}, err
	}
	var match []Approval
	for _, a := range all {
		if a.Node == node && strings.HasPrefix(a.Key, strings.ToLower(key)) {
			match = append(match, a)
		}
	}
	switch {
	case len(match) == 0:
		return Approval{}, fmt.Errorf("no join of node %s of cluster %s waits for approval%s: its agent asks again "+
			"within a minute of its last try; run rigger agent approve without --node to list them", node, cluster,
			map[bool]string{true: " with key " + key, false: ""}[key != ""])
	case len(match) > 1:
		var keys []string
		for _, a := range match {
			keys = append(keys, fmt.Sprintf("%s (host %s, from %s)", a.Key, a.Hostname, a.Remote))
		}
		return Approval{}, fmt.Errorf("%d joins of node %s wait for approval: choose one with --key: %s",
			len(match), node, strings.Join(keys, "; "))
	}
	a := match[0]
	a.Approved = true
	b, err := json.Marshal(a)
	if err != nil {
		return Approval{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := writeFile(filepath.Join(s.dir, approvalsDir, a.file()), b); err != nil {
		return Approval{}, fmt.Errorf("approve the join of node %s: %w", node, err)
	}
	return a, nil
}
