// Package rkestate reads what RKE keeps of a cluster, for rigger adopt:
// its cluster.rkestate file, or the same JSON in the full-cluster-state
// Secret (RKE ≥ 1.3) or ConfigMap (older RKE) of kube-system. It takes from
// it the nodes RKE ran the cluster on, the certificates and keys (RKE's
// certificatesBundle, whose names are rigger's: kube-ca, kube-etcd-<ip>,
// kube-service-account-token, …) and the secrets encryption configuration,
// and checks them against cluster.yml (Check) before rigger takes them over
// (Import).
//
// The file holds every private key of the cluster and the nodes' SSH keys:
// nothing read from it is ever put in an error or a message, only names,
// addresses and expiry dates.
package rkestate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/pki"
)

// readAll reads r to its end, at most limit+1 bytes. A reader that says
// its size (a file, a strings or bytes Reader) is read into one buffer of
// that size: io.ReadAll's growing buffer would leave about four times the
// file's bytes for the collector, which a file near the limit makes tens
// of MiB.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	size := int64(-1)
	switch v := r.(type) {
	case interface{ Len() int }:
		size = int64(v.Len())
	case interface{ Stat() (fs.FileInfo, error) }:
		if fi, err := v.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
	}
	lr := io.LimitReader(r, limit+1)
	if size < 0 || size > limit {
		return io.ReadAll(lr)
	}
	b := make([]byte, size+1)
	n, err := io.ReadFull(lr, b)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return b[:n], nil
	case err != nil:
		return nil, err
	}
	// More than the reader said (a file that grew): the rest as it comes.
	rest, err := io.ReadAll(lr)
	return append(b, rest...), err
}

// MaxSize bounds what Parse reads: RKE's state of a cluster of a thousand
// nodes (two copies of every certificate, a serving certificate per node)
// is a few MiB.
const MaxSize = 32 << 20

// State is what rigger takes from RKE's state.
type State struct {
	// Source names where it was read from, for messages: the file, or the
	// Secret or ConfigMap.
	Source string
	// Section is which of RKE's states it was taken from: "currentState"
	// (what rke up last deployed), or "desiredState" when there is no
	// current one (rke up never finished).
	Section string
	// ClusterName is RKE's cluster_name ("" when the state does not say).
	ClusterName string
	// Nodes are the nodes of RKE's cluster.yml, as the state records them.
	Nodes []Node
	// Certs are the certificates and keys by RKE's name, PEM.
	Certs map[string]pki.Cert
	// EncryptionConfig is the EncryptionConfiguration RKE writes to
	// /etc/kubernetes/ssl/encryption.yaml, nil when secrets encryption is
	// off.
	EncryptionConfig []byte
}

// Node is a node as RKE's state records it.
type Node struct {
	Address, InternalAddress, HostnameOverride string
	Roles                                      []string
}

// The JSON of RKE's FullState (cluster/state.go), only what rigger reads.
// Everything else (RKE adds keys release after release) is ignored.
type fullState struct {
	DesiredState *state `json:"desiredState"`
	CurrentState *state `json:"currentState"`
}

type state struct {
	RKEConfig          *rkeConfig `json:"rkeConfig"`
	CertificatesBundle certBundle `json:"certificatesBundle"`
	EncryptionConfig   string     `json:"encryptionConfig"`
}

type rkeConfig struct {
	ClusterName string   `json:"clusterName"`
	Nodes       rkeNodes `json:"nodes"`
}

// Bounds of what Parse decodes of a state, whatever its size: a state of
// 600,000 tiny nodes is 29 MB, and took 350 MB to decode before Check
// refused it. Kubernetes runs clusters of 5,000 nodes at most; RKE keeps
// two certificates a node at most (its kubelet's serving certificate, its
// etcd member's) beside its own.
const (
	maxStateNodes = 5000
	maxStateCerts = 2*maxStateNodes + 100
)

// tooManyError is a list of the state longer than Parse reads.
type tooManyError struct {
	what string
	max  int
}

func (e *tooManyError) Error() string {
	return fmt.Sprintf("it lists more than %d %s, more than a Kubernetes cluster has", e.max, e.what)
}

// kindError is a field of the state whose JSON is not of the kind RKE
// writes. It names the field and the kinds, nothing of the value.
type kindError struct{ field, got, want string }

func (e *kindError) Error() string {
	return fmt.Sprintf("field %s is a JSON %s, RKE writes an %s there", e.field, e.got, e.want)
}

// rkeNodes are the nodes of a state, decoded one at a time up to
// maxStateNodes.
type rkeNodes []rkeNode

func (n *rkeNodes) UnmarshalJSON(b []byte) error {
	return decodeEach(b, '[', "rkeConfig.nodes", func(dec *json.Decoder) error {
		if len(*n) == maxStateNodes {
			return &tooManyError{what: "nodes in rkeConfig.nodes", max: maxStateNodes}
		}
		var node rkeNode
		if err := dec.Decode(&node); err != nil {
			return err
		}
		*n = append(*n, node)
		return nil
	})
}

// certBundle is a state's certificatesBundle, decoded one certificate at
// a time up to maxStateCerts.
type certBundle map[string]certificatePKI

