package doctor

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"
)

// CheckCertificates is the check of the certificates on a node.
const CheckCertificates = "certificates"

// RenewWithin is how close to its end a certificate is worth a warning.
const RenewWithin = 90 * 24 * time.Hour

// Certificates checks the certificates a node holds (got, by path: the
// files under /etc/kubernetes as read) against those rigger gives it
// (want, by path), with the cluster's CA certificates (cas, PEM; every CA
// of the PKI, both generations while the CA rotates): each present,
// signed by one of the CAs, valid now and not within RenewWithin of its
// end, and naming at least the names and addresses rigger's names
// (the SANs of the node's own certificates).
func Certificates(want, got map[string][]byte, cas []byte, now time.Time) Result {
	roots := parseCerts(cas)
	var rs []Result
	for _, p := range slices.Sorted(maps.Keys(want)) {
		w := firstCert(want[p])
		if w == nil || w.IsCA {
			continue // a key, a kubeconfig, or the CA itself
		}
		b, ok := got[p]
		if !ok {
			rs = append(rs, Failed(p+" on the node", p+" missing", "rigger apply writes it"))
			continue
		}
		g := firstCert(b)
		if g == nil {
			rs = append(rs, Failed(p+" to hold a certificate", p+" holds no certificate that parses", "rigger apply writes it again"))
			continue
		}
		rs = append(rs, certificate(p, w, g, roots, now))
	}
	if len(rs) == 0 {
		return Skipped("no certificate to check")
	}
	r := Worst(rs...)
	if r.Level == Pass {
		soonest := time.Time{}
		for _, p := range slices.Sorted(maps.Keys(want)) {
			if c := firstCert(got[p]); c != nil && !c.IsCA && (soonest.IsZero() || c.NotAfter.Before(soonest)) {
				soonest = c.NotAfter
			}
		}
		r.Found = fmt.Sprintf("%d certificates signed by the cluster's CA, the first to expire on %s", len(rs), soonest.UTC().Format("2006-01-02"))
	}
	return r
}

// certificate checks one certificate g, which should be as w.
func certificate(p string, w, g *x509.Certificate, roots []*x509.Certificate, now time.Time) Result {
	if !slices.ContainsFunc(roots, func(ca *x509.Certificate) bool { return g.CheckSignatureFrom(ca) == nil }) {
		return Failed(p+" signed by the cluster's CA",
			fmt.Sprintf("%s signed by another CA (issuer %q): x509: certificate signed by unknown authority", p, g.Issuer.CommonName),
			"a leftover of an earlier install or another cluster: rigger apply writes the cluster's own (clean the node first if it belonged to another cluster: rigger remove, or rm -rf /etc/kubernetes/ssl)")
	}
	switch {
	case now.After(g.NotAfter):
		return Failed(p+" valid", fmt.Sprintf("%s expired on %s: x509: certificate has expired or is not yet valid", p, g.NotAfter.UTC().Format(time.RFC3339)),
			"rigger cert rotate -f cluster.yml (docs/certificates.md)")
	case now.Before(g.NotBefore):
		return Failed(p+" valid", fmt.Sprintf("%s valid only from %s: x509: certificate has expired or is not yet valid", p, g.NotBefore.UTC().Format(time.RFC3339)),
			"the node's clock is behind: synchronize it (chrony, systemd-timesyncd)")
	}
	if missing := missingNames(w, g); len(missing) > 0 {
		return Failed(p+" valid for "+strings.Join(names(w), ", "),
			fmt.Sprintf("x509: certificate is valid for %s, not %s", strings.Join(names(g), ", "), strings.Join(missing, ", ")),
			"rigger apply writes the certificate with the node's addresses and hostname; if a SAN comes from cluster.yml (authentication.sans, hostname_override), check it there")
	}
	if left := g.NotAfter.Sub(now); left < RenewWithin {
		return Warned(p+" valid for more than 90 days", fmt.Sprintf("%s expires on %s, in %d days", p, g.NotAfter.UTC().Format("2006-01-02"), int(left.Hours()/24)),
			"rigger cert rotate -f cluster.yml before then (docs/certificates.md)")
	}
	return Passed(p)
}

// missingNames are the DNS names and addresses of w that g does not hold.
func missingNames(w, g *x509.Certificate) []string {
	var out []string
	for _, n := range w.DNSNames {
		if !slices.Contains(g.DNSNames, n) {
			out = append(out, n)
		}
	}
	for _, ip := range w.IPAddresses {
		if !slices.ContainsFunc(g.IPAddresses, ip.Equal) {
			out = append(out, ip.String())
		}
	}
	return out
}

// names are a certificate's DNS names and addresses.
func names(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, net.IP.String(ip))
	}
	return out
}

// firstCert parses the first certificate of a PEM file; nil when it has
// none.
func firstCert(b []byte) *x509.Certificate {
	if cs := parseCerts(b); len(cs) > 0 {
		return cs[0]
	}
	return nil
}

// parseCerts parses every certificate of a PEM file.
func parseCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}
