package gitrepo

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Auth is how rigger authenticates to the git server. Which fields are used
// depends on the URL: SSH URLs (ssh:// and scp-like user@host:path) use the
// key and known_hosts; http(s):// URLs use basic auth; file:// uses none.
type Auth struct {
	// SSHKeyFile is the private key for SSH URLs.
	SSHKeyFile string
	// SSHKeyPassphrase decrypts SSHKeyFile when it is encrypted.
	SSHKeyPassphrase string
	// KnownHostsFile is required for SSH URLs: the server's host key is
	// verified against it, never trusted on first use.
	KnownHostsFile string
	// Username is the HTTPS basic-auth user; "git" when only a Password
	// (or token) is set.
	Username string
	// Password is the HTTPS basic-auth password, or an access token.
	Password string
}

// redacted replaces secrets in error text.
const redacted = "xxxxx"

// remote is a parsed repository URL with its credentials split off.
type remote struct {
	url     string // the URL without any password: stored in the clone's config and shown in errors
	auth    transport.AuthMethod
	secrets []string // to redact from error text
}

// newRemote parses rawURL and builds its auth method. A password embedded in
// an http(s) URL is moved into basic auth (Auth.Password wins when both are
// set) so that it is never written to disk.
func newRemote(rawURL string, a Auth) (*remote, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse repository URL %s: %w", StripURL(rawURL), err)
	}
	r := &remote{url: StripURL(rawURL), secrets: secretsOf(rawURL, a)}
	switch ep.Protocol {
	case "file":
		return r, nil
	case "http", "https":
		user, pass := a.Username, a.Password
		if user == "" {
			user = ep.User
		}
		if pass == "" {
			pass = ep.Password
		}
		if user == "" && pass != "" {
			user = "git"
		}
		if user != "" || pass != "" {
			r.auth = &githttp.BasicAuth{Username: user, Password: pass}
		}
		return r, nil
	case "ssh":
		auth, err := sshAuth(ep, a)
		if err != nil {
			return nil, fmt.Errorf("ssh auth for %s: %w", r.url, err)
		}
		r.auth = auth
		return r, nil
	default:
		return nil, fmt.Errorf("repository URL %s: protocol %q is not supported: use https://, ssh:// or user@host:path", r.url, ep.Protocol)
	}
}

// StripURL removes the password from a URL's userinfo. scp-like URLs and
// paths are returned as they are.
func StripURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.Scheme == "" {
		return raw
	}
	if _, ok := u.User.Password(); !ok {
		return raw
	}
	u.User = url.User(u.User.Username())
	return u.String()
}

// sshAuth builds public-key auth that verifies the server against the
// known_hosts file.
func sshAuth(ep *transport.Endpoint, a Auth) (*gitssh.PublicKeys, error) {
	port := ep.Port
	if port == 0 {
		port = 22
	}
	hostport := net.JoinHostPort(ep.Host, strconv.Itoa(port))
	keyscan := fmt.Sprintf("ssh-keyscan -p %d %s >> FILE", port, ep.Host)
	if a.KnownHostsFile == "" {
		return nil, fmt.Errorf("no known_hosts file given: host keys are always verified; "+
			"pass --git-known-hosts FILE (create it with `%s`, then check the key with the server's admin)", keyscan)
	}
	if a.SSHKeyFile == "" {
		return nil, errors.New("no SSH private key given: pass --git-ssh-key FILE, or use an https:// URL with a token")
	}
	known, err := knownhosts.New(a.KnownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts file (create it with `%s`): %w", keyscan, err)
	}
	user := ep.User
	if user == "" {
		user = "git"
	}
	keys, err := gitssh.NewPublicKeysFromFile(user, a.SSHKeyFile, a.SSHKeyPassphrase)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("SSH key %s is encrypted: pass its passphrase", a.SSHKeyFile)
		}
		return nil, fmt.Errorf("load SSH key %s (check the file and its passphrase): %w", a.SSHKeyFile, err)
	}
	keys.HostKeyCallback = explainHostKey(known, a.KnownHostsFile)
	keys.HostKeyAlgorithms = knownAlgorithms(known, hostport)
	return keys, nil
}

