package agenttun

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxApprovals bounds the joins waiting for approval: beyond it a join is
// refused without being recorded.
const maxApprovals = 100

// MaxTokenTTL bounds the life of a join token: a token is for one join
// soon, not a standing credential.
const MaxTokenTTL = 7 * 24 * time.Hour

// Sweeps of the store: tokens that expired, and joins that
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

// Store keeps what the tunnel servers of rigger serve must remember
// across restarts, in a Backend shared by every process that uses it
// (serve's replicas, rigger agent command and approve): the CA they share
// (one TLS endpoint serves every cluster), the join tokens (their SHA-256
// only: a token is shown once, when it is issued), each for one node of
// one cluster, the joins waiting for approval, and the serial of each
// node's current certificate (an older certificate of the node, or one
// whose node was revoked, is refused). It reads the Backend at each use,
// so that what another process wrote counts at once. It is safe for
// concurrent use.
type Store struct {
	b  Backend
	ca *CA

	mu    sync.Mutex
	swept time.Time // the last sweep
}

// opTimeout bounds each of a Store's calls to its Backend.
const opTimeout = 10 * time.Second

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
	Cluster string `json:"cluster,omitempty"`
	Node    string `json:"node,omitempty"`
	// Serial is the hex serial of the node's current certificate; only
	// that certificate is accepted for the node.
	Serial string    `json:"serial"`
	Issued time.Time `json:"issued"`
	// Expires is the certificate's NotAfter (zero in records written
	// before it was kept: Issued + NodeValidity).
	Expires time.Time `json:"expires,omitzero"`
}

// OpenStore is the Store on dir (a Dir backend), made with a new CA when
// the directory holds none; an empty dir keeps the store in memory.
func OpenStore(dir string, now time.Time) (*Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if dir == "" {
		return NewStore(ctx, &memory{}, now)
	}
	d, err := NewDir(dir)
	if err != nil {
		return nil, err
	}
	if err := d.migrate(ctx); err != nil {
		return nil, err
	}
	return NewStore(ctx, d, now)
}

// NewStore is the Store on b: it reads b's CA, and makes one when b holds
// none (the CA another process made meanwhile wins).
func NewStore(ctx context.Context, b Backend, now time.Time) (*Store, error) {
	ca, err := readCA(ctx, b)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = NewCA(now); err != nil {
			return nil, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		switch err := b.CreateCA(ctx, ca.CertPEM(), keyPEM); {
		case errors.Is(err, ErrExists):
			ca, err = readCA(ctx, b)
			if err != nil {
				return nil, err
			}
		case err != nil:
			return nil, fmt.Errorf("agent tunnel state %s: keep the new CA: %w", b.Where(), err)
		}
	} else if err != nil {
		return nil, err
	}
	s := &Store{b: b, ca: ca}
	s.sweep(now)
	return s, nil
}

func readCA(ctx context.Context, b Backend) (*CA, error) {
	certPEM, keyPEM, err := b.ReadCA(ctx)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		var ca *CA
		if ca, err = ParseCA(certPEM, keyPEM); err == nil {
			return ca, nil
		}
	}
	return nil, fmt.Errorf("agent tunnel state %s: %w; a new CA would make every agent's --ca-checksum wrong", b.Where(), err)
}

