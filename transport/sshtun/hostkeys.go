package sshtun

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyPolicy says what to do with a host key that known_hosts does not
// list (rigger.ssh.host_key_policy). A key that differs from the listed one
// is refused under every policy but HostKeyPolicyOff.
type HostKeyPolicy string

const (
	// HostKeyPolicyStrict refuses hosts whose key is not in known_hosts.
	HostKeyPolicyStrict HostKeyPolicy = "strict"
	// HostKeyPolicyAcceptNew trusts a host's key on first use and records
	// it in the first known_hosts file; later connections verify it.
	HostKeyPolicyAcceptNew HostKeyPolicy = "accept-new"
	// HostKeyPolicyOff checks nothing. Anyone on the path can impersonate
	// a node; rigger logs a warning for every connection.
	HostKeyPolicyOff HostKeyPolicy = "off"
)

// ParseHostKeyPolicy parses the value of rigger.ssh.host_key_policy.
func ParseHostKeyPolicy(s string) (HostKeyPolicy, error) {
	switch p := HostKeyPolicy(s); p {
	case HostKeyPolicyStrict, HostKeyPolicyAcceptNew, HostKeyPolicyOff:
		return p, nil
	}
	return "", fmt.Errorf("host_key_policy %q is not one of strict, accept-new, off", s)
}

// HostKeyUnknownError means known_hosts has no key for the host (policy
// strict), or the host presented a certificate no @cert-authority line
// accepts.
type HostKeyUnknownError struct {
	Node string
	Host string // as written in known_hosts: "10.0.0.1" or "[10.0.0.1]:2222"
	Addr string // host:port dialed
	Via  string
	// Fingerprint and KeyType are the presented key's (for a certificate,
	// the certified key's).
	Fingerprint string
	KeyType     string
	Files       []string // the known_hosts files searched
	// CertProblem is set when the host presented a certificate that was
	// not accepted, and says why.
	CertProblem string
	// CAFingerprint is the certificate's signing CA, when CertProblem is set.
	CAFingerprint string
}

func (*HostKeyUnknownError) TransportNodeError() {}

func (e *HostKeyUnknownError) Error() string {
	files := strings.Join(e.Files, ", ")
	if e.CertProblem != "" {
		return fmt.Sprintf("node %s: host certificate of %s (CA %s) was not accepted: %s: check the @cert-authority "+
			"line for %s in %s", e.Node, e.Addr, e.CAFingerprint, e.CertProblem, e.Host, files)
	}
	host, port, _ := net.SplitHostPort(e.Addr)
	return fmt.Sprintf("node %s: host key of %s (%s %s) is not in known_hosts (%s): check that fingerprint on the node "+
		"(ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub), then add the key (ssh-keyscan -p %s -t %s %s >> %s), "+
		"or set rigger.ssh.host_key_policy: accept-new to trust it on first use",
		e.Node, e.Host, e.KeyType, e.Fingerprint, files, keyFileType(e.KeyType), port, keyFileType(e.KeyType), host, e.firstFile())
}

func (e *HostKeyUnknownError) firstFile() string {
	if len(e.Files) == 0 {
		return "~/.ssh/known_hosts"
	}
	return e.Files[0]
}

// HostKeyChangedError means the host presented a key that differs from the
// one known_hosts lists for it: the node was reinstalled, or someone is
// intercepting the connection. It is never accepted automatically.
type HostKeyChangedError struct {
	Node    string
	Host    string // as written in known_hosts
	Addr    string
	Via     string
	KeyType string
	Got     string // SHA256 fingerprint presented
	Want    string // SHA256 fingerprint known
	File    string // where the known key is
	Line    int
}

func (*HostKeyChangedError) TransportNodeError() {}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("node %s: HOST KEY CHANGED for %s: it presents %s %s but %s:%d lists %s. Someone may be "+
		"intercepting the connection, or the node was reinstalled. If you know the new key is right, remove the old "+
		"one (ssh-keygen -R '%s' -f %s) and connect again",
		e.Node, e.Host, e.KeyType, e.Got, e.File, e.Line, e.Want, e.Host, e.File)
}

// HostKeyRevokedError means the host presented a key that known_hosts
// marks @revoked.
type HostKeyRevokedError struct {
	Node        string
	Host        string
	Fingerprint string
	File        string
	Line        int
}

func (*HostKeyRevokedError) TransportNodeError() {}

func (e *HostKeyRevokedError) Error() string {
	return fmt.Sprintf("node %s: host key %s of %s is marked @revoked in %s:%d: the node must get a new host key",
		e.Node, e.Fingerprint, e.Host, e.File, e.Line)
}

