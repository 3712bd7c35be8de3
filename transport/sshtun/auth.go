package sshtun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// credentials are one host's parsed keys and certificate, ready to offer on
// every connection. They are built once, before any connection is made.
type credentials struct {
	user  string
	keys  []offer          // keys from ssh_key / ssh_key_path, certificate first when given
	cert  *ssh.Certificate // ssh_cert / ssh_cert_path, to pair with an agent key
	certs string           // where cert came from, for messages
	agent bool             // offer the agent's keys
	now   func() time.Time // for certificate validity
	sock  string           // ssh-agent socket
}

// offer is a key offered to a server, with where it came from.
type offer struct {
	signer ssh.Signer
	label  string
}

// KeyError means a configured private key or certificate cannot be used.
// It never contains key material.
type KeyError struct {
	Node string
	// Source names the key: "ssh_key_path /root/.ssh/id_rsa", "ssh_key".
	Source string
	// Path is the key's file, empty for an inline key.
	Path string
	// Encrypted is set when the key needs a passphrase.
	Encrypted bool
	Err       error
}

func (*KeyError) TransportNodeError() {}

func (e *KeyError) Error() string {
	if e.Encrypted {
		add := "ssh-add " + e.Path
		if e.Path == "" {
			add = "write it to a file and ssh-add that file"
		}
		return fmt.Sprintf("node %s: %s is encrypted: load it into ssh-agent (%s) and set ssh_agent_auth: true, "+
			"or use an unencrypted deploy key", e.Node, e.Source, add)
	}
	return fmt.Sprintf("node %s: cannot use %s: %v", e.Node, e.Source, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// AuthError means the node's SSH server refused every key rigger offered.
type AuthError struct {
	Node    string
	Addr    string
	Via     string // the jump host, if any
	User    string
	Offered []string // the keys offered, by source and fingerprint
	Err     error
}

func (*AuthError) TransportNodeError() {}

func (e *AuthError) Error() string {
	via := ""
	if e.Via != "" {
		via = " via " + e.Via
	}
	offered := "no key at all (is the agent empty? ssh-add -l)"
	if len(e.Offered) > 0 {
		offered = strings.Join(e.Offered, ", ")
	}
	return fmt.Sprintf("node %s: %s%s refused SSH login as user %q; offered %s. "+
		"Check that user is right, that the public key is in ~%s/.ssh/authorized_keys on the node "+
		"(for a certificate: that sshd trusts its CA with TrustedUserCAKeys and that it lists %q as a principal), "+
		"and the node's sshd log (journalctl -u ssh) for the reason",
		e.Node, e.Addr, via, e.User, offered, e.User, e.User)
}

func (e *AuthError) Unwrap() error { return e.Err }

// newCredentials reads and parses h's keys. node names the host in errors.
func newCredentials(node string, h Host, agentSocket string, now func() time.Time) (*credentials, error) {
	c := &credentials{user: h.User, agent: h.AgentAuth, now: now, sock: agentSocket}
	if h.AgentAuth && agentSocket == "" {
		return nil, fmt.Errorf("node %s: ssh_agent_auth is true but SSH_AUTH_SOCK is not set: "+
			"start ssh-agent, add the key with ssh-add, and run rigger in that environment", node)
	}

	var cert *ssh.Certificate
	if len(h.Cert) > 0 || h.CertPath != "" {
		var err error
		cert, c.certs, err = loadCert(node, h)
		if err != nil {
			return nil, err
		}
		c.cert = cert
	}

	var signer ssh.Signer
	var source string
	switch {
	case len(h.Key) > 0:
		source = "ssh_key"
		s, err := parseKey(node, source, "", h.Key, h.AgentAuth)
		if err != nil {
			return nil, err
		}
		signer = s
	case h.KeyPath != "":
		p, err := expandHome(h.KeyPath)
		if err != nil {
			return nil, &KeyError{Node: node, Source: "ssh_key_path " + h.KeyPath, Err: err}
		}
		source = "ssh_key_path " + p
		pem, err := os.ReadFile(p)
		if err != nil {
			return nil, &KeyError{Node: node, Source: source, Path: p, Err: err}
		}
		if signer, err = parseKey(node, source, p, pem, h.AgentAuth); err != nil {
			return nil, err
		}
	}

	if signer != nil {
		if cert != nil {
			if !bytes.Equal(cert.Key.Marshal(), signer.PublicKey().Marshal()) {
				return nil, &KeyError{Node: node, Source: c.certs, Err: fmt.Errorf("certificate is for key %s, not for the key of %s (%s)",
					ssh.FingerprintSHA256(cert.Key), source, ssh.FingerprintSHA256(signer.PublicKey()))}
			}
			cs, err := ssh.NewCertSigner(cert, signer)
			if err != nil {
				return nil, &KeyError{Node: node, Source: c.certs, Err: err}
			}
			c.keys = append(c.keys, offer{cs, describeCert(c.certs, cert)})
		}
		c.keys = append(c.keys, offer{signer, fmt.Sprintf("%s (%s)", source, describeKey(signer.PublicKey()))})
	} else if cert != nil && !h.AgentAuth {
		return nil, &KeyError{Node: node, Source: c.certs, Err: errors.New("a certificate needs its private key: set ssh_key_path or ssh_agent_auth: true")}
	}
	return c, nil
}

// parseKey parses a private key. An encrypted key gives a nil signer when
// the agent is to be used (it may hold the key), a KeyError otherwise.
func parseKey(node, source, path string, pem []byte, agentAuth bool) (ssh.Signer, error) {
	s, err := ssh.ParsePrivateKey(pem)
	if err == nil {
		return s, nil
	}
	var pm *ssh.PassphraseMissingError
	switch {
	case !errors.As(err, &pm):
		// The parser's message says nothing about the key's contents.
		return nil, &KeyError{Node: node, Source: source, Path: path, Err: fmt.Errorf("not a usable private key: %w", err)}
	case agentAuth:
		return nil, nil
	default:
		return nil, &KeyError{Node: node, Source: source, Path: path, Encrypted: true, Err: err}
	}
}

func loadCert(node string, h Host) (*ssh.Certificate, string, error) {
	data, source := h.Cert, "ssh_cert"
	if len(data) == 0 {
		p, err := expandHome(h.CertPath)
		if err != nil {
			return nil, "", &KeyError{Node: node, Source: "ssh_cert_path " + h.CertPath, Err: err}
		}
		source = "ssh_cert_path " + p
		if data, err = os.ReadFile(p); err != nil {
			return nil, "", &KeyError{Node: node, Source: source, Path: p, Err: err}
		}
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(data)
	if err != nil {
		return nil, "", &KeyError{Node: node, Source: source, Err: errors.New("not an OpenSSH certificate (the contents of a -cert.pub file)")}
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok || cert.CertType != ssh.UserCert {
		return nil, "", &KeyError{Node: node, Source: source, Err: errors.New("not an OpenSSH user certificate")}
	}
	return cert, source, nil
}

// checkCertValid reports an expired or not yet valid certificate, which
// servers refuse without saying why.
func (c *credentials) checkCertValid(node string) error {
	if c.cert == nil {
		return nil
	}
	now := uint64(c.now().Unix())
	if c.cert.ValidBefore != ssh.CertTimeInfinity && now >= c.cert.ValidBefore {
		return &KeyError{Node: node, Source: c.certs, Err: fmt.Errorf("certificate expired at %s: renew it",
			time.Unix(int64(c.cert.ValidBefore), 0).UTC().Format(time.RFC3339))}
	}
	if now < c.cert.ValidAfter {
		return &KeyError{Node: node, Source: c.certs, Err: fmt.Errorf("certificate is not valid before %s",
			time.Unix(int64(c.cert.ValidAfter), 0).UTC().Format(time.RFC3339))}
	}
	return nil
}

// authMethod returns the publickey method for one connection, and a
// function to call once the handshake is over. What was offered is
// recorded in st for an AuthError.
func (c *credentials) authMethod(ctx context.Context, st *handshakeState) (ssh.AuthMethod, func(), error) {
	var agentSigners []ssh.Signer
	done := func() {}
	if c.agent {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", c.sock)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to ssh-agent at %s (SSH_AUTH_SOCK): %w", c.sock, err)
		}
		done = func() { conn.Close() }
		signers, err := agent.NewClient(conn).Signers()
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("list ssh-agent keys: %w", err)
		}
		agentSigners = signers
	}
	offers := append([]offer(nil), c.keys...)
	for _, s := range agentSigners {
		if c.cert != nil && bytes.Equal(c.cert.Key.Marshal(), s.PublicKey().Marshal()) {
			if cs, err := ssh.NewCertSigner(c.cert, s); err == nil {
				offers = append([]offer{{cs, describeCert(c.certs, c.cert) + " with its key from ssh-agent"}}, offers...)
			}
		}
		offers = append(offers, offer{s, "ssh-agent key (" + describeKey(s.PublicKey()) + ")"})
	}
	method := ssh.PublicKeysCallback(func() ([]ssh.Signer, error) {
		signers := make([]ssh.Signer, len(offers))
		labels := make([]string, len(offers))
		for i, o := range offers {
			signers[i], labels[i] = o.signer, o.label
		}
		st.offered(labels)
		return signers, nil
	})
	return method, done, nil
}

func describeKey(k ssh.PublicKey) string {
	t := strings.TrimPrefix(k.Type(), "ssh-")
	return strings.ToUpper(strings.SplitN(t, "-", 2)[0]) + " " + ssh.FingerprintSHA256(k)
}

func describeCert(source string, c *ssh.Certificate) string {
	return fmt.Sprintf("%s (certificate %q for %s, principals %s)", source, c.KeyId,
		ssh.FingerprintSHA256(c.Key), strings.Join(c.ValidPrincipals, ","))
}
