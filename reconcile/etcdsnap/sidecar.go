package etcdsnap

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// SidecarFormat is the version of the sidecar's layout this rigger writes
// and reads.
const SidecarFormat = 1

// MaxSidecarSize bounds a sidecar read from a node or from S3.
const MaxSidecarSize = 1 << 20

// Sidecar is the JSON file `<name>.json` beside every snapshot: what it
// is, how to check it, and the non-secret cluster state a restore needs.
// It holds no key, token or password.
type Sidecar struct {
	Format int    `json:"format"`
	Name   string `json:"name"`
	// Kind is KindManual, KindScheduled or KindBeforeChange.
	Kind string `json:"kind"`
	// Node is the address of the etcd node the snapshot was taken on, and
	// Hostname its hostname.
	Node     string    `json:"node"`
	Hostname string    `json:"hostname"`
	TakenAt  time.Time `json:"taken_at"`
	// Size and SHA256 are the snapshot file's.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Revision, Hash and TotalKeys are `etcdctl snapshot status`'s.
	Revision  int64  `json:"revision"`
	Hash      uint32 `json:"hash"`
	TotalKeys int64  `json:"total_keys"`
	// EtcdVersion is the server version of the member it was taken from,
	// EtcdImage services.etcd.image.
	EtcdVersion string `json:"etcd_version"`
	EtcdImage   string `json:"etcd_image,omitempty"`
	// PKIFingerprint is the sha256 of the cluster's CA certificate
	// (kube-ca.pem): a restore needs the CA the snapshot's cluster trusted.
	PKIFingerprint string       `json:"pki_fingerprint"`
	Cluster        ClusterState `json:"cluster"`
}

// ClusterState is the part of cluster.yml a restore needs to rebuild the
// members: no secrets.
type ClusterState struct {
	ClusterName       string      `json:"cluster_name"`
	KubernetesVersion string      `json:"kubernetes_version,omitempty"`
	Nodes             []NodeState `json:"nodes"`
}

// NodeState is one node of the cluster when the snapshot was taken.
type NodeState struct {
	Address         string   `json:"address"`
	InternalAddress string   `json:"internal_address,omitempty"`
	Hostname        string   `json:"hostname,omitempty"`
	Roles           []string `json:"roles"`
}

// Marshal encodes the sidecar, indented, with a final newline.
func (s *Sidecar) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Validate says what is wrong with a sidecar, every problem at once.
func (s *Sidecar) Validate() error {
	var errs []error
	if s.Format != SidecarFormat {
		errs = append(errs, fmt.Errorf("format %d: this rigger reads format %d", s.Format, SidecarFormat))
	}
	if err := CheckName(s.Name); err != nil {
		errs = append(errs, err)
	}
	if s.Kind != KindManual && s.Kind != KindScheduled && s.Kind != KindBeforeChange {
		errs = append(errs, fmt.Errorf("kind %q is not %s, %s or %s", s.Kind, KindManual, KindScheduled, KindBeforeChange))
	}
	if s.Size <= 0 {
		errs = append(errs, fmt.Errorf("size %d: a snapshot is never empty", s.Size))
	}
	if err := checkSHA256(s.SHA256); err != nil {
		errs = append(errs, fmt.Errorf("sha256: %w", err))
	}
	if s.PKIFingerprint != "" {
		if err := checkSHA256(s.PKIFingerprint); err != nil {
			errs = append(errs, fmt.Errorf("pki_fingerprint: %w", err))
		}
	}
	if s.Node == "" {
		errs = append(errs, errors.New("node is empty"))
	}
	if s.TakenAt.IsZero() {
		errs = append(errs, errors.New("taken_at is missing"))
	}
	if s.Cluster.ClusterName == "" {
		errs = append(errs, errors.New("cluster.cluster_name is empty"))
	}
	return errors.Join(errs...)
}

func checkSHA256(h string) error {
	if len(h) != 64 {
		return fmt.Errorf("%d characters, not 64 hex digits", len(h))
	}
	if _, err := hex.DecodeString(h); err != nil || h != lowerHex(h) {
		return fmt.Errorf("%q is not 64 lower-case hex digits", h)
	}
	return nil
}

func lowerHex(h string) string { return string(bytes.ToLower([]byte(h))) }

// ParseSidecar decodes and validates a sidecar read from a node or from
// S3 (untrusted input): at most MaxSidecarSize bytes, one JSON object,
// no unknown fields.
func ParseSidecar(b []byte) (*Sidecar, error) {
	if len(b) > MaxSidecarSize {
		return nil, fmt.Errorf("sidecar of %d bytes: more than %d", len(b), MaxSidecarSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Sidecar
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode sidecar: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode sidecar: data after the JSON object")
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("sidecar %s: %w", s.Name, err)
	}
	return &s, nil
}
