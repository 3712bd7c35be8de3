package sshtun

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/transport/internal/testnode"
)

func TestHostKeyUnknownStrict(t *testing.T) {
	n := startNode(t, nodeOptions{})
	for name, files := range map[string][]string{
		"empty file":   {filepath.Join(t.TempDir(), "empty")},
		"missing file": {filepath.Join(t.TempDir(), "nope", "known_hosts")},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "empty file" {
				writeFile(t, files[0], nil)
			}
			cfg := n.config()
			cfg.KnownHostsFiles = files
			_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
			var unknown *HostKeyUnknownError
			if !errors.As(err, &unknown) {
				t.Fatalf("Dial: %v (%T), want *HostKeyUnknownError", err, err)
			}
			fp := ssh.FingerprintSHA256(n.server.HostKeys[0].PublicKey())
			if unknown.Fingerprint != fp {
				t.Errorf("Fingerprint = %s, want the server's %s", unknown.Fingerprint, fp)
			}
			for _, want := range []string{fp, "rigger.ssh.host_key_policy: accept-new", "ssh-keyscan", files[0]} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if _, statErr := os.Stat(files[0]); name == "missing file" && statErr == nil {
				t.Error("strict policy created the known_hosts file")
			}
		})
	}
}

func TestAcceptNewRecordsThenVerifies(t *testing.T) {
	n := startNode(t, nodeOptions{})
	file := filepath.Join(t.TempDir(), "new", ".ssh", "known_hosts")
	cfg := n.config()
	cfg.KnownHostsFiles = []string{file}
	cfg.HostKeyPolicy = HostKeyPolicyAcceptNew
	var logs logBuffer
	cfg.Logger = logs.logger()
	roundTrip(t, newT(t, cfg), "n1", n.echo)

	info, err := os.Stat(file)
	if err != nil {
		t.Fatalf("accept-new did not create %s: %v", file, err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("known_hosts mode = %v, want 0600", info.Mode().Perm())
	}
	if dir, _ := os.Stat(filepath.Dir(file)); dir.Mode().Perm() != 0o700 {
		t.Errorf("known_hosts directory mode = %v, want 0700", dir.Mode().Perm())
	}
	data, _ := os.ReadFile(file)
	want := knownhosts.Line([]string{knownhosts.Normalize(n.server.Addr)}, n.server.HostKeys[0].PublicKey())
	if strings.TrimSpace(string(data)) != want {
		t.Errorf("known_hosts = %q, want the one line %q", data, want)
	}
	if !strings.Contains(logs.String(), "accept-new") {
		t.Errorf("recording a key was not logged; logs:\n%s", logs.String())
	}

	// Recorded, the key is now what strict checks against: a second
	// transport connects, and a server with another key at the same
	// address is refused.
	cfg.HostKeyPolicy = HostKeyPolicyStrict
	roundTrip(t, newT(t, cfg), "n1", n.echo)

	other := startNode(t, nodeOptions{})
	cfg2 := other.config()
	cfg2.KnownHostsFiles = []string{file}
	cfg2.HostKeyPolicy = HostKeyPolicyAcceptNew
	// Pretend other is the same host: record n's key for other's address.
	line := knownhosts.Line([]string{knownhosts.Normalize(other.server.Addr)}, n.server.HostKeys[0].PublicKey())
	f, _ := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(line + "\n")
	f.Close()
	_, err = newT(t, cfg2).Dial(testCtx(t), "n1", "tcp", other.echo)
	var changed *HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("accept-new with a different recorded key: %v, want *HostKeyChangedError", err)
	}
	after, _ := os.ReadFile(file)
	if strings.Count(string(after), "\n") != 2 {
		t.Errorf("a changed key was written to known_hosts:\n%s", after)
	}
}

func TestHostKeyChanged(t *testing.T) {
	n := startNode(t, nodeOptions{})
	old := testnode.NewKey(t).PublicKey()
	host := knownhosts.Normalize(n.server.Addr)
	writeFile(t, n.knownHosts, []byte("# managed by hand\n"+knownhosts.Line([]string{host}, old)+"\n"))
	for _, policy := range []HostKeyPolicy{HostKeyPolicyStrict, HostKeyPolicyAcceptNew} {
		t.Run(string(policy), func(t *testing.T) {
			cfg := n.config()
			cfg.HostKeyPolicy = policy
			_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
			var changed *HostKeyChangedError
			if !errors.As(err, &changed) {
				t.Fatalf("Dial: %v (%T), want *HostKeyChangedError", err, err)
			}
			got, want := ssh.FingerprintSHA256(n.server.HostKeys[0].PublicKey()), ssh.FingerprintSHA256(old)
			if changed.Got != got || changed.Want != want || changed.File != n.knownHosts || changed.Line != 2 {
				t.Errorf("error = %+v, want Got %s, Want %s, %s:2", changed, got, want, n.knownHosts)
			}
			msg := err.Error()
			for _, s := range []string{got, want, n.knownHosts + ":2", "ssh-keygen -R '" + host + "' -f " + n.knownHosts} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
		})
	}
}

