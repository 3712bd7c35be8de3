package webhook

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestRelay: an accepted push is passed to Relay with its path, headers
// and body, after Trigger; one relayed already (RelayedHeader) triggers a
// fetch and is not relayed again; one that fails authentication, and an
// ignored event, are not relayed at all.
func TestRelay(t *testing.T) {
	type relayed struct {
		path string
		sig  string
		body string
	}
	var mu sync.Mutex
	var got []relayed
	h, c := newHandler(t, func(cfg *Config) {
		cfg.Relay = func(path string, header http.Header, body []byte) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, relayed{path, header.Get("X-Hub-Signature-256"), string(body)})
		}
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	path := Path(testSecret)

	if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("push: status %d (%q), want 202", resp.StatusCode, body)
	}
	if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push"), set(RelayedHeader, "serve-1")); resp.StatusCode != 202 {
		t.Fatalf("relayed push: status %d (%q), want 202", resp.StatusCode, body)
	}
	if resp, _ := send(t, srv, http.MethodPost, path, githubPush, github("push"), set("X-Hub-Signature-256", "sha256=00")); resp.StatusCode != 403 {
		t.Fatalf("forged push: status %d, want 403", resp.StatusCode)
	}
	if resp, _ := send(t, srv, http.MethodPost, path, githubPushOther, github("push")); resp.StatusCode != 202 {
		t.Fatalf("push to another branch: status %d, want 202", resp.StatusCode)
	}
	events, _, _ := c.snapshot()
	if len(events) != 2 {
		t.Errorf("Trigger called %d times, want 2 (the push and the relayed push)", len(events))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("Relay called %d times (%v), want once: for the push from the forge only", len(got), got)
	}
	if got[0].path != path || got[0].body != githubPush || got[0].sig != Sign(testSecret, []byte(githubPush)) {
		t.Errorf("relayed %+v, want the path, the body and its signature as received", got[0])
	}
}
