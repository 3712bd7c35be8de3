package gitrepo

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// gitSSHServer is an x/crypto/ssh server on loopback that runs the real
// git-upload-pack and git-receive-pack for the one client key it accepts.
type gitSSHServer struct {
	addr    string
	hostKey ssh.PublicKey
}

func startGitSSHServer(t *testing.T, client ssh.PublicKey) *gitSSHServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(k.Marshal(), client.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() { serveGitSSH(nc, cfg) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return &gitSSHServer{addr: ln.Addr().String(), hostKey: signer.PublicKey()}
}

func serveGitSSH(nc net.Conn, cfg *ssh.ServerConfig) {
	defer nc.Close()
	_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nch := range chans {
		if nch.ChannelType() != "session" {
			nch.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			return
		}
		wg.Go(func() { serveGitSession(ch, creqs) })
	}
}

// serveGitSession runs one "exec git-upload-pack '/path'" (or
// git-receive-pack) request.
func serveGitSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			if req.WantReply {
				req.Reply(false, nil)
			}
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			req.Reply(false, nil)
			return
		}
		name, arg, _ := strings.Cut(p.Command, " ")
		if name != "git-upload-pack" && name != "git-receive-pack" {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		cmd := exec.Command("git", strings.TrimPrefix(name, "git-"), strings.Trim(arg, "'"))
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return
		}
		status := uint32(0)
		if err := cmd.Start(); err != nil {
			status = 127
		} else {
			go func() { io.Copy(stdin, ch); stdin.Close() }()
			if err := cmd.Wait(); err != nil {
				status = 1
			}
		}
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

func TestSSH(t *testing.T) {
	bare := newBare(t)
	humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "name: a\n"})
	key, pub := sshKeyFile(t)
	otherKey, _ := sshKeyFile(t)
	srv := startGitSSHServer(t, pub)
	url := "ssh://git@" + srv.addr + bare

	knownHosts := func(host string, k ssh.PublicKey) string {
		p := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(p, []byte(knownhosts.Line([]string{knownhosts.Normalize(host)}, k)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, strangerPriv, _ := ed25519.GenerateKey(rand.Reader)
	stranger, _ := ssh.NewSignerFromKey(strangerPriv)

	tests := []struct {
		name string
		auth Auth
		want string // error text; empty: works
	}{
		{name: "verified host", auth: Auth{SSHKeyFile: key, KnownHostsFile: knownHosts(srv.addr, srv.hostKey)}},
		{name: "host key changed", auth: Auth{SSHKeyFile: key, KnownHostsFile: knownHosts(srv.addr, stranger.PublicKey())}, want: "does not match known_hosts"},
		{name: "host unknown", auth: Auth{SSHKeyFile: key, KnownHostsFile: knownHosts("git.example.com:22", srv.hostKey)}, want: "is not in known_hosts"},
		{name: "client key refused", auth: Auth{SSHKeyFile: otherKey, KnownHostsFile: knownHosts(srv.addr, srv.hostKey)}, want: "unable to authenticate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r, err := Open(ctx, filepath.Join(t.TempDir(), "clone"), url, tt.auth)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Open error = %v, want one containing %q", err, tt.want)
				}
				t.Logf("Open: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			r.now = fixedNow
			files, err := r.Find("main", "clusters", "cluster.yml", 1<<20)
			if err != nil || len(files) != 1 {
				t.Fatalf("Find = %v, %v", files, err)
			}
			hash, changed, err := r.CommitFile(ctx, statusCommit("main", "clusters/a/status.yml", "ready: true\n"))
			if err != nil || !changed {
				t.Fatalf("CommitFile = %v, %v", changed, err)
			}
			if got := runGit(t, bare, "rev-parse", "main"); got != hash {
				t.Errorf("main = %s, want %s", got, hash)
			}
		})
	}
}
