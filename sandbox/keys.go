package sandbox

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ensureKey makes an ed25519 key pair in OpenSSH's format at path (private,
// 0600) and path.pub, unless path exists; it returns the public key.
func ensureKey(path, comment string) (ssh.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("read key %s: %w (remove it to make a new one)", path, err)
		}
		return signer.PublicKey(), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read key: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " " + comment + "\n"
	if err := os.WriteFile(path+".pub", []byte(line), 0o644); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	return sshPub, nil
}

// ensureKeys makes the sandbox's client key (accepted by every node for
// root), every node's host key, and the known_hosts file that lists them.
func (s *Sandbox) ensureKeys() error {
	pub, err := ensureKey(s.KeyPath, "rigger-sandbox-"+s.Name)
	if err != nil {
		return err
	}
	authorized := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " rigger-sandbox-" + s.Name + "\n"
	if err := os.WriteFile(s.authorizedKeysPath(), []byte(authorized), 0o600); err != nil {
		return fmt.Errorf("write authorized_keys: %w", err)
	}
	var kh strings.Builder
	for _, n := range s.Nodes {
		hostPub, err := ensureKey(n.hostKeyPath(), "root@"+n.Hostname)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		kh.WriteString(knownHostsLine(n, hostPub))
	}
	if err := os.WriteFile(s.KnownHostsPath, []byte(kh.String()), 0o644); err != nil {
		return fmt.Errorf("write known_hosts: %w", err)
	}
	return nil
}

// knownHostsLine is node n's line of known_hosts, by address and port as
// OpenSSH writes it (a bare address for port 22).
func knownHostsLine(n Node, key ssh.PublicKey) string {
	addr := knownhosts.Normalize(fmt.Sprintf("%s:%d", n.Address, n.Port))
	return knownhosts.Line([]string{addr}, key) + "\n"
}