// hostKeys checks host keys against known_hosts files under a policy. It
// reads the files for every connection, so that keys recorded meanwhile,
// by this process or another one, count; it parses them again only when
// their content changed (parsed): with a known_hosts of N hosts, parsing
// it for each of N connections made a plan's cost grow as N² (6 ms of a
// 2.5 ms-per-node plan at 500 simulated nodes, and most of its memory).
type hostKeys struct {
	files  []string
	policy HostKeyPolicy
	log    *slog.Logger
	probe  ssh.PublicKey // a key no host has, to ask knownhosts what it knows
	mu     sync.Mutex    // serializes recording in this process; flock across processes

	parsedMu sync.Mutex
	parsed   *parsedKnownHosts
	settle   time.Duration // settleTime; tests shorten it
}

// parsedKnownHosts is what the known_hosts files said, and the hash of
// their names and content when they said it.
type parsedKnownHosts struct {
	sum   [sha256.Size]byte
	check ssh.HostKeyCallback
	cas   []caPattern
	// stamps are the files' metadata before they were read; settled says
	// that each had last changed long enough before the read (settleTime)
	// for a later write to change its stamp: then unchanged stamps mean
	// unchanged content, and the files need not be read again.
	stamps  []fileStamp
	settled bool
}

// fileStamp is what stat says of a known_hosts file.
type fileStamp struct {
	name         string
	size, mtime  int64
	inode, ctime int64
}

// settleTime is how long before it was read a file must have last
// changed for its stamp to stand for its content: more than the
// granularity of file times, during which a write of the same size would
// leave the stamp as it was.
const settleTime = 2 * time.Second

// stampFiles stats the files that exist.
func (h *hostKeys) stampFiles() ([]fileStamp, error) {
	var out []fileStamp
	for _, f := range h.files {
		fi, err := os.Stat(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
		st := fileStamp{name: f, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			st.inode, st.ctime = int64(sys.Ino), sys.Ctim.Nano()
		}
		out = append(out, st)
	}
	return out, nil
}

func newHostKeys(files []string, policy HostKeyPolicy, log *slog.Logger) (*hostKeys, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return &hostKeys{files: files, policy: policy, log: log, probe: probe, settle: settleTime}, nil
}

// target is what a host key check needs to know about the connection.
type target struct {
	node string
	addr string // host:port dialed
	via  string
}

// prepare returns the host key callback and the host key algorithms to
// offer for one connection. Known keys decide the algorithms, so that a
// host with several keys presents the one known_hosts has (as OpenSSH does).
func (h *hostKeys) prepare(t target, st *handshakeState) (ssh.HostKeyCallback, []string, error) {
	if h.policy == HostKeyPolicyOff {
		return func(string, net.Addr, ssh.PublicKey) error {
			h.log.Warn("host key not checked (rigger.ssh.host_key_policy: off); the connection can be intercepted",
				"node", t.node, "addr", t.addr)
			st.hostKeyDone(nil)
			return nil
		}, nil, nil
	}
	check, cas, err := h.load()
	if err != nil {
		return nil, nil, err
	}
	algos := h.algorithms(check, cas, t.addr)
	callback := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := h.verify(check, t, hostname, remote, key)
		st.hostKeyDone(err)
		return err
	}
	return callback, algos, nil
}

// load reads the known_hosts files that exist, and returns the check of
// the keys they list and their @cert-authority lines' patterns: those
// parsed before when the files' content is the same. Files whose stamps
// have not changed since they were parsed, long after their last change,
// are not read again: with a thousand hosts, reading them for each
// connection was the plan's largest allocation.
func (h *hostKeys) load() (ssh.HostKeyCallback, []caPattern, error) {
	stamps, err := h.stampFiles()
	if err != nil {
		return nil, nil, err
	}
	h.parsedMu.Lock()
	defer h.parsedMu.Unlock()
	if p := h.parsed; p != nil && p.settled && slices.Equal(p.stamps, stamps) {
		return p.check, p.cas, nil
	}
	readAt := time.Now()
	var (
		existing []string
		contents [][]byte
		hash     = sha256.New()
	)
	for _, f := range h.files {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read known_hosts: %w", err)
		}
		existing, contents = append(existing, f), append(contents, data)
		fmt.Fprintf(hash, "%d:%s%d:", len(f), f, len(data))
		hash.Write(data)
	}
	var sum [sha256.Size]byte
	hash.Sum(sum[:0])
	settled := true
	for _, st := range stamps {
		settled = settled && readAt.Sub(time.Unix(0, max(st.mtime, st.ctime))) > h.settle
	}
	if p := h.parsed; p != nil && p.sum == sum {
		p.stamps, p.settled = stamps, settled
		return p.check, p.cas, nil
	}
	// knownhosts reads the files again: should they have changed since,
	// the next call sees another sum and parses them again.
	check, err := knownhosts.New(existing...)
	if err != nil {
		return nil, nil, fmt.Errorf("read known_hosts: %w", err)
	}
	var cas []caPattern
	for _, data := range contents {
		cas = append(cas, parseCAPatterns(data)...)
	}
	h.parsed = &parsedKnownHosts{sum: sum, check: check, cas: cas, stamps: stamps, settled: settled}
	return check, cas, nil
}