// Backend is where the store keeps what it remembers.
func (s *Store) Backend() Backend { return s.b }

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
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
	s.mu.Unlock()
	ctx, cancel := s.ctx()
	defer cancel()
	s.sweepKind(ctx, kindTokens, func(b []byte) bool {
		var r TokenRecord
		return json.Unmarshal(b, &r) != nil || !r.usable(now)
	})
	s.sweepKind(ctx, kindApprovals, func(b []byte) bool {
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

// sweepKind removes the records of kind that gone says are (and those
// that cannot be read); a record changed meanwhile stays.
func (s *Store) sweepKind(ctx context.Context, kind string, gone func([]byte) bool) {
	recs, err := s.b.List(ctx, kind)
	if err != nil {
		return // the next sweep tries again
	}
	for _, r := range recs {
		if r.Data == nil || gone(r.Data) {
			s.b.Delete(ctx, r.Key, r.Version)
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
	rb, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.b.Put(ctx, tokenKey(tok), rb, ""); err != nil {
		return "", fmt.Errorf("issue a join token: keep it in %s: %w", s.b.Where(), err)
	}
	return tok, nil
}

// tokenKey is the key of tok's record: its hash.
func tokenKey(tok string) string { return kindTokens + "/" + hashToken(tok) + ".json" }

// errBadToken is what checkToken returns for every refused token, so that
// a refusal says nothing about which tokens exist.
var errBadToken = errors.New("the join token is not valid for this node (unknown, used, expired, or for another node or cluster)")

// checkToken returns the record of tok if it was issued for cluster and
// has not expired, errBadToken if not, another error when the backend
// cannot tell. It does not use the token up: useToken does.
func (s *Store) checkToken(cluster, tok string, now time.Time) (TokenRecord, error) {
	if !strings.HasPrefix(tok, tokenPrefix) {
		return TokenRecord{}, errBadToken
	}
	s.sweep(now)
	ctx, cancel := s.ctx()
	defer cancel()
	// The hash of a 256-bit secret, looked up in variable time: that
	// tells an attacker nothing about a token.
	rec, err := s.b.Get(ctx, tokenKey(tok))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return TokenRecord{}, errBadToken
	case err != nil:
		return TokenRecord{}, fmt.Errorf("read the join token's record in %s: %w", s.b.Where(), err)
	}
	var r TokenRecord
	// A token without a node or an expiry, or of a life past
	// MaxTokenTTL (issued by an older rigger), is refused: issue a new
	// one.
	if json.Unmarshal(rec.Data, &r) != nil || r.SHA256 != hashToken(tok) || r.Cluster != cluster || !r.usable(now) {
		return TokenRecord{}, errBadToken
	}
	return r, nil
}

// useToken uses tok up: of two joins with one token, one gets nil.
func (s *Store) useToken(tok string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.b.Delete(ctx, tokenKey(tok), ""); err != nil {
		return errBadToken
	}
	return nil
}

// nodeKey is the key of the record of node of cluster.
func nodeKey(cluster, node string) string { return recordKey(kindNodes, cluster+"/"+node) }

// node reads the record of node's certificate: its Serial is "" when the
// node holds none.
func (s *Store) node(ctx context.Context, cluster, node string) (NodeRecord, string, error) {
	rec, err := s.b.Get(ctx, nodeKey(cluster, node))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return NodeRecord{}, "", nil
	case err != nil:
		return NodeRecord{}, "", fmt.Errorf("read the certificate record of node %s in %s: %w", node, s.b.Where(), err)
	}
	var r NodeRecord
	if err := json.Unmarshal(rec.Data, &r); err != nil || r.Cluster != cluster || r.Node != node {
		return NodeRecord{}, "", fmt.Errorf("the certificate record of node %s in %s is damaged (%v): "+
			"remove it; the node then joins again with a new token", node, s.b.Where(), err)
	}
	return r, rec.Version, nil
}

// setNode records the certificate node holds from now on, valid until
// expires.
func (s *Store) setNode(cluster, node, serial string, now, expires time.Time) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, version, err := s.node(ctx, cluster, node)
	if err != nil {
		return err
	}
	b, err := json.Marshal(NodeRecord{Cluster: cluster, Node: node, Serial: serial, Issued: now.UTC(), Expires: expires.UTC()})
	if err != nil {
		return err
	}
	if err := s.b.Put(ctx, nodeKey(cluster, node), b, version); err != nil {
		return fmt.Errorf("record the certificate of node %s in %s: %w", node, s.b.Where(), err)
	}
	return nil
}

// nodeSerial is the serial of node's current certificate, "" if none.
func (s *Store) nodeSerial(cluster, node string) (string, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	r, _, err := s.node(ctx, cluster, node)
	return r.Serial, err
}

// validCert is the record of node's certificate (its Serial "" if none),
// and whether it has not expired at now.
func (s *Store) validCert(cluster, node string, now time.Time) (NodeRecord, bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	r, _, err := s.node(ctx, cluster, node)
	if err != nil || r.Serial == "" {
		return r, false, err
	}
	exp := r.Expires
	if exp.IsZero() {
		exp = r.Issued.Add(NodeValidity)
	}
	return r, now.Before(exp), nil
}

// nodes are the nodes of cluster that hold a certificate.
func (s *Store) nodes(cluster string) ([]string, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	recs, err := s.b.List(ctx, kindNodes)
	if err != nil {
		return nil, fmt.Errorf("list the nodes' certificate records in %s: %w", s.b.Where(), err)
	}
	var out []string
	for _, rec := range recs {
		var r NodeRecord
		if json.Unmarshal(rec.Data, &r) == nil && r.Cluster == cluster && rec.Key == nodeKey(cluster, r.Node) {
			out = append(out, r.Node)
		}
	}
	return out, nil
}

// revoke forgets node's certificate: it is refused from then on.
func (s *Store) revoke(cluster, node string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	err := s.b.Delete(ctx, nodeKey(cluster, node), "")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("revoke the certificate of node %s in %s: %w", node, s.b.Where(), err)
	}
	return nil
}

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
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

