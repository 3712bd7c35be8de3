package pki

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ProveCA proves that the CA name (CACertName or
// RequestHeaderCACertName), given with its key, issues certificates the
// cluster of req verifies: it signs a throwaway certificate for every
// certificate of req it signs (the API server's and etcd's serving
// certificates with their names and addresses, the components' client
// certificates), as Ensure would issue them, and verifies each against
// the CA alone, for each of its usages. A CA whose own certificate
// forbids them (name constraints that exclude the cluster's names, an
// extended key usage without server or client authentication) fails,
// naming the certificate and why: what it would sign, no component would
// accept. Nothing is kept.
func ProveCA(name string, ca Cert, req Request, now time.Time) error {
	signer, err := parsePair(ca)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	want, err := desired(req)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(signer.cert)
	var leaves []string
	for leaf, id := range want {
		if id.kind == kindLeaf && id.signer == name {
			leaves = append(leaves, leaf)
		}
	}
	slices.Sort(leaves)
	for _, leaf := range leaves {
		id := want[leaf]
		_, p, err := issue(id, signer, now)
		if err != nil {
			return fmt.Errorf("%s cannot sign a certificate like %s: %w", name, leaf, err)
		}
		for _, usage := range id.usages {
			opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
			if _, err := p.cert.Verify(opts); err != nil {
				what := "client"
				if usage == x509.ExtKeyUsageServerAuth {
					what = "server"
				}
				names := ""
				if s := id.sans(); len(s) > 0 {
					names = " for " + strings.Join(s, ", ")
				}
				return fmt.Errorf("%s issues certificates that do not verify: a %s certificate like %s%s, which it signed, fails against it: %v",
					name, what, leaf, names, err)
			}
		}
	}
	return nil
}
