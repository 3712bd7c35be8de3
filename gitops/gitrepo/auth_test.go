package gitrepo

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

const (
	goodToken = "s3cret-t0ken"
	badToken  = "wr0ng-t0ken-value"
)

// gitHTTPServer serves the bare repositories under root with the real
// git-http-backend, behind a handler that checks basic auth first.
func gitHTTPServer(t *testing.T, root string) *httptest.Server {
	t.Helper()
	backend := filepath.Join(runGit(t, "", "--exec-path"), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("git-http-backend not found: %v", err)
	}
	h := &cgi.Handler{
		Path: backend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()
		// A token as the password (of any user, as GitLab and Gitea take
		// it), or as the user name without a password (as GitHub takes it).
		if !ok || user != "git" && user != goodToken || user == "git" && pass != goodToken || user == goodToken && pass != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		req.Header.Set("Remote-User", user) // informative only
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPSBasicAuth(t *testing.T) {
	root := t.TempDir()
	bare := filepath.Join(root, "fleet.git")
	runGit(t, "", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	runGit(t, bare, "config", "http.receivepack", "true")
	humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "name: a\n"})
	srv := gitHTTPServer(t, root)
	url := srv.URL + "/fleet.git"
	hostURL := strings.TrimPrefix(srv.URL, "http://")

	tests := []struct {
		name    string
		url     string
		auth    Auth
		wantErr string // a part of the error; empty when Open must succeed
		secret  string // must not appear in the error, the clone's config or URL()
	}{
		{name: "token as password", url: url, auth: Auth{Password: goodToken}, secret: goodToken},
		{name: "user and password", url: url, auth: Auth{Username: "git", Password: goodToken}, secret: goodToken},
		{name: "password in the URL", url: "http://git:" + goodToken + "@" + hostURL + "/fleet.git", secret: goodToken},
		{name: "token as the URL's user", url: "http://" + goodToken + "@" + hostURL + "/fleet.git", secret: goodToken},
		{name: "user in the URL, token given", url: "http://git@" + hostURL + "/fleet.git", auth: Auth{Username: "other", Password: goodToken}, secret: goodToken},
		{name: "wrong password", url: url, auth: Auth{Password: badToken}, wantErr: "check the credentials", secret: badToken},
		{name: "wrong password in the URL", url: "http://git:" + badToken + "@" + hostURL + "/fleet.git", wantErr: "check the credentials", secret: badToken},
		{name: "wrong token as the URL's user", url: "http://" + badToken + "@" + hostURL + "/fleet.git", wantErr: "check the credentials", secret: badToken},
		{name: "password in the URL and given", url: "http://git:" + goodToken + "@" + hostURL + "/fleet.git", auth: Auth{Password: badToken},
			wantErr: "--git-token-file", secret: goodToken},
		{name: "no password", url: url, wantErr: "check the credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "clone")
			r, err := Open(ctx, dir, tt.url, tt.auth)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatal("Open succeeded with bad credentials")
				}
				t.Logf("Open: %v", err)
				if tt.secret != "" && strings.Contains(err.Error(), tt.secret) {
					t.Errorf("error shows the password: %v", err)
				}
				if !strings.Contains(err.Error(), hostURL) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error does not name the repository or lacks %q: %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if got := r.URL(); got != url {
				t.Errorf("URL() = %q, want %q: no user, no password", got, url)
			}
			r.now = fixedNow
			if _, err := r.Fetch(ctx, "main"); err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			hash, changed, err := r.CommitFile(ctx, statusCommit("main", "clusters/a/status.yml", tt.name+"\n"))
			if err != nil || !changed {
				t.Fatalf("CommitFile = %v, %v", changed, err)
			}
			if got := runGit(t, bare, "rev-parse", "main"); got != hash {
				t.Errorf("main = %s, want %s", got, hash)
			}
			cfg, err := os.ReadFile(filepath.Join(dir, "config"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(cfg), tt.secret) {
				t.Errorf("the clone's config holds the password:\n%s", cfg)
			}
		})
	}
}

