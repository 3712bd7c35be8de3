package sshtun

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/rigger/rigger/transport/internal/testnode"
)

func TestAuthRefused(t *testing.T) {
	n := startNode(t, nodeOptions{})
	wrong, pem := testnode.NewKeyPEM(t, nil)
	wrongPath := filepath.Join(t.TempDir(), "deploy_key")
	writeFile(t, wrongPath, pem)

	tests := map[string]func(*Config){
		"wrong key":  func(c *Config) { c.Nodes[0].KeyPath = wrongPath },
		"wrong user": func(c *Config) { c.Nodes[0].User = "ubuntu" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := n.config()
			mutate(&cfg)
			_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
			var auth *AuthError
			if !errors.As(err, &auth) {
				t.Fatalf("Dial: %v (%T), want *AuthError", err, err)
			}
			user, key := cfg.Nodes[0].User, cfg.Nodes[0].KeyPath
			fp := ssh.FingerprintSHA256(n.key.PublicKey())
			if key == wrongPath {
				fp = ssh.FingerprintSHA256(wrong.PublicKey())
			}
			for _, want := range []string{`"` + user + `"`, key, fp, "authorized_keys"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestInlineKeyNeverInErrors(t *testing.T) {
	n := startNode(t, nodeOptions{})
	_, pem := testnode.NewKeyPEM(t, nil)
	cfg := n.config()
	cfg.Nodes[0].KeyPath = ""
	cfg.Nodes[0].Key = pem
	_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
	var auth *AuthError
	if !errors.As(err, &auth) {
		t.Fatalf("Dial: %v, want *AuthError", err)
	}
	body := strings.Split(string(pem), "\n")[1] // the first line of key material
	if strings.Contains(err.Error(), body) {
		t.Errorf("error contains key material: %v", err)
	}
	if !strings.Contains(err.Error(), "ssh_key (") {
		t.Errorf("error %q does not name the inline ssh_key", err)
	}

	cfg.Nodes[0].Key = []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LWJ1dC1icm9rZW4=\n-----END OPENSSH PRIVATE KEY-----\n")
	_, err = New(cfg)
	var keyErr *KeyError
	if !errors.As(err, &keyErr) || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("New with a broken inline key: %v, want a *KeyError without the key", err)
	}
}

func TestEncryptedKey(t *testing.T) {
	n := startNode(t, nodeOptions{})
	_, pem := testnode.NewKeyPEM(t, []byte("passphrase"))
	path := filepath.Join(t.TempDir(), "id_ed25519")
	writeFile(t, path, pem)
	cfg := n.config()
	cfg.Nodes[0].KeyPath = path
	_, err := New(cfg)
	var keyErr *KeyError
	if !errors.As(err, &keyErr) || !keyErr.Encrypted {
		t.Fatalf("New: %v, want an encrypted *KeyError", err)
	}
	for _, want := range []string{"ssh-add " + path, "ssh_agent_auth: true", "node n1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// startAgent serves an ssh-agent holding keys on a Unix socket.
func startAgent(t *testing.T, keys ...agent.AddedKey) string {
	t.Helper()
	keyring := agent.NewKeyring()
	for _, k := range keys {
		if err := keyring.Add(k); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				agent.ServeAgent(keyring, c)
			}()
		}
	}()
	return sock
}

func TestAgentAuth(t *testing.T) {
	raw, signer := rawKey(t)
	n := startNode(t, nodeOptions{server: testnode.Options{
		Users: map[string][]ssh.PublicKey{testUser: {signer.PublicKey()}},
	}})

	t.Run("agent only", func(t *testing.T) {
		cfg := n.config()
		cfg.Nodes[0].KeyPath = ""
		cfg.Nodes[0].AgentAuth = true
		cfg.AgentSocket = startAgent(t, agent.AddedKey{PrivateKey: raw})
		roundTrip(t, newT(t, cfg), "n1", n.echo)
	})
	t.Run("encrypted key held by the agent", func(t *testing.T) {
		_, encrypted := testnode.NewKeyPEM(t, []byte("pw")) // a different, locked key on disk
		path := filepath.Join(t.TempDir(), "id")
		writeFile(t, path, encrypted)
		cfg := n.config()
		cfg.Nodes[0].KeyPath = path
		cfg.Nodes[0].AgentAuth = true
		cfg.AgentSocket = startAgent(t, agent.AddedKey{PrivateKey: raw})
		roundTrip(t, newT(t, cfg), "n1", n.echo)
	})
	t.Run("empty agent", func(t *testing.T) {
		cfg := n.config()
		cfg.Nodes[0].KeyPath = ""
		cfg.Nodes[0].AgentAuth = true
		cfg.AgentSocket = startAgent(t)
		_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
		var auth *AuthError
		if !errors.As(err, &auth) || !strings.Contains(err.Error(), "ssh-add -l") {
			t.Fatalf("Dial: %v, want an *AuthError that says no key was offered", err)
		}
	})
	t.Run("no agent socket", func(t *testing.T) {
		t.Setenv("SSH_AUTH_SOCK", "")
		cfg := n.config()
		cfg.Nodes[0].AgentAuth = true
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "SSH_AUTH_SOCK") {
			t.Fatalf("New: %v, want an error about SSH_AUTH_SOCK", err)
		}
	})
}

func TestUserCertificate(t *testing.T) {
	ca := testnode.NewKey(t)
	// The server authorizes no key, only certificates from ca.
	n := startNode(t, nodeOptions{server: testnode.Options{
		Users:  map[string][]ssh.PublicKey{},
		UserCA: ca.PublicKey(),
	}})
	writeCert := func(t *testing.T, key ssh.PublicKey, principals []string, validFor time.Duration) string {
		cert := testnode.Certify(t, ca, key, ssh.UserCert, principals, validFor)
		path := filepath.Join(t.TempDir(), "id-cert.pub")
		writeFile(t, path, ssh.MarshalAuthorizedKey(cert))
		return path
	}

	t.Run("accepted", func(t *testing.T) {
		cfg := n.config()
		cfg.Nodes[0].CertPath = writeCert(t, n.key.PublicKey(), []string{testUser}, time.Hour)
		roundTrip(t, newT(t, cfg), "n1", n.echo)
	})
	t.Run("inline", func(t *testing.T) {
		cfg := n.config()
		data, _ := os.ReadFile(writeCert(t, n.key.PublicKey(), []string{testUser}, 0))
		cfg.Nodes[0].Cert = data
		roundTrip(t, newT(t, cfg), "n1", n.echo)
	})
	t.Run("with the key in the agent", func(t *testing.T) {
		raw, signer := rawKey(t)
		cfg := n.config()
		cfg.Nodes[0].KeyPath = ""
		cfg.Nodes[0].AgentAuth = true
		cfg.Nodes[0].CertPath = writeCert(t, signer.PublicKey(), []string{testUser}, time.Hour)
		cfg.AgentSocket = startAgent(t, agent.AddedKey{PrivateKey: raw})
		roundTrip(t, newT(t, cfg), "n1", n.echo)
	})
	t.Run("without the certificate", func(t *testing.T) {
		_, err := newT(t, n.config()).Dial(testCtx(t), "n1", "tcp", n.echo)
		var auth *AuthError
		if !errors.As(err, &auth) {
			t.Fatalf("Dial: %v, want *AuthError", err)
		}
	})
	t.Run("wrong principal", func(t *testing.T) {
		cfg := n.config()
		cfg.Nodes[0].CertPath = writeCert(t, n.key.PublicKey(), []string{"someone-else"}, time.Hour)
		_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
		var auth *AuthError
		if !errors.As(err, &auth) || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("Dial: %v, want *AuthError that names the certificate", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		cfg := n.config()
		cfg.Nodes[0].CertPath = writeCert(t, n.key.PublicKey(), []string{testUser}, -time.Second)
		before := n.server.Accepted()
		_, err := newT(t, cfg).Dial(testCtx(t), "n1", "tcp", n.echo)
		var keyErr *KeyError
		if !errors.As(err, &keyErr) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("Dial: %v, want a *KeyError saying the certificate expired", err)
		}
		if n.server.Accepted() != before {
			t.Error("rigger connected to offer an expired certificate")
		}
	})
	t.Run("for another key", func(t *testing.T) {
		cfg := n.config()
		cfg.Nodes[0].CertPath = writeCert(t, testnode.NewKey(t).PublicKey(), []string{testUser}, time.Hour)
		_, err := New(cfg)
		var keyErr *KeyError
		if !errors.As(err, &keyErr) || !strings.Contains(err.Error(), "certificate is for key") {
			t.Fatalf("New: %v, want a *KeyError about a mismatched certificate", err)
		}
	})
}

func TestConfigErrorsAllAtOnce(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	cfg := Config{
		Nodes: []Node{
			{Name: "a", Host: Host{Address: "10.0.0.1", User: "rke"}},
			{Name: "a", Host: Host{Address: "10.0.0.2", User: "rke", AgentAuth: true}},
			{Name: "c", Host: Host{User: "rke", KeyPath: "/nonexistent/key"}, DockerSocket: "docker.sock"},
		},
		HostKeyPolicy: "tofu",
	}
	_, err := New(cfg)
	if err == nil {
		t.Fatal("New accepted a broken config")
	}
	for _, want := range []string{
		"node a: no SSH credentials",
		"node a: listed twice",
		"node c: address is empty",
		`node c: docker_socket "docker.sock" is not an absolute path`,
		`host_key_policy "tofu"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
}

func TestExpandHome(t *testing.T) {
	t.Setenv("HOME", "/home/op")
	for in, want := range map[string]string{
		"~/.ssh/id_rsa": "/home/op/.ssh/id_rsa",
		"~":             "/home/op",
		"/etc/key":      "/etc/key",
		"~other/key":    "~other/key",
	} {
		if got, err := expandHome(in); err != nil || got != want {
			t.Errorf("expandHome(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// rawKey returns a fresh ed25519 private key and its signer.
func rawKey(t *testing.T) (any, ssh.Signer) {
	t.Helper()
	_, pem := testnode.NewKeyPEM(t, nil)
	raw, err := ssh.ParseRawPrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return raw, signer
}
