package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"
)

// Lifetimes of what Ensure issues.
const (
	// CAValidity is how long a new CA is valid. Ensure never replaces a CA,
	// so this is the time before the CA has to be rotated on purpose.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long a component certificate is valid (never past
	// its CA).
	LeafValidity = 365 * 24 * time.Hour
	// RenewBefore is how long before it expires a certificate is reissued.
	RenewBefore = 30 * 24 * time.Hour
	// backdate is how far before now a certificate starts to be valid, so
	// that a node whose clock is a little behind accepts it.
	backdate = 5 * time.Minute
)

// Ensure returns the PKI the request needs, starting from existing (nil for
// a new cluster), and what it changed. It keeps the CAs and every certificate
// that is still valid for RenewBefore and says what it must (subject, SANs,
// usages, signer); it issues missing ones, reissues the others, and removes
// names the request no longer needs (the etcd certificates of nodes that are
// no longer etcd). existing is not modified; calling Ensure again on its
// result changes nothing.
//
// A leaf never outlives its CA. One that already ends when its CA ends is
// not reissued as that day nears: the CA's own expiry (see Expiry) is what
// needs attention then, and a CA that has expired is an error.
//
// Ensure never creates a CA when existing has one: an existing kube-ca that
// cannot be read is an error, and so is an existing PKI without kube-ca.
//
// req.Rotate asks for more: every certificate it covers (Rotation.Covers)
// is reissued although it is good, with the reason ReasonRotation; with
// Rotate.CA the CAs too, and everything under them. The service-account
// token key is kept whatever is rotated. Ensure does not remember a
// rotation: a caller that calls it again with the same Rotate gets new
// certificates again.
func Ensure(existing *Set, req Request, now time.Time) (*Set, []Change, error) {
	want, err := desired(req)
	if err != nil {
		return nil, nil, err
	}
	old := map[string]Cert{}
	if existing != nil && existing.Certs != nil {
		old = existing.Certs
	}
	if _, ok := old[CACertName]; !ok && len(old) > 0 {
		return nil, nil, fmt.Errorf("ensure certificates: the PKI has %d entries but no %s; "+
			"restore %s.pem and %s-key.pem from the state directory or a control-plane node, rigger will not make a new CA for an existing cluster",
			len(old), CACertName, CACertName, CACertName)
	}

	out := &Set{Certs: map[string]Cert{}}
	var changes []Change
	cas := map[string]pair{}
	for _, name := range issueOrder(want) {
		id := want[name]
		cur, have := old[name]
		var reason string
		switch {
		case !have:
		case id.kind == kindCA && rotates(req, name):
			reason = ReasonRotation
		case id.kind == kindCA:
			p, err := parsePair(cur)
			if err != nil {
				return nil, nil, fmt.Errorf("read %s: %w; restore it from a control-plane node, rigger will not replace a CA", name, err)
			}
			if !now.Before(p.cert.NotAfter) {
				return nil, nil, fmt.Errorf("check %s: it expired on %s; every certificate it signed is invalid, and the CA must be rotated",
					name, p.cert.NotAfter.UTC().Format(time.DateOnly))
			}
			cas[name] = p
			out.Certs[name] = cur
			continue
		case id.kind == kindKeyPair:
			reason = checkKeyPair(cur)
		case rotates(req, name):
			reason = ReasonRotation
		default:
			reason = checkLeaf(cur, id, cas[id.signer], now)
		}
		if have && reason == "" {
			out.Certs[name] = cur
			continue
		}

		var c Cert
		var p pair
		switch id.kind {
		case kindCA:
			c, p, err = issue(id, pair{}, now)
			cas[name] = p
		case kindKeyPair:
			c, err = newKeyPair()
		default:
			c, _, err = issue(id, cas[id.signer], now)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("issue %s: %w", name, err)
		}
		out.Certs[name] = c
		if have {
			changes = append(changes, Change{Name: name, Action: ActionReissue, Reason: reason})
		} else {
			changes = append(changes, Change{Name: name, Action: ActionCreate, Reason: "missing"})
		}
	}

	for _, name := range (&Set{Certs: old}).Names() {
		if _, ok := want[name]; ok {
			continue
		}
		reason := "no longer needed"
		if strings.HasPrefix(name, etcdCertPrefix) {
			reason = "no etcd node uses it any more"
		}
		changes = append(changes, Change{Name: name, Action: ActionRemove, Reason: reason})
	}
	return out, changes, nil
}

