package reconcile

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/spec"
)

// silentPort accepts TCP connections and never says anything: no SSH
// banner. It stops when the test ends.
func silentPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestDoctorPassesOnlyWhatItChecked: against a port that accepts TCP and
// never sends an SSH banner, with no known_hosts file, doctor fails the
// SSH handshake and passes no check it did not make: not the host key,
// not the login, not the Docker socket (it passed all three, and blamed
// Docker, when the Docker read's 20 s ran out before the handshake's 30 s).
func TestDoctorPassesOnlyWhatItChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, []byte(testKeyPEM(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf("nodes:\n  - {address: 127.0.0.1, port: %d, user: rke, ssh_key_path: %s, role: [etcd, controlplane, worker]}\n"+
		"rigger:\n  ssh:\n    known_hosts_file: %s\n", silentPort(t), key, filepath.Join(dir, "known_hosts"))
	c, diags := spec.Parse([]byte(yml), "cluster.yml")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(c, Options{StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	found, err := s.Doctor(ctx, doctor.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	levels := map[string]doctor.Finding{}
	for _, f := range found {
		if f.Node == "127.0.0.1" {
			levels[f.Check] = f
		}
	}
	if f := levels[doctor.CheckSSHHandshake]; f.Level != doctor.Fail || !strings.Contains(f.Found, "did not complete the SSH handshake") {
		t.Errorf("ssh-handshake: %+v, want it failed", f)
	}
	if f := levels[doctor.CheckSSHPort]; f.Level != doctor.Pass {
		t.Errorf("ssh-port: %+v, want passed: the port accepted the connection", f)
	}
	for _, name := range []string{doctor.CheckSSHHostKey, doctor.CheckSSHAuth, doctor.CheckDockerSocket, doctor.CheckDockerAPI} {
		if f, ok := levels[name]; ok && f.Level == doctor.Pass {
			t.Errorf("%s passed, but was never checked: %+v", name, f)
		}
	}
}

// testKeyPEM is a fresh ed25519 key in OpenSSH's PEM.
func testKeyPEM(t *testing.T) string {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ssh.MarshalPrivateKey(k, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(b))
}