func TestHostKeyRevoked(t *testing.T) {
	n := startNode(t, nodeOptions{})
	writeFile(t, n.knownHosts, []byte("@revoked * "+string(ssh.MarshalAuthorizedKey(n.server.HostKeys[0].PublicKey()))))
	_, err := newT(t, n.config()).Dial(testCtx(t), "n1", "tcp", n.echo)
	var revoked *HostKeyRevokedError
	if !errors.As(err, &revoked) || revoked.Line != 1 {
		t.Fatalf("Dial: %v, want *HostKeyRevokedError at line 1", err)
	}
}

// A host with several keys must be asked for the one known_hosts has, or
// a correct known_hosts looks like a changed key.
func TestHostKeyAlgorithmFollowsKnownHosts(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ssh.NewSignerFromKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	ed := testnode.NewKey(t)
	for name, known := range map[string]ssh.Signer{"ed25519 known": ed, "ecdsa known": ec} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t, nodeOptions{server: testnode.Options{HostKeys: []ssh.Signer{ec, ed}}})
			writeFile(t, n.knownHosts, []byte(knownhosts.Line([]string{knownhosts.Normalize(n.server.Addr)}, known.PublicKey())+"\n"))
			roundTrip(t, newT(t, n.config()), "n1", n.echo)
		})
	}
}

func TestHostCertificate(t *testing.T) {
	ca := testnode.NewKey(t)
	hostKey := testnode.NewKey(t)
	caLine := func(n *node, pattern string) []byte {
		return []byte("@cert-authority " + pattern + " " + string(ssh.MarshalAuthorizedKey(ca.PublicKey())))
	}
	start := func(t *testing.T, principals []string) *node {
		cert := testnode.Certify(t, ca, hostKey.PublicKey(), ssh.HostCert, principals, 0)
		cs, err := ssh.NewCertSigner(cert, hostKey)
		if err != nil {
			t.Fatal(err)
		}
		return startNode(t, nodeOptions{server: testnode.Options{HostKeys: []ssh.Signer{cs, hostKey}}})
	}

	t.Run("accepted", func(t *testing.T) {
		n := start(t, []string{"127.0.0.1"})
		// A wildcard pattern, as CA lines usually have.
		writeFile(t, n.knownHosts, caLine(n, "[127.0.0.*]:"+itoa(n.server.Port())))
		roundTrip(t, newT(t, n.config()), "n1", n.echo)
	})
	t.Run("hashed pattern", func(t *testing.T) {
		n := start(t, []string{"127.0.0.1"})
		writeFile(t, n.knownHosts, caLine(n, knownhosts.HashHostname(knownhosts.Normalize(n.server.Addr))))
		roundTrip(t, newT(t, n.config()), "n1", n.echo)
	})
	t.Run("wrong principal", func(t *testing.T) {
		n := start(t, []string{"other.example"})
		writeFile(t, n.knownHosts, caLine(n, "[127.0.0.1]:"+itoa(n.server.Port())))
		_, err := newT(t, n.config()).Dial(testCtx(t), "n1", "tcp", n.echo)
		var unknown *HostKeyUnknownError
		if !errors.As(err, &unknown) || unknown.CertProblem == "" {
			t.Fatalf("Dial: %v, want *HostKeyUnknownError about the certificate", err)
		}
		if unknown.CAFingerprint != ssh.FingerprintSHA256(ca.PublicKey()) {
			t.Errorf("CAFingerprint = %s, want %s", unknown.CAFingerprint, ssh.FingerprintSHA256(ca.PublicKey()))
		}
	})
	t.Run("no CA for this host uses the plain key", func(t *testing.T) {
		// The server has a certificate, but known_hosts only pins its
		// plain key: as OpenSSH, rigger must not ask for the certificate.
		n := start(t, []string{"127.0.0.1"})
		writeFile(t, n.knownHosts, []byte(knownhosts.Line([]string{knownhosts.Normalize(n.server.Addr)}, hostKey.PublicKey())+"\n"))
		roundTrip(t, newT(t, n.config()), "n1", n.echo)
	})
}

func TestHostKeyPolicyOff(t *testing.T) {
	n := startNode(t, nodeOptions{})
	cfg := n.config()
	cfg.KnownHostsFiles = []string{filepath.Join(t.TempDir(), "none")}
	cfg.HostKeyPolicy = HostKeyPolicyOff
	var logs logBuffer
	cfg.Logger = logs.logger()
	roundTrip(t, newT(t, cfg), "n1", n.echo)
	if !strings.Contains(logs.String(), "host_key_policy: off") {
		t.Errorf("policy off was not warned about; logs:\n%s", logs.String())
	}
	if _, err := os.Stat(cfg.KnownHostsFiles[0]); err == nil {
		t.Error("policy off wrote a known_hosts file")
	}
}

