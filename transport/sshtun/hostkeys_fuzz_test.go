package sshtun

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/rigger/rigger/internal/fuzzcheck"
	"github.com/rigger/rigger/transport/internal/testnode"
)

// FuzzCAPatterns checks rigger's reading of @cert-authority host patterns
// against x/crypto's knownhosts, which verifies the certificates: a CA
// line matches a host for rigger (which then asks the host for its
// certificate) exactly when knownhosts accepts a certificate of that CA
// from the host. Otherwise rigger asks for a certificate knownhosts
// refuses, or for a plain key when a CA would vouch for the host.
func FuzzCAPatterns(f *testing.F) {
	ca := testnode.NewKey(f)
	caKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey())))
	cert := testnode.Certify(f, ca, testnode.NewKey(f).PublicKey(), ssh.HostCert, nil, 0)
	file := filepath.Join(f.TempDir(), "known_hosts")

	for _, seed := range []struct {
		patterns, host string
		port           uint16
	}{
		{"*.example.com", "node1.example.com", 22},
		{"[10.231.0.*]:2222", "10.231.0.11", 2222},
		{"10.0.0.?,!10.0.0.5", "10.0.0.5", 22},
		{knownhosts.HashHostname("node1"), "node1", 22},
		{knownhosts.HashHostname("[node1]:2222"), "node1", 2222},
		{"node1:2222", "node1", 2222},
		{"node[12]", "node1", 22},
		{`node\1`, "node1", 22},
		{"[::1]:22,fe80::*", "fe80::1", 22},
		{"a/*", "a/b", 22},
	} {
		f.Add(seed.patterns, seed.host, seed.port)
	}
	f.Fuzz(func(t *testing.T, patterns, host string, port uint16) {
		line := "@cert-authority " + patterns + " " + caKey + "\n"
		var cas []caPattern
		fuzzcheck.Bounded(t, len(line), func() { cas = parseCAPatterns([]byte(line)) })
		if strings.ContainsAny(patterns, " \t\r\n#") || patterns == "" || len(host) > 255 || strings.Count(patterns, "*") > 3 {
			// Not one field; or a host no node has; or enough
			// wildcards to make knownhosts' backtracking matcher slow.
			return
		}
		if err := os.WriteFile(file, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		check, err := knownhosts.New(file)
		if err != nil {
			return // rigger refuses the file too (hostKeys.load)
		}
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return
		}
		rigger := false
		for _, c := range cas {
			rigger = rigger || c.match(h, p)
		}
		accepted := check(addr, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: int(port)}, cert) == nil
		if rigger != accepted {
			t.Fatalf("@cert-authority %s: rigger matches %s: %v, knownhosts accepts its certificate: %v", patterns, addr, rigger, accepted)
		}
	})
}
