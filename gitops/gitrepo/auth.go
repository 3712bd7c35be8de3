package gitrepo

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

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
	// Username is the HTTPS basic-auth user that goes with Password; "git"
	// when empty. A user in the URL wins, as it does for git.
	Username string
	// Password is the HTTPS basic-auth password, or an access token.
	Password string
	// SSHConnectTimeout bounds the TCP connect to an SSH server;
	// DefaultSSHConnectTimeout when zero. Without it a connect whose
	// packets go nowhere (a pod started before its node's network rules
	// were back) would wait for the kernel to give up, minutes later.
	SSHConnectTimeout time.Duration
}

// DefaultSSHConnectTimeout is Auth.SSHConnectTimeout's default.
const DefaultSSHConnectTimeout = 30 * time.Second

// redacted replaces secrets in error text.
const redacted = "xxxxx"

// unparsableURL stands in for a URL that does not parse: it is not shown,
// as it may hold a credential in a form the parser could not split off.
const unparsableURL = "(a URL that does not parse)"

// remote is a parsed repository URL with its credentials split off.
type remote struct {
	url     string // StripURL of the URL: stored in the clone's config and shown
	auth    transport.AuthMethod
	secrets []string // to redact from error text
}

// newRemote parses rawURL and builds its auth method. Credentials in an
// http(s) URL's user part are used as git uses them, and never stored or
// shown: "https://user:password@host/…" is basic auth, "https://token@host/…"
// a token as the user name (as GitHub takes it), "https://user@host/…" names
// the user that goes with Auth.Password. A password both in the URL and in
// Auth is refused: which one is meant is not clear.
func newRemote(rawURL string, a Auth) (*remote, error) {
	shown := StripURL(rawURL)
	if shown == unparsableURL {
		return nil, errors.New("the repository URL does not parse (it is not shown: it may hold a credential): " +
			"write it as https://host/path, ssh://user@host/path or user@host:path, with the token in --git-token-file")
	}
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse repository URL %s: %w", shown, err)
	}
	r := &remote{url: shown, secrets: secretsOf(rawURL, a)}
	switch ep.Protocol {
	case "file":
		return r, nil
	case "http", "https":
		user, pass := a.Username, a.Password
		switch {
		case ep.Password != "" && a.Password != "":
			return nil, fmt.Errorf("repository URL %s: a password is both in the URL and in the token file or $RIGGER_GIT_TOKEN: "+
				"remove it from the URL (--git-token-file keeps it out of the process list)", shown)
		case ep.User != "" && a.Password == "":
			user, pass = ep.User, ep.Password
		case ep.User != "":
			user = ep.User
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

// StripURL is a repository URL as it may be shown and stored: without the
// user part of an http(s) URL (where it may be a token), and without the
// password of any other (ssh://user@ names the account). scp-like URLs
// (user@host:path) and paths are returned as they are; a URL that does not
// parse is not returned at all, as it may hold a credential.
func StripURL(raw string) string {
	if !strings.Contains(raw, "://") {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return unparsableURL
		}
		return raw
	}
	if u.User == nil {
		return raw
	}
	switch strings.ToLower(u.Scheme) {
	case "ssh", "git+ssh", "ssh+git":
		u.User = url.User(u.User.Username())
	default:
		u.User = nil
	}
	return u.String()
}

// timedKeys is public-key auth whose TCP connect gives up after timeout
// (go-git bounds its dial by ssh.ClientConfig.Timeout, not by the
// fetch's context).
type timedKeys struct {
	*gitssh.PublicKeys
	timeout time.Duration
}

func (k timedKeys) ClientConfig() (*ssh.ClientConfig, error) {
	c, err := k.PublicKeys.ClientConfig()
	if err != nil {
		return nil, err
	}
	c.Timeout = k.timeout
	return c, nil
}

// sshAuth builds public-key auth that verifies the server against the
// known_hosts file.
func sshAuth(ep *transport.Endpoint, a Auth) (gitssh.AuthMethod, error) {
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
	timeout := a.SSHConnectTimeout
	if timeout <= 0 {
		timeout = DefaultSSHConnectTimeout
	}
	return timedKeys{PublicKeys: keys, timeout: timeout}, nil
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

// secretsOf lists the secrets in rawURL and a, to hide from error text: the
// passwords, and an http(s) URL's user when it comes without a password
// (a token).
func secretsOf(rawURL string, a Auth) []string {
	var s []string
	for _, v := range []string{a.Password, a.SSHKeyPassphrase} {
		if v != "" {
			s = append(s, v)
		}
	}
	if ep, err := transport.NewEndpoint(rawURL); err == nil {
		switch {
		case ep.Password != "":
			s = append(s, ep.Password)
		case ep.User != "" && a.Password == "" && (ep.Protocol == "http" || ep.Protocol == "https"):
			s = append(s, ep.User)
		}
	}
	return s
}