func (c *certBundle) UnmarshalJSON(b []byte) error {
	*c = certBundle{}
	return decodeEach(b, '{', "certificatesBundle", func(dec *json.Decoder) error {
		if len(*c) == maxStateCerts {
			return &tooManyError{what: "certificates in certificatesBundle", max: maxStateCerts}
		}
		key, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := key.(string)
		var cert certificatePKI
		if err := dec.Decode(&cert); err != nil {
			return err
		}
		(*c)[name] = cert
		return nil
	})
}

// decodeEach decodes b, the JSON array or object of field (open is its
// first delimiter) or null, calling each for each of its elements.
func decodeEach(b []byte, open json.Delim, field string, each func(*json.Decoder) error) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if tok != open {
		return &kindError{field: field, got: jsonKind(tok), want: jsonKind(open)}
	}
	for dec.More() {
		if err := each(dec); err != nil {
			return err
		}
	}
	return nil
}

type rkeNode struct {
	Address          string   `json:"address"`
	InternalAddress  string   `json:"internalAddress"`
	HostnameOverride string   `json:"hostnameOverride"`
	Role             []string `json:"role"`
}

type certificatePKI struct {
	CertificatePEM string `json:"certificatePEM"`
	KeyPEM         string `json:"keyPEM"`
}

// Parse reads RKE's state from r (at most MaxSize bytes); source names it
// in errors. It takes the current state, or the desired one when RKE never
// deployed (no current state with certificates). Errors name source and the
// field, never a value.
func Parse(source string, r io.Reader) (*State, error) {
	b, err := readAll(r, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", source, err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("read %s: larger than %d MiB, more than RKE writes for any cluster: is it RKE's cluster.rkestate?", source, MaxSize>>20)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("read %s: the file is empty", source)
	}
	var fs fullState
	if err := json.Unmarshal(b, &fs); err != nil {
		return nil, fmt.Errorf("read %s: %w", source, jsonError(err, int64(len(b))))
	}
	st := &State{Source: source}
	var s *state
	switch {
	case fs.CurrentState != nil && len(fs.CurrentState.CertificatesBundle) > 0:
		s, st.Section = fs.CurrentState, "currentState"
	case fs.DesiredState != nil && len(fs.DesiredState.CertificatesBundle) > 0:
		s, st.Section = fs.DesiredState, "desiredState"
	default:
		return nil, fmt.Errorf("read %s: no certificatesBundle in currentState or desiredState: is it RKE's cluster.rkestate (a JSON object with desiredState and currentState)?", source)
	}
	if s.RKEConfig == nil {
		return nil, fmt.Errorf("read %s: %s has certificates but no rkeConfig: the state is damaged", source, st.Section)
	}
	st.ClusterName = s.RKEConfig.ClusterName
	for i, n := range s.RKEConfig.Nodes {
		if n.Address == "" {
			return nil, fmt.Errorf("read %s: %s.rkeConfig.nodes[%d] has no address", source, st.Section, i)
		}
		st.Nodes = append(st.Nodes, Node{Address: n.Address, InternalAddress: n.InternalAddress,
			HostnameOverride: n.HostnameOverride, Roles: slices.Clone(n.Role)})
	}
	if len(st.Nodes) == 0 {
		return nil, fmt.Errorf("read %s: %s.rkeConfig.nodes is empty", source, st.Section)
	}
	st.Certs = make(map[string]pki.Cert, len(s.CertificatesBundle))
	for _, name := range slices.Sorted(maps.Keys(s.CertificatesBundle)) {
		c := s.CertificatesBundle[name]
		if c.CertificatePEM == "" {
			return nil, fmt.Errorf("read %s: %s.certificatesBundle[%q].certificatePEM is empty", source, st.Section, name)
		}
		if strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
			return nil, fmt.Errorf("read %s: %s.certificatesBundle has a name that is not a file name", source, st.Section)
		}
		cert := pki.Cert{CertPEM: []byte(c.CertificatePEM)}
		if c.KeyPEM != "" {
			cert.KeyPEM = []byte(c.KeyPEM)
		}
		st.Certs[name] = cert
	}
	if s.EncryptionConfig != "" {
		st.EncryptionConfig = []byte(s.EncryptionConfig)
	}
	return st, nil
}

// jsonError is err without anything of the input: encoding/json's syntax
// and type errors name an offset or a field, never a value, but other
// errors are reduced to their kind.
func jsonError(err error, size int64) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var many *tooManyError
	switch {
	case errors.As(err, &many):
		return fmt.Errorf("%w: is it RKE's cluster.rkestate?", many)
	case errors.As(err, new(*kindError)):
		return err
	case errors.As(err, &syn) && syn.Offset >= size:
		return errors.New("the JSON ends early: the file is cut short")
	case errors.As(err, &syn):
		return fmt.Errorf("not JSON (at byte %d): is it RKE's cluster.rkestate?", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Errorf("field %s is a JSON %s, RKE writes a %s there", typ.Field, typ.Value, typ.Type)
	}
	return errors.New("not RKE's JSON state")
}

// jsonKind names the kind of value tok starts, for messages.
func jsonKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return map[json.Delim]string{'[': "array", '{': "object"}[t]
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "bool"
	}
	return "value"
}
