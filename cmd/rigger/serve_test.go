package main

import (
	"os"
	"strings"
	"testing"
)

// TestServeRefusesBadFlags: serve says what is wrong before it clones or
// listens.
func TestServeRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no repository", nil, "--repo URL"},
		{"author without email", []string{"--repo", "file:///nowhere", "--author", "rigger"}, `give "Name <email>"`},
		{"log format", []string{"--repo", "file:///nowhere", "--log-format", "xml"}, "give text or json"},
		{"log level", []string{"--repo", "file:///nowhere", "--log-level", "loud"}, "give debug, info, warn or error"},
		{"webhook secret file missing", []string{"--repo", "file:///nowhere", "--webhook-secret-file", dir + "/none"}, "read secret"},
		{"empty token file", []string{"--repo", "file:///nowhere", "--git-token-file", emptyFile(t, dir)}, "is empty"},
		{"notify URL without scheme", []string{"--repo", "file:///nowhere", "--notify", "slack=hooks.slack.com/services/T0/B0/s3cret"}, "--notify: not an http(s) URL"},
		{"notify format", []string{"--repo", "file:///nowhere", "--notify", "teams=https://h.example/s3cret"}, `unknown notification format "teams"`},
		{"notify file missing", []string{"--repo", "file:///nowhere", "--notify-file", dir + "/none"}, "read --notify-file"},
		{"notify file empty", []string{"--repo", "file:///nowhere", "--notify-file", emptyFile(t, dir)}, "names no webhook"},
		{"commit status forge", []string{"--repo", "https://github.com/a/b.git", "--commit-status", "bitbucket"}, "give github, gitea or gitlab"},
		{"commit status token", []string{"--repo", "https://github.com/a/b.git", "--commit-status", "github", "--commit-status-token-file", dir + "/none"}, "--commit-status-token-file: read secret"},
		{"commit status of a file repository", []string{"--repo", "file:///nowhere", "--commit-status", "gitea", "--commit-status-token-file", tokenFile(t, dir)}, "cannot be read from --repo"},
		{"commit status api alone", []string{"--repo", "file:///nowhere", "--commit-status-api", "https://h/api/v1"}, "--commit-status-api needs --commit-status"},
		{"empty HTTP token file", []string{"--repo", "file:///nowhere", "--http-token-file", emptyFile(t, dir)}, "--http-token-file: read secret"},
		{"client CA without TLS", []string{"--repo", "file:///nowhere", "--client-ca-file", dir + "/ca.crt"}, "--client-ca-file needs --tls-cert-file"},
		{"TLS certificate without key", []string{"--repo", "file:///nowhere", "--tls-cert-file", dir + "/tls.crt"}, "give both"},
		{"TLS files missing", []string{"--repo", "file:///nowhere", "--tls-cert-file", dir + "/tls.crt", "--tls-key-file", dir + "/tls.key"}, "load --tls-cert-file"},
		{"lease timing", []string{"--repo", "file:///nowhere", "--leader-elect", "--kubeconfig", kubeconfigFile(t, dir), "--lease-namespace", "rigger",
			"--lease-duration", "10s", "--lease-renew-deadline", "8s", "--lease-retry-period", "1s"}, "change --lease-duration, --lease-renew-deadline or --lease-retry-period"},
		{"repository missing", []string{"--repo", "file://" + dir + "/none.git", "--state-dir", dir}, dir + "/none.git"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := run(t, append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...)...)
			if code == 0 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant it to say %q", code, stderr, tt.want)
			}
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("stderr shows a webhook URL's secret:\n%s", stderr)
			}
		})
	}
}

// TestServeHidesURLCredentials: a token in --repo's user part shows
// neither in serve's error nor in its log, and does not name the clone's
// directory (a new token is the same clone).
func TestServeHidesURLCredentials(t *testing.T) {
	const token = "ghp_s3cretT0kenValue"
	dir := t.TempDir()
	for _, repo := range []string{
		"http://" + token + "@127.0.0.1:1/fleet.git",
		"http://git:" + token + "@127.0.0.1:1/fleet.git",
		"http://git:" + token + "#x@127.0.0.1:1/fleet.git",
	} {
		_, stderr, code := run(t, "serve", "--listen", "127.0.0.1:0", "--state-dir", dir, "--repo", repo)
		if code == 0 || strings.Contains(stderr, token) || strings.Contains(stderr, "#x") {
			t.Errorf("--repo %s: exit %d, stderr shows the token:\n%s", repo, code, stderr)
		}
	}
	if got := workdirOf(dir, "https://"+token+"@example.com/fleet.git"); got != workdirOf(dir, "https://example.com/fleet.git") {
		t.Errorf("the token names the clone's directory: %s", got)
	}
}

func tokenFile(t *testing.T, dir string) string {
	t.Helper()
	p := dir + "/token"
	if err := os.WriteFile(p, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func emptyFile(t *testing.T, dir string) string {
	t.Helper()
	p := dir + "/empty"
	if err := os.WriteFile(p, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeconfigFile is a kubeconfig of an API server nobody answers at.
func kubeconfigFile(t *testing.T, dir string) string {
	t.Helper()
	f := dir + "/kubeconfig"
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