// TestOpenCleansOldClone: a clone whose config holds the URL with a token
// in its user part (as rigger stored it before) is taken over, and the
// token leaves its config.
func TestOpenCleansOldClone(t *testing.T) {
	root := t.TempDir()
	bare := filepath.Join(root, "fleet.git")
	runGit(t, "", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	humanPush(t, bare, "main", map[string]string{"clusters/a/cluster.yml": "name: a\n"})
	srv := gitHTTPServer(t, root)
	withToken := "http://" + goodToken + "@" + strings.TrimPrefix(srv.URL, "http://") + "/fleet.git"
	dir := filepath.Join(t.TempDir(), "clone")
	if _, err := Open(context.Background(), dir, withToken, Auth{}); err != nil {
		t.Fatal(err)
	}
	runGit(t, dir, "config", "remote.origin.url", withToken)

	if _, err := Open(context.Background(), dir, withToken, Auth{}); err != nil {
		t.Fatalf("Open of the old clone: %v", err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), goodToken) || !strings.Contains(string(cfg), srv.URL+"/fleet.git") {
		t.Errorf("the clone's config:\n%s\nwant the URL without the token", cfg)
	}
}

func TestStripURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://git:tok@example.com/r.git", "https://example.com/r.git"},
		{"https://ghp_t0ken@example.com/r.git", "https://example.com/r.git"},
		{"http://u:p@127.0.0.1:8080/r.git?x=1", "http://127.0.0.1:8080/r.git?x=1"},
		{"ssh://git:pw@example.com/r.git", "ssh://git@example.com/r.git"},
		{"https://u:p#ss@example.com/r.git", "(a URL that does not parse)"},
		{"https://example.com/r.git", "https://example.com/r.git"},
		{"git@example.com:org/r.git", "git@example.com:org/r.git"},
		{"ssh://git@example.com:2222/r.git", "ssh://git@example.com:2222/r.git"},
		{"/srv/git/r.git", "/srv/git/r.git"},
	}
	for _, tt := range tests {
		if got := StripURL(tt.in); got != tt.want {
			t.Errorf("StripURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRedactError(t *testing.T) {
	base := errors.New("dial https://git:p@ss w0rd@host failed: p%40ss+w0rd p%40ss%20w0rd")
	err := redact(base, []string{"p@ss w0rd"})
	if strings.Contains(err.Error(), "w0rd") {
		t.Errorf("secret left in %q", err)
	}
	if !errors.Is(err, base) {
		t.Error("redacted error does not wrap the original")
	}
}

// sshKeyFile writes a new unencrypted ed25519 private key and returns its
// path and public key.
func sshKeyFile(t *testing.T) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, sshPub
}

func TestSSHAuthRefusesWithoutKnownHosts(t *testing.T) {
	key, _ := sshKeyFile(t)
	missing := filepath.Join(t.TempDir(), "known_hosts")
	tests := []struct {
		name string
		url  string
		auth Auth
		want []string
	}{
		{
			name: "no known_hosts file given", url: "ssh://git@127.0.0.1:1/fleet.git",
			auth: Auth{SSHKeyFile: key}, want: []string{"known_hosts", "--git-known-hosts", "ssh-keyscan -p 1 127.0.0.1"},
		},
		{
			name: "scp-like URL", url: "git@127.0.0.1:fleet.git",
			auth: Auth{SSHKeyFile: key}, want: []string{"known_hosts", "--git-known-hosts"},
		},
		{
			name: "known_hosts file missing", url: "ssh://git@127.0.0.1:1/fleet.git",
			auth: Auth{SSHKeyFile: key, KnownHostsFile: missing}, want: []string{missing, "ssh-keyscan"},
		},
		{
			name: "no key", url: "ssh://git@127.0.0.1:1/fleet.git",
			auth: Auth{KnownHostsFile: missing}, want: []string{"private key", "--git-ssh-key"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), t.TempDir(), tt.url, tt.auth)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			t.Logf("Open: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestHostKeyChecks(t *testing.T) {
	pub := func() ssh.PublicKey {
		p, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ssh.NewPublicKey(p)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	known, other := pub(), pub()
	file := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize("git.example.com:22")}, known)
	if err := os.WriteFile(file, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		t.Fatal(err)
	}
	check := explainHostKey(cb, file)
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 22}

	tests := []struct {
		name, host string
		key        ssh.PublicKey
		want       []string // empty: accepted
	}{
		{name: "known key", host: "git.example.com:22", key: known},
		{name: "unknown host", host: "other.example.com:22", key: other, want: []string{"not in known_hosts", file, "ssh-keyscan -p 22 other.example.com", "SHA256:"}},
		{name: "changed key", host: "git.example.com:22", key: other, want: []string{"does not match", file, "line 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(tt.host, addr, tt.key)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("known key refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("host key accepted")
			}
			t.Logf("host key check: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	if got := knownAlgorithms(cb, "git.example.com:22"); len(got) != 1 || got[0] != ssh.KeyAlgoED25519 {
		t.Errorf("knownAlgorithms = %v, want [%s]", got, ssh.KeyAlgoED25519)
	}
	if got := knownAlgorithms(cb, "other.example.com:22"); got != nil {
		t.Errorf("knownAlgorithms of an unknown host = %v, want nil", got)
	}
}
