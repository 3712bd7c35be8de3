package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/transport/agenttun"
)

// startAgentServer runs a tunnel server on loopback admitting node n1.
func startAgentServer(t *testing.T) (url, checksum, token string) {
	t.Helper()
	store, err := agenttun.OpenStore("", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := agenttun.NewServer(agenttun.Config{Cluster: "c1", Store: store,
		Nodes: []agenttun.Node{{Name: "n1", DockerSocket: "/var/run/docker.sock"}}})
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := store.CA().TLSConfig([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.TLS = tlsConfig
	hs.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	tok, err := store.IssueToken("c1", "n1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, store.CA().Checksum(), tok
}

func runAgentCommand(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, stderr, code = runTo(t, ctx, "", &syncBuffer{}, &syncBuffer{}, append([]string{"agent", "--state-dir", t.TempDir()}, args...)...)
	if ctx.Err() != nil {
		t.Fatalf("rigger agent %v did not exit:\n%s", args, stderr)
	}
	return stderr, code
}

func TestAgentCommandRefusals(t *testing.T) {
	url, sum, tok := startAgentServer(t)
	wrong := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"flags", []string{"--server", "http://x", "--ca-checksum", "abc"},
			[]string{"--server \"http://x\": want an https:// URL", "--ca-checksum \"abc\": want the 64 hex digits", "--node-name"}},
		{"wrong checksum", []string{"--server", url, "--token", tok, "--ca-checksum", wrong, "--address", "n1"},
			[]string{"join step 1/4: flags checked", "rigger agent: the CA served by " + url + " has SHA-256 " + sum +
				", not the --ca-checksum " + wrong + ": the token was not sent"}},
		{"bad token", []string{"--server", url, "--token", "rgt_nope", "--ca-checksum", sum, "--address", "n1"},
			[]string{"join step 2/4: CA fetched and matched", "rigger agent: join refused by the server: the join token is not valid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, code := runAgentCommand(t, tc.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
		})
	}
}