func TestParseHostKeyPolicy(t *testing.T) {
	for _, s := range []string{"strict", "accept-new", "off"} {
		if p, err := ParseHostKeyPolicy(s); err != nil || string(p) != s {
			t.Errorf("ParseHostKeyPolicy(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "yes", "Strict", "tofu"} {
		if _, err := ParseHostKeyPolicy(s); err == nil {
			t.Errorf("ParseHostKeyPolicy(%q) succeeded", s)
		}
	}
}

func TestCAPatternMatch(t *testing.T) {
	hashed := knownhosts.HashHostname("node1.example")
	tests := []struct {
		name, patterns, host, port string
		want                       bool
	}{
		{"plain port 22", "node1.example", "node1.example", "22", true},
		{"plain other port", "node1.example", "node1.example", "2222", false},
		{"bracketed port", "[node1.example]:2222", "node1.example", "2222", true},
		{"wildcard", "*.example", "node1.example", "22", true},
		{"wildcard other domain", "*.example", "node1.other", "22", false},
		{"question mark", "node?.example", "node7.example", "22", true},
		{"list", "a.example,node1.example", "node1.example", "22", true},
		{"negation wins", "*.example,!node1.example", "node1.example", "22", false},
		{"negation alone", "!node1.example", "node2.example", "22", false},
		{"hashed", hashed, "node1.example", "22", true},
		{"hashed other", hashed, "node2.example", "22", false},
		// As knownhosts, which verifies the certificate, reads them.
		{"port without brackets", "node1.example:2222", "node1.example", "2222", true},
		{"no character classes", "node[12].example", "node1.example", "22", false},
		{"no escapes", `node\1.example`, "node1.example", "22", false},
		{"a trailing star needs a character", "node1.example*", "node1.example", "22", false},
		{"a hashed entry in a list is a name", "a.example," + hashed, "node1.example", "22", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := caPattern(strings.Split(tt.patterns, ",")).match(tt.host, tt.port); got != tt.want {
				t.Errorf("match(%q, %s:%s) = %v, want %v", tt.patterns, tt.host, tt.port, got, tt.want)
			}
		})
	}
}

// TestKnownHostsReparsedWhenChanged: load reuses its parse of known_hosts
// only while the file is unchanged: a key replaced by one of the same size
// at once is read, and so is one rewritten in place with the old
// modification time put back (the change time differs).
func TestKnownHostsReparsedWhenChanged(t *testing.T) {
	keyA, keyB := testnode.NewKey(t).PublicKey(), testnode.NewKey(t).PublicKey()
	file := filepath.Join(t.TempDir(), "known_hosts")
	line := func(k ssh.PublicKey) []byte { return []byte(knownhosts.Line([]string{"[10.0.0.1]:22"}, k) + "\n") }
	h, err := newHostKeys([]string{file}, HostKeyPolicyStrict, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 22}
	accepts := func(k ssh.PublicKey) bool {
		t.Helper()
		check, _, err := h.load()
		if err != nil {
			t.Fatal(err)
		}
		return check("10.0.0.1:22", addr, k) == nil
	}

	writeFile(t, file, line(keyA))
	if !accepts(keyA) {
		t.Fatal("key A not accepted")
	}
	writeFile(t, file, line(keyB)) // same size, at once
	if accepts(keyA) || !accepts(keyB) {
		t.Fatal("a key replaced right away was not read")
	}

	// Settled: the file changed long enough before it was read (here:
	// at all before; its change time cannot be put back).
	h.settle = 0
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	if !accepts(keyB) || !accepts(keyB) || !h.parsed.settled {
		t.Fatal("an unchanged file's parse is not settled")
	}
	// Rewritten in place, the old modification time put back: only the
	// change time differs, once the clock's granularity has passed since
	// the read, so the rewrite is repeated until it does.
	read := h.parsed.stamps[0].ctime
	rewrite := func() bool {
		f, err := os.OpenFile(file, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(line(keyA), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chtimes(file, old, old); err != nil {
			t.Fatal(err)
		}
		st, err := h.stampFiles()
		if err != nil {
			t.Fatal(err)
		}
		return st[0].ctime != read
	}
	if !testwait.Until(5*time.Second, time.Millisecond, rewrite) {
		t.Fatal("the file's change time did not move in 5 s")
	}
	if !accepts(keyA) || accepts(keyB) {
		t.Fatal("a key rewritten in place, its modification time put back, was not read")
	}
}
