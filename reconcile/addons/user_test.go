package addons

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const cmYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\n"

func cm(name string) string { return strings.ReplaceAll(cmYAML, "%s", name) }

func TestUserAddons(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "a.yaml"), []byte(cm("from-file")+"---\n"+cm("from-file-2")), 0o600); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(t.TempDir(), "abs.yaml")
	if err := os.WriteFile(abs, []byte(cm("from-abs")), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok.yaml":
			w.Write([]byte(cm("from-url")))
		case "/big.yaml":
			w.Write([]byte(strings.Repeat("# padding\n", 200)))
		case "/slow.yaml":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	f := Fetcher{Client: srv.Client(), Timeout: 500 * time.Millisecond, Limits: Limits{MaxBytes: 1000}}
	ctx := context.Background()

	t.Run("inline and includes, in order", func(t *testing.T) {
		got, err := f.UserAddons(ctx, UserInput{
			Addons:  cm("inline"),
			Include: []string{"manifests/a.yaml", srv.URL + "/ok.yaml", abs},
			BaseDir: dir,
		})
		if err != nil {
			t.Fatal(err)
		}
		type addon struct {
			Name    string
			Objects []decoded
		}
		var gotA []addon
		for _, a := range got {
			gotA = append(gotA, addon{a.Name, summaries(a.Objects)})
		}
		want := []addon{
			{UserAddonName, []decoded{{"v1 ConfigMap inline", "addons: document 1 at line 1"}}},
			{UserIncludeAddonName, []decoded{
				{"v1 ConfigMap from-file", "addons_include[0] manifests/a.yaml: document 1 at line 1"},
				{"v1 ConfigMap from-file-2", "addons_include[0] manifests/a.yaml: document 2 at line 5"},
				{"v1 ConfigMap from-url", "addons_include[1] " + srv.URL + "/ok.yaml: document 1 at line 1"},
				{"v1 ConfigMap from-abs", "addons_include[2] " + abs + ": document 1 at line 1"},
			}},
		}
		if diff := cmp.Diff(want, gotA); diff != "" {
			t.Errorf("add-ons differ (-want +got):\n%s", diff)
		}
	})

	t.Run("none", func(t *testing.T) {
		got, err := f.UserAddons(ctx, UserInput{BaseDir: dir})
		if err != nil || len(got) != 0 {
			t.Errorf("got %v, %v; want no add-ons", got, err)
		}
	})

	errTests := []struct {
		name    string
		include string
		want    string
	}{
		{"missing file", "manifests/typo.yaml", "addons_include[0] manifests/typo.yaml: no such file (" + filepath.Join(dir, "manifests/typo.yaml") + "): paths are relative to the directory of cluster.yml; URLs start with http:// or https://"},
		{"404", srv.URL + "/missing.yaml", "addons_include[0] " + srv.URL + "/missing.yaml: download: the server answered 404 Not Found"},
		{"too large", srv.URL + "/big.yaml", "addons_include[0] " + srv.URL + "/big.yaml: download: larger than the limit of 1000 bytes"},
		{"too slow", srv.URL + "/slow.yaml", "addons_include[0] " + srv.URL + "/slow.yaml: download: no complete answer within 500ms"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.UserAddons(ctx, UserInput{Include: []string{tt.include}, BaseDir: dir})
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got error %v\nwant it to start with %s", err, tt.want)
			}
		})
	}

	t.Run("a YAML error names the entry", func(t *testing.T) {
		_, err := f.UserAddons(ctx, UserInput{Addons: cm("a") + "---\nkind: x\n"})
		want := "addons: document 2 at line 5: apiVersion is missing"
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("got %v, want %s...", err, want)
		}
	})
}

func TestIsURL(t *testing.T) {
	for in, want := range map[string]bool{
		"https://example.com/a.yaml": true,
		"http://example.com/a.yaml":  true,
		"http-manifests/a.yaml":      false,
		"file:///etc/a.yaml":         false,
		"/abs/a.yaml":                false,
		"https:///no-host":           false,
	} {
		if got := isURL(in); got != want {
			t.Errorf("isURL(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestIncludeRefusesLocalAddresses: without a client of the caller's, an
// addons_include URL is not fetched from a loopback or link-local address
// (serve's own host, a cloud's instance metadata), with an error that says
// so and what to do; other addresses, private ones included, are.
func TestIncludeRefusesLocalAddresses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	}))
	defer srv.Close()
	_, err := Fetcher{Timeout: 5 * time.Second}.UserAddons(context.Background(), UserInput{Include: []string{srv.URL + "/a.yaml"}})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1 is a loopback, link-local, multicast, unspecified or cloud instance metadata address") {
		t.Fatalf("a loopback URL: %v", err)
	}
	for addr, refused := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:443": true, "169.254.169.254:80": true, "[fe80::1]:80": true, "0.0.0.0:80": true,
		"[::ffff:127.0.0.1]:80": true, "224.0.0.1:80": true, "[fd00:ec2::254]:80": true, "100.100.100.200:80": true,
		"[::ffff:100.100.100.200]:80": true, "100.100.100.201:80": false,
		"10.0.0.5:80": false, "192.168.1.10:443": false, "203.0.113.7:443": false, "[2001:db8::1]:443": false,
	} {
		if err := refuseLocal("tcp", addr, nil); (err != nil) != refused {
			t.Errorf("%s: refused %v, want %v", addr, err, refused)
		}
	}
}

// TestIncludeNotThroughProxy: an addons_include URL is fetched directly,
// never through the environment's proxy (HTTPS_PROXY), which would
// connect, out of the address check's sight, to whatever it is asked.
// (Looked at in the client itself: a test that fetched through a proxy
// would send a request off this machine if it failed.)
func TestIncludeNotThroughProxy(t *testing.T) {
	tr, ok := includeClient.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("includeClient's transport is a %T", includeClient.Transport)
	}
	if tr.Proxy != nil {
		t.Error("addons_include URLs are fetched through a proxy")
	}
	if tr.DialContext == nil {
		t.Error("addons_include URLs are dialled without the address check")
	}
}