func (h *hostKeys) verify(check ssh.HostKeyCallback, t target, hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := check(hostname, remote, key)
	if err == nil {
		return nil
	}
	host := knownhosts.Normalize(t.addr)
	var keyErr *knownhosts.KeyError
	var revoked *knownhosts.RevokedError
	switch {
	case errors.As(err, &revoked):
		return &HostKeyRevokedError{Node: t.node, Host: host, Fingerprint: ssh.FingerprintSHA256(key),
			File: revoked.Revoked.Filename, Line: revoked.Revoked.Line}
	case errors.As(err, &keyErr) && len(keyErr.Want) > 0:
		return h.changed(t, key, keyErr.Want)
	case errors.As(err, &keyErr):
		if h.policy == HostKeyPolicyAcceptNew {
			return h.record(t, hostname, remote, key)
		}
		return &HostKeyUnknownError{Node: t.node, Host: host, Addr: t.addr, Via: t.via,
			Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(), Files: h.files}
	}
	// The host presented a certificate: knownhosts says why it refused it.
	e := &HostKeyUnknownError{Node: t.node, Host: host, Addr: t.addr, Via: t.via,
		Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(), Files: h.files, CertProblem: err.Error()}
	if cert, ok := key.(*ssh.Certificate); ok {
		e.Fingerprint, e.KeyType = ssh.FingerprintSHA256(cert.Key), cert.Key.Type()
		e.CAFingerprint = ssh.FingerprintSHA256(cert.SignatureKey)
	}
	return e
}

func (h *hostKeys) changed(t target, key ssh.PublicKey, want []knownhosts.KnownKey) error {
	known := want[0]
	for _, w := range want {
		if w.Key.Type() == key.Type() {
			known = w
			break
		}
	}
	return &HostKeyChangedError{Node: t.node, Host: knownhosts.Normalize(t.addr), Addr: t.addr, Via: t.via,
		KeyType: key.Type(), Got: ssh.FingerprintSHA256(key), Want: ssh.FingerprintSHA256(known.Key),
		File: known.Filename, Line: known.Line}
}