// ReasonRotation is the reason of a Change made because Request.Rotate
// asked for it.
const ReasonRotation = "rotation requested"

// rotates reports whether req asks to reissue name although it is good.
func rotates(req Request, name string) bool {
	return req.Rotate != nil && req.Rotate.Covers(name)
}

// issueOrder lists the names kube-ca first, then the other CAs (a leaf needs
// its signer), then the rest, sorted.
func issueOrder(want map[string]identity) []string {
	names := slices.Collect(maps.Keys(want))
	rank := func(name string) int {
		switch {
		case name == CACertName:
			return 0
		case want[name].kind == kindCA:
			return 1
		}
		return 2
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}

// checkKeyPair is why the service-account key must be replaced, or "".
func checkKeyPair(c Cert) string {
	if len(c.KeyPEM) == 0 {
		return "no private key"
	}
	key, err := parseKey(c.KeyPEM)
	if err != nil {
		return "unreadable private key: " + err.Error()
	}
	pub, err := publicOf(c.CertPEM)
	if err != nil {
		return "unreadable public key: " + err.Error()
	}
	if !samePublic(key, pub) {
		return "public key does not match the private key"
	}
	return ""
}

// checkLeaf is why a certificate must be reissued, or "" when it can stay.
func checkLeaf(c Cert, id identity, signer pair, now time.Time) string {
	p, err := parsePair(c)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	crt := p.cert
	if err := crt.CheckSignatureFrom(signer.cert); err != nil {
		return "not signed by the current " + id.signer
	}
	var why []string
	if !rkeServes(p, id) {
		if got, want := subject(crt.Subject.CommonName, crt.Subject.Organization), subject(id.cn, id.orgs); got != want {
			why = append(why, fmt.Sprintf("subject changed: %s, was %s", want, got))
		}
		if got := usageNames(crt.ExtKeyUsage); !slices.Equal(got, usageNames(id.usages)) {
			why = append(why, fmt.Sprintf("usages changed: %s, was %s",
				strings.Join(usageNames(id.usages), ","), strings.Join(got, ",")))
		}
		if d := diffSANs(certSANs(crt), id.sans()); d != "" {
			why = append(why, "SANs changed: "+d)
		}
	}
	left := crt.NotAfter.Sub(now)
	switch {
	case left <= 0:
		why = append(why, "expired "+crt.NotAfter.UTC().Format(time.DateOnly))
	case left < RenewBefore && crt.NotAfter.Before(signer.cert.NotAfter):
		// A certificate that already ends with its CA would only be
		// reissued to end there again.
		why = append(why, fmt.Sprintf("expires %s, within %d days",
			crt.NotAfter.UTC().Format(time.DateOnly), int(RenewBefore/(24*time.Hour))))
	}
	return strings.Join(why, "; ")
}

// rkeEtcdCN is the common name RKE gives every etcd node's certificate
// (rigger names each one for its node).
const rkeEtcdCN = "kube-etcd"

// rkeServes reports whether p is a certificate RKE issued that does all
// rigger needs of id, so that a cluster taken over from RKE (rigger adopt)
// keeps it until it nears its expiry. rigger issues ECDSA keys only: an RSA
// key is RKE's. RKE's certificate serves when its subject is rigger's (for
// an etcd node's, RKE's common kube-etcd), and it has at least rigger's
// usages and SANs: RKE gives an etcd certificate the names of every etcd
// node and of the API server, and the API server's proxy client the server
// usage too.
func rkeServes(p pair, id identity) bool {
	if _, rsaKey := p.key.(*rsa.PrivateKey); !rsaKey {
		return false
	}
	crt := p.cert
	want := subject(id.cn, id.orgs)
	if strings.HasPrefix(id.cn, etcdCertPrefix) {
		want = subject(rkeEtcdCN, id.orgs)
	}
	if subject(crt.Subject.CommonName, crt.Subject.Organization) != want {
		return false
	}
	return containsAll(usageNames(crt.ExtKeyUsage), usageNames(id.usages)) &&
		containsAll(certSANs(crt), id.sans())
}

// containsAll reports whether every element of want is in got.
func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

func subject(cn string, orgs []string) string {
	s := "CN=" + cn
	o := slices.Sorted(slices.Values(orgs))
	for _, org := range o {
		s += ",O=" + org
	}
	return s
}

func usageNames(us []x509.ExtKeyUsage) []string {
	var out []string
	for _, u := range us {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			out = append(out, "server")
		case x509.ExtKeyUsageClientAuth:
			out = append(out, "client")
		default:
			out = append(out, fmt.Sprintf("usage(%d)", u))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// certSANs is a certificate's DNS names and IPs, canonical and sorted.
func certSANs(c *x509.Certificate) []string {
	var s []string
	for _, n := range c.DNSNames {
		s = append(s, strings.ToLower(n))
	}
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// diffSANs says what want adds (+) to and removes (-) from got, or "".
func diffSANs(got, want []string) string {
	var d []string
	for _, s := range want {
		if !slices.Contains(got, s) {
			d = append(d, "+"+s)
		}
	}
	for _, s := range got {
		if !slices.Contains(want, s) {
			d = append(d, "-"+s)
		}
	}
	return strings.Join(d, ", ")
}

// newKey is a fresh P-256 key.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// newKeyPair is a bare key pair: the service-account token key.
func newKeyPair() (Cert, error) {
	k, err := newKey()
	if err != nil {
		return Cert{}, fmt.Errorf("generate key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		return Cert{}, fmt.Errorf("encode public key: %w", err)
	}
	keyPEM, err := encodeKey(k)
	if err != nil {
		return Cert{}, err
	}
	return Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), KeyPEM: keyPEM}, nil
}

// issue makes a new key and a certificate for id, signed by signer, or
// self-signed for a CA.
func issue(id identity, signer pair, now time.Time) (Cert, pair, error) {
	k, err := newKey()
	if err != nil {
		return Cert{}, pair{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Cert{}, pair{}, fmt.Errorf("generate serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: id.cn, Organization: id.orgs},
		NotBefore:    now.Add(-backdate).UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  id.usages,
		DNSNames:     id.dns,
	}
	for _, ip := range id.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	parent, parentKey := tmpl, crypto.Signer(k)
	if id.kind == kindCA {
		tmpl.NotAfter = now.Add(CAValidity).UTC()
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	} else {
		if signer.cert == nil {
			return Cert{}, pair{}, errors.New("no signing CA")
		}
		tmpl.NotAfter = now.Add(LeafValidity).UTC()
		if signer.cert.NotAfter.Before(tmpl.NotAfter) {
			tmpl.NotAfter = signer.cert.NotAfter
		}
		parent, parentKey = signer.cert, signer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, k.Public(), parentKey)
	if err != nil {
		return Cert{}, pair{}, fmt.Errorf("sign certificate: %w", err)
	}
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return Cert{}, pair{}, fmt.Errorf("parse new certificate: %w", err)
	}
	keyPEM, err := encodeKey(k)
	if err != nil {
		return Cert{}, pair{}, err
	}
	c := Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}
	return c, pair{crt, k}, nil
}
