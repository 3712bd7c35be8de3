package pki

import (
	"fmt"
	"slices"
	"strings"
)

// Rotation asks Ensure to reissue certificates that are still good, as
// `rke cert rotate` and cluster.yml's rotate_certificates do.
type Rotation struct {
	// CA asks for a new kube-ca and kube-apiserver-requestheader-ca, and
	// every certificate under them (Services is then ignored, as RKE
	// ignores it).
	CA bool `json:"ca,omitempty"`
	// Services are the components whose certificates are reissued, by
	// RKE's names (RotatableServices); empty is every certificate.
	Services []string `json:"services,omitempty"`
}

// RotatableServices are the services a Rotation can name, as RKE names
// them, and the certificates of each (RKE's cluster.RotateRKECertificates).
// etcd stands for every etcd node's kube-etcd-… certificate.
var rotatableServices = map[string][]string{
	"etcd":                    {etcdCertPrefix + "*"},
	"kubelet":                 {KubeNodeCertName},
	"kube-apiserver":          {KubeAPICertName},
	"kube-proxy":              {KubeProxyCertName},
	"kube-scheduler":          {KubeSchedulerCertName},
	"kube-controller-manager": {KubeControllerCertName},
}

// RotatableServices are the names a Rotation's Services may hold, sorted.
func RotatableServices() []string {
	out := make([]string, 0, len(rotatableServices))
	for s := range rotatableServices {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Check refuses a service name RKE would not rotate.
func (r Rotation) Check() error {
	for _, s := range r.Services {
		if _, ok := rotatableServices[s]; !ok {
			return fmt.Errorf("cannot rotate the certificates of service %q: it is none of %s", s, strings.Join(RotatableServices(), ", "))
		}
	}
	return nil
}

// Covers reports whether the rotation reissues the certificate name (a
// name of a Set). The service-account token key is never reissued: RKE
// keeps it, CA rotation included, so that the tokens issued before stay
// valid. A CA is reissued only by a CA rotation.
func (r Rotation) Covers(name string) bool {
	switch {
	case name == ServiceAccountTokenKeyName:
		return false
	case r.CA:
		return true
	case name == CACertName || name == RequestHeaderCACertName:
		return false
	case len(r.Services) == 0:
		return true
	}
	for _, s := range r.Services {
		for _, n := range rotatableServices[s] {
			if n == name || strings.HasSuffix(n, "*") && strings.HasPrefix(name, strings.TrimSuffix(n, "*")) {
				return true
			}
		}
	}
	return false
}

// String says what the rotation reissues, for people.
func (r Rotation) String() string {
	switch {
	case r.CA:
		return "the CAs and every certificate (the service-account token key is kept)"
	case len(r.Services) == 0:
		return "every certificate (the CAs and the service-account token key are kept)"
	}
	return "the certificates of " + strings.Join(r.Services, ", ")
}

// Names are the names of s the rotation reissues, sorted.
func (r Rotation) Names(s *Set) []string {
	var out []string
	for _, n := range s.Names() {
		if r.Covers(n) {
			out = append(out, n)
		}
	}
	return out
}

// CAStage is a step of a CA rotation. The nodes go through the stages in
// order, every component restarted at each, so that at every moment each
// component trusts the CA of every certificate it is shown:
//
//  1. StageTrust: the old certificates, and both CAs trusted;
//  2. StageIssue: the new certificates, both CAs still trusted;
//  3. StageFinish: the new certificates, the new CA alone.
//
// (Kubernetes' manual CA rotation goes the same way.) etcd, for one,
// reloads its certificate at every connection but its trusted CAs only
// when it starts: after StageTrust every member trusts both, so members
// shown the new certificates at StageIssue accept them.
type CAStage string

// The stages of a CA rotation, in order.
const (
	StageTrust  CAStage = "trust-both"
	StageIssue  CAStage = "new-certificates"
	StageFinish CAStage = "new-ca-only"
)

// CAStages are the stages of a CA rotation, in order.
var CAStages = []CAStage{StageTrust, StageIssue, StageFinish}

// Staged is the set the nodes get at stage st of a CA rotation from old to
// rotated (Ensure's result with Rotation.CA): old's certificates trusting
// both CAs, rotated's trusting both, then rotated as it is. It returns an
// error for an unknown stage or a set without its CAs.
func Staged(old, rotated *Set, st CAStage) (*Set, error) {
	cas := []string{CACertName, RequestHeaderCACertName}
	for _, s := range []*Set{old, rotated} {
		if s == nil {
			return nil, fmt.Errorf("stage %s of the CA rotation: no certificates", st)
		}
		if _, ok := s.Certs[CACertName]; !ok {
			return nil, fmt.Errorf("stage %s of the CA rotation: no %s", st, CACertName)
		}
	}
	withTrust := func(base, other *Set) *Set {
		out := &Set{Certs: base.Certs, Trust: map[string][]byte{}}
		for _, ca := range cas {
			if c, ok := other.Certs[ca]; ok && base.Certs[ca].CertPEM != nil {
				out.Trust[ca] = c.CertPEM
			}
		}
		return out
	}
	switch st {
	case StageTrust:
		return withTrust(old, rotated), nil
	case StageIssue:
		return withTrust(rotated, old), nil
	case StageFinish:
		return &Set{Certs: rotated.Certs}, nil
	}
	return nil, fmt.Errorf("unknown stage %q of a CA rotation", st)
}