// explainHostKey wraps a knownhosts callback so that its errors name the
// file, the host and what to do.
func explainHostKey(known ssh.HostKeyCallback, file string) ssh.HostKeyCallback {
	return func(host string, addr net.Addr, key ssh.PublicKey) error {
		err := known(host, addr, key)
		if err == nil {
			return nil
		}
		var keyErr *knownhosts.KeyError
		var revoked *knownhosts.RevokedError
		switch {
		case errors.As(err, &revoked):
			return fmt.Errorf("host key of %s is revoked in %s: the server must use a new key", host, file)
		case errors.As(err, &keyErr) && len(keyErr.Want) == 0:
			h, p, _ := net.SplitHostPort(host)
			return fmt.Errorf("host %s is not in known_hosts file %s: check its %s key fingerprint %s with the server's admin, then add it (ssh-keyscan -p %s %s >> %s)",
				host, file, key.Type(), ssh.FingerprintSHA256(key), p, h, file)
		case errors.As(err, &keyErr):
			return fmt.Errorf("host key of %s does not match known_hosts file %s (line %d): the server's key changed or someone is in the middle; ask the server's admin before you edit the file",
				host, file, keyErr.Want[0].Line)
		default:
			return fmt.Errorf("verify host key of %s against %s: %w", host, file, err)
		}
	}
}

// knownAlgorithms returns the host key algorithms to offer for hostport: the
// types of the keys known_hosts holds for it, so that the server is asked
// for a key we can verify. Nil (the defaults) when the host is unknown.
func knownAlgorithms(known ssh.HostKeyCallback, hostport string) []string {
	var keyErr *knownhosts.KeyError
	err := known(hostport, &net.TCPAddr{IP: net.IPv4zero}, probeKey{})
	if !errors.As(err, &keyErr) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, s := range a {
			if !seen[s] {
				seen[s] = true
				algos = append(algos, s)
			}
		}
	}
	for _, k := range keyErr.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		case ssh.CertAlgoRSAv01:
			add(ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01, ssh.CertAlgoRSAv01)
		default:
			add(t)
		}
	}
	return algos
}

// probeKey is a key no host has: checking it makes knownhosts list the keys
// it knows for a host.
type probeKey struct{}

func (probeKey) Type() string                        { return "rigger-probe" }
func (probeKey) Marshal() []byte                     { return []byte("rigger-probe") }
func (probeKey) Verify([]byte, *ssh.Signature) error { return errors.New("probe key verifies nothing") }

// redactError hides secrets in an error's text; errors.Is and errors.As
// still see the error it wraps.
type redactError struct {
	err     error
	secrets []string
}

func (e *redactError) Error() string {
	s := e.err.Error()
	for _, secret := range e.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
		for _, esc := range []string{url.QueryEscape(secret), strings.ReplaceAll(url.QueryEscape(secret), "+", "%20")} {
			if esc != secret {
				s = strings.ReplaceAll(s, esc, redacted)
			}
		}
	}
	return s
}

func (e *redactError) Unwrap() error { return e.err }

// redact wraps err so that none of secrets shows in its text.
func redact(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	return &redactError{err: err, secrets: secrets}
}

// secretsOf lists the secrets in rawURL and a, to hide from error text.
func secretsOf(rawURL string, a Auth) []string {
	var s []string
	for _, v := range []string{a.Password, a.SSHKeyPassphrase} {
		if v != "" {
			s = append(s, v)
		}
	}
	if ep, err := transport.NewEndpoint(rawURL); err == nil && ep.Password != "" {
		s = append(s, ep.Password)
	}
	return s
}
