package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProxyUpstreams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   []string
		cpHosts string
		want    []string
		wantErr []string // substrings of the error
	}{
		{name: "CP_HOSTS hosts get 6443", cpHosts: "10.0.0.1,10.0.0.2", want: []string{"10.0.0.1:6443", "10.0.0.2:6443"}},
		{name: "CP_HOSTS with ports and spaces", cpHosts: " 10.0.0.1:7443 , cp2.example.com ,", want: []string{"10.0.0.1:7443", "cp2.example.com:6443"}},
		{name: "CP_HOSTS IPv6", cpHosts: "fd00::1,[fd00::2],[fd00::3]:7443", want: []string{"[fd00::1]:6443", "[fd00::2]:6443", "[fd00::3]:7443"}},
		{name: "flags win over CP_HOSTS", flags: []string{"10.0.0.9:6443"}, cpHosts: "10.0.0.1", want: []string{"10.0.0.9:6443"}},
		{name: "nothing", wantErr: []string{"--upstream", "CP_HOSTS"}},
		{name: "only commas", cpHosts: " , ,", wantErr: []string{"--upstream", "CP_HOSTS"}},
		{name: "flag without port", flags: []string{"10.0.0.1"}, wantErr: []string{`--upstream "10.0.0.1"`, "host:port"}},
		{name: "flag bad port", flags: []string{"10.0.0.1:http"}, wantErr: []string{`--upstream "10.0.0.1:http"`, "port"}},
		{name: "flag without host", flags: []string{":6443"}, wantErr: []string{`--upstream ":6443"`, "no host"}},
		{name: "CP_HOSTS bad port", cpHosts: "10.0.0.1:99999", wantErr: []string{`CP_HOSTS entry "10.0.0.1:99999"`, "port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := proxyUpstreams(tc.flags, tc.cpHosts)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upstreams (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNginxProxyErrors(t *testing.T) {
	t.Setenv("CP_HOSTS", "")
	_, errOut, code := run(t, "nginx-proxy")
	if code != 1 || !strings.Contains(errOut, "--upstream") || !strings.Contains(errOut, "set CP_HOSTS") {
		t.Errorf("no upstreams: exit %d, stderr %q", code, errOut)
	}

	t.Setenv("CP_HOSTS", "10.0.0.1")
	_, errOut, code = run(t, "nginx-proxy", "--listen", "6443")
	if code != 1 || !strings.Contains(errOut, `--listen "6443"`) || !strings.Contains(errOut, "0.0.0.0:6443") {
		t.Errorf("bad --listen: exit %d, stderr %q", code, errOut)
	}

	_, errOut, code = run(t, "nginx-proxy", "--upstream", "10.0.0.1")
	if code != 1 || !strings.Contains(errOut, `--upstream "10.0.0.1"`) {
		t.Errorf("bad --upstream: exit %d, stderr %q", code, errOut)
	}
}

// TestNginxProxyStopsWithContext starts the command as the container does
// (CP_HOSTS only) and checks it listens and returns when its context ends.
func TestNginxProxyStopsWithContext(t *testing.T) {
	t.Setenv("CP_HOSTS", "127.0.0.1")
	var out, errOut bytes.Buffer
	cmd := newRootCommand(&out, &errOut)
	cmd.SetArgs([]string{"nginx-proxy", "--listen", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "upstreams=127.0.0.1:6443") {
		t.Errorf("log lacks the upstreams from CP_HOSTS:\n%s", errOut.String())
	}
}

func TestNginxProxyHelp(t *testing.T) {
	out, _, code := run(t, "nginx-proxy", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"nginx-proxy container", "CP_HOSTS", "--listen", "--upstream", "0.0.0.0:6443"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}