// record appends a new host key to the first known_hosts file, creating
// it (0600, its directory 0700) if needed. It holds an exclusive flock on
// the file and looks again under it, so that two rigger processes meeting
// the same new host record it once, and a key recorded meanwhile by
// another process is verified rather than overwritten.
func (h *hostKeys) record(t target, hostname string, remote net.Addr, key ssh.PublicKey) error {
	if _, ok := key.(*ssh.Certificate); ok {
		// Only plain keys are trusted on first use; certificates need a CA.
		return &HostKeyUnknownError{Node: t.node, Host: knownhosts.Normalize(t.addr), Addr: t.addr, Via: t.via,
			Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(), Files: h.files,
			CertProblem: "no @cert-authority line matches the host"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	file := h.files[0]
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("node %s: record host key in %s: %w", t.node, file, err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("node %s: record host key in %s: %w", t.node, file, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("node %s: lock %s: %w", t.node, file, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)

	check, _, err := h.load()
	if err != nil {
		return err
	}
	var keyErr *knownhosts.KeyError
	switch err := check(hostname, remote, key); {
	case err == nil:
		return nil
	case errors.As(err, &keyErr) && len(keyErr.Want) > 0:
		return h.changed(t, key, keyErr.Want)
	}

	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("node %s: record host key in %s: %w", t.node, file, err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(t.addr)}, key) + "\n"
	if len(data) > 0 && data[len(data)-1] != '\n' {
		line = "\n" + line
	}
	if _, err := f.WriteString(line); err != nil {
		return fmt.Errorf("node %s: record host key in %s: %w", t.node, file, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("node %s: record host key in %s: %w", t.node, file, err)
	}
	h.log.Warn("trusted a new host key on first use (rigger.ssh.host_key_policy: accept-new)",
		"node", t.node, "addr", t.addr, "key", key.Type()+" "+ssh.FingerprintSHA256(key), "file", file)
	return nil
}

// algorithms returns the host key algorithms to offer to addr, or nil for
// x/crypto's defaults. Like OpenSSH: certificates only when a
// @cert-authority line matches the host; the known keys' types when
// known_hosts lists keys for it; otherwise plain keys of any type.
func (h *hostKeys) algorithms(check ssh.HostKeyCallback, cas []caPattern, addr string) []string {
	var known []string
	var keyErr *knownhosts.KeyError
	if err := check(addr, &net.TCPAddr{IP: net.IPv4zero}, h.probe); errors.As(err, &keyErr) {
		for _, k := range keyErr.Want {
			for _, a := range algorithmsFor(k.Key.Type()) {
				if !slices.Contains(known, a) {
					known = append(known, a)
				}
			}
		}
	}
	host, port, _ := net.SplitHostPort(addr)
	caMatches := slices.ContainsFunc(cas, func(p caPattern) bool { return p.match(host, port) })

	var plain, certs []string
	for _, a := range ssh.SupportedAlgorithms().HostKeys {
		if strings.Contains(a, "-cert-") {
			certs = append(certs, a)
		} else {
			plain = append(plain, a)
		}
	}
	switch {
	case caMatches && len(known) > 0:
		return append(certs, known...)
	case caMatches:
		return nil // defaults: certificates first, then plain keys
	case len(known) > 0:
		return known
	default:
		return plain
	}
}

// algorithmsFor maps a key type to the signature algorithms that prove it.
func algorithmsFor(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	}
	return []string{keyType}
}

// keyFileType maps a key type to the name sshd's host key file uses.
func keyFileType(keyType string) string {
	switch {
	case strings.Contains(keyType, "ed25519"):
		return "ed25519"
	case strings.Contains(keyType, "ecdsa"):
		return "ecdsa"
	case strings.Contains(keyType, "rsa"):
		return "rsa"
	}
	return keyType
}

// caPattern is the host patterns of one @cert-authority line: a
// comma-separated list, or a single hashed entry ("|1|salt|hash"). knownhosts
// verifies certificates itself but does not say whether a CA exists for a
// host, which is what choosing the algorithms needs; so this reads the
// patterns exactly as knownhosts does (FuzzCAPatterns holds it to that).
type caPattern []string

// parseCAPatterns reads the host patterns of the @cert-authority lines of
// a known_hosts file.
func parseCAPatterns(data []byte) []caPattern {
	var out []caPattern
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		marker, rest := nextWord(strings.Trim(sc.Text(), " \t"))
		hosts, _ := nextWord(rest)
		if marker != "@cert-authority" || hosts == "" {
			continue
		}
		if strings.HasPrefix(hosts, "|") {
			out = append(out, caPattern{hosts})
		} else {
			out = append(out, strings.Split(hosts, ","))
		}
	}
	return out
}

// nextWord splits the first field off a known_hosts line as OpenSSH and
// knownhosts do: spaces and tabs separate fields, and other white space
// (a vertical tab, say) is part of a host pattern.
func nextWord(line string) (word, rest string) {
	i := strings.IndexAny(line, " \t")
	if i < 0 {
		return line, ""
	}
	return line[:i], strings.Trim(line[i:], " \t")
}

// match reports whether host:port matches the patterns: a negated pattern
// that matches wins, a pattern without a port is for port 22.
func (p caPattern) match(host, port string) bool {
	if len(p) == 1 && strings.HasPrefix(p[0], "|") {
		return hashedMatch(p[0], knownhosts.Normalize(net.JoinHostPort(host, port)))
	}
	matched := false
	for _, pat := range p {
		neg := strings.HasPrefix(pat, "!")
		pat = strings.TrimPrefix(pat, "!")
		if pat == "" || !patternMatch(pat, host, port) {
			continue
		}
		if neg {
			return false
		}
		matched = true
	}
	return matched
}

// patternMatch matches one pattern, "host" or "[host]:port" (and, as
// knownhosts reads it, "host:port").
func patternMatch(pat, host, port string) bool {
	h, p, err := net.SplitHostPort(pat)
	if err != nil {
		h, p = pat, "22"
	}
	return p == port && wildcardMatch(h, host)
}

// wildcardMatch reports whether s matches pat, in which * stands for any
// bytes and ? for one (no classes, no escapes), as knownhosts matches:
// there, a * that ends the pattern stands for one byte or more. Unlike
// knownhosts' backtracking, it takes at most len(pat)*len(s) steps.
func wildcardMatch(pat, s string) bool {
	if trimmed := strings.TrimRight(pat, "*"); trimmed != pat {
		pat = trimmed + "?*"
	}
	p, i := 0, 0
	star, next := -1, 0 // the last * seen, and where its match would end next
	for i < len(s) {
		switch {
		case p < len(pat) && pat[p] == '*':
			star, next = p, i
			p++
		case p < len(pat) && (pat[p] == '?' || pat[p] == s[i]):
			p++
			i++
		case star >= 0:
			next++
			p, i = star+1, next
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// hashedMatch checks a "|1|salt|hash" host entry (HMAC-SHA1 of the host).
func hashedMatch(entry, host string) bool {
	parts := strings.Split(entry, "|")
	if len(parts) != 4 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	want, err2 := base64.StdEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil {
		return false
	}
	mac := hmac.New(sha1.New, salt)
	mac.Write([]byte(host))
	return hmac.Equal(mac.Sum(nil), want)
}