func (a Approval) recordKey() string { return recordKey(kindApprovals, a.Cluster+"/"+a.Node+"/"+a.Key) }

// askApproval records a join waiting for approval, or, if an operator has
// approved it, uses the approval up and says so (of two joins asking at
// once, one gets it).
func (s *Store) askApproval(a Approval) (approved bool, err error) {
	ctx, cancel := s.ctx()
	defer cancel()
	key := a.recordKey()
	version := ""
	switch rec, err := s.b.Get(ctx, key); {
	case err == nil:
		var old Approval
		if json.Unmarshal(rec.Data, &old) == nil && old.Approved {
			if err := s.b.Delete(ctx, key, rec.Version); err != nil {
				return false, fmt.Errorf("use the approval in %s: %w", s.b.Where(), err)
			}
			return true, nil
		}
		version = rec.Version
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("read the joins waiting for approval in %s: %w", s.b.Where(), err)
	default:
		waiting, err := s.b.List(ctx, kindApprovals)
		if err != nil {
			return false, fmt.Errorf("read the joins waiting for approval in %s: %w", s.b.Where(), err)
		}
		if len(waiting) >= maxApprovals {
			return false, fmt.Errorf("%d joins already wait for approval in %s", len(waiting), s.b.Where())
		}
	}
	b, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	// Asked again: the record is written anew, so that the sweep keeps it.
	return false, s.b.Put(ctx, key, b, version)
}

// approval is a join waiting for approval and the version of its record.
type approval struct {
	Approval
	version string
}

// waiting lists the joins of cluster waiting for approval.
func (s *Store) waiting(cluster string) ([]approval, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	recs, err := s.b.List(ctx, kindApprovals)
	if err != nil {
		return nil, fmt.Errorf("read the joins waiting for approval in %s: %w", s.b.Where(), err)
	}
	var out []approval
	for _, rec := range recs {
		var a Approval
		if json.Unmarshal(rec.Data, &a) == nil && a.Cluster == cluster && !a.Approved && rec.Key == a.recordKey() {
			out = append(out, approval{a, rec.Version})
		}
	}
	slices.SortFunc(out, func(a, b approval) int { return strings.Compare(a.Node+a.Key, b.Node+b.Key) })
	return out, nil
}

// Approvals lists the joins of cluster waiting for approval.
func (s *Store) Approvals(cluster string) ([]Approval, error) {
	all, err := s.waiting(cluster)
	var out []Approval
	for _, a := range all {
		out = append(out, a.Approval)
	}
	return out, err
}

// Approve approves the join of node of cluster waiting for approval whose
// key starts with key (any, if there is one only and key is empty).
func (s *Store) Approve(cluster, node, key string) (Approval, error) {
	all, err := s.waiting(cluster)
	if err != nil {
		return Approval{}, err
	}
	var match []approval
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
	a := match[0].Approval
	a.Approved = true
	b, err := json.Marshal(a)
	if err != nil {
		return Approval{}, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.b.Put(ctx, a.recordKey(), b, match[0].version); err != nil {
		return Approval{}, fmt.Errorf("approve the join of node %s in %s: %w (its agent asked again meanwhile: run it again)", node, s.b.Where(), err)
	}
	return a, nil
}
