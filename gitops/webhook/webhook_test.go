package webhook

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"

	"github.com/rigger/rigger/internal/testwait"
)

// testSecret is the secret of GitHub's documented example, so that Sign can
// be checked against their published signature.
var testSecret = []byte("It's a Secret to Everybody")

const (
	sha1   = "1481a2de7b2a7d02428ad93446ab166be7793fbb"
	sha2   = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
	zeroID = "0000000000000000000000000000000000000000"
)

// Trimmed but real-shaped payloads of each forge.
const (
	githubPush = `{"ref":"refs/heads/main","before":"` + sha2 + `","after":"` + sha1 + `","created":false,"deleted":false,"forced":false,` +
		`"repository":{"full_name":"acme/clusters"},"pusher":{"name":"ops"},"head_commit":{"id":"` + sha1 + `","message":"scale workers"}}`
	githubPushOther   = `{"ref":"refs/heads/feature","after":"` + sha1 + `","deleted":false}`
	githubTag         = `{"ref":"refs/tags/v1.2.0","after":"` + sha1 + `","deleted":false}`
	githubDeleted     = `{"ref":"refs/heads/main","before":"` + sha1 + `","after":"` + zeroID + `","deleted":true}`
	githubPing        = `{"zen":"Keep it logically awesome.","hook_id":42,"hook":{"type":"Repository","events":["push"]}}`
	gitlabPush        = `{"object_kind":"push","event_name":"push","before":"` + sha2 + `","after":"` + sha1 + `","ref":"refs/heads/main","checkout_sha":"` + sha1 + `","project":{"path_with_namespace":"acme/clusters"},"total_commits_count":1}`
	gitlabDeleted     = `{"object_kind":"push","before":"` + sha1 + `","after":"` + zeroID + `","ref":"refs/heads/main","checkout_sha":null}`
	gitlabTagPushHook = `{"object_kind":"tag_push","ref":"refs/tags/v1","after":"` + sha1 + `","checkout_sha":"` + sha1 + `"}`
	giteaPush         = `{"ref":"refs/heads/main","before":"` + sha2 + `","after":"` + sha1 + `","compare_url":"https://git.example/acme/clusters/compare/x...y","commits":[],"total_commits":1,"repository":{"full_name":"acme/clusters"}}`
	giteaDeleted      = `{"ref":"refs/heads/main","before":"` + sha1 + `","after":"` + zeroID + `"}`
)

// mod changes a request's headers; it sees the body to sign it.
type mod func(h http.Header, body []byte)

// deliverySeq numbers the tests' deliveries: each is a new one, as a
// forge's are.
var deliverySeq atomic.Int64

// github sets GitHub's event, a delivery ID of its own and a valid
// signature.
func github(event string) mod {
	return func(h http.Header, body []byte) {
		h.Set("X-GitHub-Event", event)
		h.Set("X-GitHub-Delivery", fmt.Sprintf("72d3162e-cc78-11e3-81ab-%012d", deliverySeq.Add(1)))
		h.Set("X-Hub-Signature-256", Sign(testSecret, body))
	}
}

// delivery sets GitHub's delivery ID.
func delivery(id string) mod {
	return func(h http.Header, _ []byte) { h.Set("X-GitHub-Delivery", id) }
}

// TestReplayIgnored: a captured delivery sent again (the same delivery ID)
// is answered as a replay: no fetch, and the forge's budget is not spent,
// so that the next real push goes through at once. A delivery without an
// ID (a generic hook script posts the same body for every push) is taken
// each time.
func TestReplayIgnored(t *testing.T) {
	srv, c := limitedServer(t)
	path := Path(testSecret)
	captured := []mod{github("push"), delivery("captured-1")}
	if resp, body := send(t, srv, http.MethodPost, path, githubPush, captured...); resp.StatusCode != 202 {
		t.Fatalf("the first delivery: status %d (%q), want 202", resp.StatusCode, body)
	}
	for i := range 5 {
		resp, body := send(t, srv, http.MethodPost, path, githubPush, captured...)
		if resp.StatusCode == 202 {
			t.Fatalf("replay %d: status 202 (%q): a replay was taken as a push", i, body)
		}
	}
	if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("the next real push after replays: status %d (%q), want 202", resp.StatusCode, body)
	}
	events, observed, _ := c.snapshot()
	if len(events) != 2 {
		t.Errorf("Trigger called %d times, want 2 (the first delivery and the next push)", len(events))
	}
	if observed[1] != "github/replay" {
		t.Errorf("Observe calls %v, want the second a replay", observed)
	}

	h, c := newHandler(t, func(cfg *Config) { cfg.Burst = 5 })
	noID := httptest.NewServer(h)
	defer noID.Close()
	for i := range 3 {
		if resp, body := send(t, noID, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
			t.Fatalf("push %d without a delivery ID, the same body each time: status %d (%q), want 202", i, resp.StatusCode, body)
		}
	}
	if events, _, _ := c.snapshot(); len(events) != 3 {
		t.Errorf("Trigger called %d times for 3 pushes without a delivery ID, want 3", len(events))
	}
}

// gitlab sets GitLab's event and token.
func gitlab(event string) mod {
	return func(h http.Header, _ []byte) {
		h.Set("X-Gitlab-Event", event)
		h.Set("X-Gitlab-Token", string(testSecret))
	}
}

// gitea sets Gitea's headers, with the GitHub-compatible ones Gitea sends too.
func gitea(event string) mod {
	return func(h http.Header, body []byte) {
		h.Set("X-Gitea-Event", event)
		h.Set("X-Gitea-Signature", hex.EncodeToString(mac(testSecret, body)))
		h.Set("X-GitHub-Event", event)
		h.Set("X-Hub-Signature-256", Sign(testSecret, body))
	}
}

// forgejo sets Forgejo's headers, with the Gitea and GitHub ones it sends too.
func forgejo(event string) mod {
	return func(h http.Header, body []byte) {
		gitea(event)(h, body)
		h.Set("X-Forgejo-Event", event)
		h.Set("X-Forgejo-Signature", hex.EncodeToString(mac(testSecret, body)))
	}
}

// generic sets the generic signature.
func generic() mod {
	return func(h http.Header, body []byte) { h.Set("X-Rigger-Signature-256", Sign(testSecret, body)) }
}

// set sets a header after the others.
func set(name, value string) mod {
	return func(h http.Header, _ []byte) { h.Set(name, value) }
}

// signedWith replaces a signature header by one made with another secret.
func signedWith(name string, secret []byte, prefix string) mod {
	return func(h http.Header, body []byte) { h.Set(name, prefix+hex.EncodeToString(mac(secret, body))) }
}

// del removes a header.
func del(name string) mod {
	return func(h http.Header, _ []byte) { h.Del(name) }
}

// calls records what the handler reported. The handler runs on the server's
// goroutines, hence the lock.
type calls struct {
	mu       sync.Mutex
	events   []Event
	observed []string // "provider/result"
	log      bytes.Buffer
}

func (c *calls) trigger(e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *calls) observe(provider, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observed = append(c.observed, provider+"/"+result)
}

func (c *calls) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.Write(p)
}

// snapshot returns copies of what was recorded.
func (c *calls) snapshot() ([]Event, []string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...), append([]string(nil), c.observed...), c.log.String()
}

// newHandler builds a handler whose calls are recorded; edit changes the
// test defaults.
func newHandler(t *testing.T, edit func(*Config)) (http.Handler, *calls) {
	t.Helper()
	c := &calls{}
	cfg := Config{
		Secret:  testSecret,
		Branch:  "main",
		Trigger: c.trigger,
		Observe: c.observe,
		MaxBody: 4096,
		Rate:    rate.Inf,
		Log:     slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h, c
}

// send makes a request to srv and returns the status, headers and body.
func send(t *testing.T, srv *httptest.Server, method, path, body string, mods ...mod) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, m := range mods {
		m(req.Header, []byte(body))
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp, string(b)
}

func TestHandler(t *testing.T) {
	path := Path(testSecret)
	oversize := `{"ref":"refs/heads/main","pad":"` + strings.Repeat("x", 5000) + `"}`
	tests := []struct {
		name     string
		method   string // POST when empty
		path     string // Path(testSecret) when empty
		body     string
		mods     []mod
		code     int
		observed string // "provider/result"; empty when Observe must not be called
		event    *Event // the one Trigger call expected, if any
		msg      string // a part of the response body
	}{
		{name: "github push", body: githubPush, mods: []mod{github("push")},
			code: 202, observed: "github/accepted", event: &Event{ProviderGitHub, "refs/heads/main", sha1}, msg: "fetch requested"},
		{name: "github ping", body: githubPing, mods: []mod{github("ping")},
			code: 200, observed: "github/ping", msg: "pong"},
		{name: "github other event", body: `{"action":"opened"}`, mods: []mod{github("issues")},
			code: 202, observed: "github/ignored", msg: "ignored: not a push event"},
		{name: "github other branch", body: githubPushOther, mods: []mod{github("push")},
			code: 202, observed: "github/ignored", msg: "ignored: not a push to branch main"},
		{name: "github tag", body: githubTag, mods: []mod{github("push")},
			code: 202, observed: "github/ignored", msg: "ignored: tag push"},
		{name: "github branch deleted", body: githubDeleted, mods: []mod{github("push")},
			code: 202, observed: "github/ignored", msg: "ignored: ref deleted"},
		{name: "github wrong signature", body: githubPush, mods: []mod{github("push"), signedWith("X-Hub-Signature-256", []byte("another secret of 16+ bytes"), "sha256=")},
			code: 403, observed: "github/forbidden", msg: "check the webhook secret"},
		{name: "github signature without prefix", body: githubPush, mods: []mod{github("push"), signedWith("X-Hub-Signature-256", testSecret, "")},
			code: 403, observed: "github/forbidden"},
		{name: "github signature not hex", body: githubPush, mods: []mod{github("push"), set("X-Hub-Signature-256", "sha256=zz")},
			code: 403, observed: "github/forbidden"},
		{name: "github empty signature", body: githubPush, mods: []mod{github("push"), set("X-Hub-Signature-256", "")},
			code: 403, observed: "github/forbidden"},
		{name: "github signature missing", body: githubPush, mods: []mod{github("push"), del("X-Hub-Signature-256")},
			code: 401, observed: "github/unauthorized", msg: "X-Hub-Signature-256"},
		{name: "github signature missing on ping", body: githubPing, mods: []mod{github("ping"), del("X-Hub-Signature-256")},
			code: 401, observed: "github/unauthorized"},
		{name: "github malformed JSON", body: `{"ref":"refs/heads/main",`, mods: []mod{github("push")},
			code: 400, observed: "github/bad_request", msg: "application/json"},
		{name: "github form encoded", body: "payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D", mods: []mod{github("push")},
			code: 400, observed: "github/bad_request", msg: "application/json"},
		{name: "github push without ref", body: `{"after":"` + sha1 + `"}`, mods: []mod{github("push")},
			code: 400, observed: "github/bad_request"},
		{name: "github ref of the wrong type", body: `{"ref":5}`, mods: []mod{github("push")},
			code: 400, observed: "github/bad_request"},

		{name: "gitlab push", body: gitlabPush, mods: []mod{gitlab("Push Hook")},
			code: 202, observed: "gitlab/accepted", event: &Event{ProviderGitLab, "refs/heads/main", sha1}},
		{name: "gitlab wrong token", body: gitlabPush, mods: []mod{gitlab("Push Hook"), set("X-Gitlab-Token", "It's a Secret to Everybodx")},
			code: 403, observed: "gitlab/forbidden", msg: "secret token"},
		{name: "gitlab token prefix of the secret", body: gitlabPush, mods: []mod{gitlab("Push Hook"), set("X-Gitlab-Token", string(testSecret[:16]))},
			code: 403, observed: "gitlab/forbidden"},
		{name: "gitlab token missing", body: gitlabPush, mods: []mod{gitlab("Push Hook"), del("X-Gitlab-Token")},
			code: 401, observed: "gitlab/unauthorized", msg: "X-Gitlab-Token"},
		{name: "gitlab tag push hook", body: gitlabTagPushHook, mods: []mod{gitlab("Tag Push Hook")},
			code: 202, observed: "gitlab/ignored", msg: "not a push event"},
		{name: "gitlab branch deleted", body: gitlabDeleted, mods: []mod{gitlab("Push Hook")},
			code: 202, observed: "gitlab/ignored", msg: "ref deleted"},
		{name: "gitlab malformed JSON", body: `not json`, mods: []mod{gitlab("Push Hook")},
			code: 400, observed: "gitlab/bad_request"},

		{name: "gitea push", body: giteaPush, mods: []mod{gitea("push")},
			code: 202, observed: "gitea/accepted", event: &Event{ProviderGitea, "refs/heads/main", sha1}},
		{name: "gitea wrong signature, right GitHub one", body: giteaPush,
			mods: []mod{gitea("push"), signedWith("X-Gitea-Signature", []byte("another secret of 16+ bytes"), "")},
			code: 403, observed: "gitea/forbidden"},
		{name: "gitea signature missing", body: giteaPush, mods: []mod{gitea("push"), del("X-Gitea-Signature")},
			code: 401, observed: "gitea/unauthorized", msg: "X-Gitea-Signature"},
		{name: "gitea branch deleted", body: giteaDeleted, mods: []mod{gitea("push")},
			code: 202, observed: "gitea/ignored", msg: "ref deleted"},
		{name: "gitea other event", body: `{}`, mods: []mod{gitea("issues")},
			code: 202, observed: "gitea/ignored"},
		{name: "forgejo push", body: giteaPush, mods: []mod{forgejo("push")},
			code: 202, observed: "forgejo/accepted", event: &Event{ProviderForgejo, "refs/heads/main", sha1}},
		{name: "forgejo wrong signature", body: giteaPush,
			mods: []mod{forgejo("push"), signedWith("X-Forgejo-Signature", []byte("another secret of 16+ bytes"), "")},
			code: 403, observed: "forgejo/forbidden"},

		{name: "generic push", body: `{"ref":"refs/heads/main"}`, mods: []mod{generic()},
			code: 202, observed: "generic/accepted", event: &Event{ProviderGeneric, "refs/heads/main", ""}},
		{name: "generic empty body", body: ``, mods: []mod{generic()},
			code: 202, observed: "generic/accepted", event: &Event{Provider: ProviderGeneric}},
		{name: "generic body without ref", body: `{"reason":"nightly"}`, mods: []mod{generic()},
			code: 202, observed: "generic/accepted", event: &Event{Provider: ProviderGeneric}},
		{name: "generic other branch", body: `{"ref":"refs/heads/dev"}`, mods: []mod{generic()},
			code: 202, observed: "generic/ignored"},
		{name: "generic wrong signature", body: `{"ref":"refs/heads/main"}`,
			mods: []mod{generic(), signedWith("X-Rigger-Signature-256", []byte("another secret of 16+ bytes"), "sha256=")},
			code: 403, observed: "generic/forbidden"},
		{name: "generic malformed JSON", body: `{"ref":`, mods: []mod{generic()},
			code: 400, observed: "generic/bad_request"},
		{name: "no headers at all", body: `{"ref":"refs/heads/main"}`,
			code: 401, observed: "generic/unauthorized", msg: "X-Rigger-Signature-256"},
		{name: "GitHub signature without GitHub event", body: `{"ref":"refs/heads/main"}`, mods: []mod{github("push"), del("X-GitHub-Event")},
			code: 401, observed: "generic/unauthorized"},

		{name: "GET", method: http.MethodGet, mods: []mod{github("push")},
			code: 405, observed: "github/method_not_allowed"},
		{name: "PUT signed", method: http.MethodPut, body: githubPush, mods: []mod{github("push")},
			code: 405, observed: "github/method_not_allowed"},
		{name: "oversize", body: oversize, mods: []mod{github("push")},
			code: 413, observed: "github/too_large", msg: "4096 bytes"},
		{name: "oversize unsigned", body: oversize,
			code: 413, observed: "generic/too_large"},
		{name: "wrong path", path: "/hooks/00000000000000000000000000000000", body: githubPush, mods: []mod{github("push")},
			code: 404},
		{name: "path with a trailing slash", path: path + "/", body: githubPush, mods: []mod{github("push")},
			code: 404},
		{name: "path prefix", path: path[:len(path)-1], body: githubPush, mods: []mod{github("push")},
			code: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, c := newHandler(t, nil)
			srv := httptest.NewServer(h)
			defer srv.Close()
			method, p := tt.method, tt.path
			if method == "" {
				method = http.MethodPost
			}
			if p == "" {
				p = path
			}

			resp, body := send(t, srv, method, p, tt.body, tt.mods...)
			if resp.StatusCode != tt.code {
				t.Errorf("status %d (%q), want %d", resp.StatusCode, body, tt.code)
			}
			if !strings.Contains(body, tt.msg) {
				t.Errorf("response %q does not contain %q", body, tt.msg)
			}
			if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
				t.Errorf("response %q is not one line", body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("content type %q, want text/plain", ct)
			}
			if tt.code == 405 && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q, want POST", resp.Header.Get("Allow"))
			}

			events, observed, logs := c.snapshot()
			var want []Event
			if tt.event != nil {
				want = []Event{*tt.event}
			}
			if diff := cmp.Diff(want, events); diff != "" {
				t.Errorf("Trigger calls (-want +got):\n%s", diff)
			}
			var wantObserved []string
			if tt.observed != "" {
				wantObserved = []string{tt.observed}
			}
			if diff := cmp.Diff(wantObserved, observed); diff != "" {
				t.Errorf("Observe calls (-want +got):\n%s", diff)
			}
			if tt.observed != "" {
				result := tt.observed[strings.Index(tt.observed, "/")+1:]
				if !strings.Contains(logs, "result="+result) || !strings.Contains(logs, "remote=127.0.0.1:") {
					t.Errorf("log %q lacks the result or the remote address", logs)
				}
			}
			for what, s := range map[string]string{"response": body, "log": logs} {
				if strings.Contains(s, string(testSecret)) || strings.Contains(s, hex.EncodeToString(testSecret)) {
					t.Errorf("%s contains the secret: %q", what, s)
				}
				if len(tt.body) > 8 && strings.Contains(s, tt.body) {
					t.Errorf("%s echoes the request body: %q", what, s)
				}
			}
		})
	}
}

// limitedServer serves a handler whose forge budget is two deliveries, then
// one an hour; it is closed when the test ends.
func limitedServer(t *testing.T) (*httptest.Server, *calls) {
	h, c := newHandler(t, func(cfg *Config) {
		cfg.Rate = rate.Every(time.Hour)
		cfg.Burst = 2
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, c
}

func TestRateLimit(t *testing.T) {
	srv, c := limitedServer(t)
	path := Path(testSecret)

	// A refused method is answered before the limiters and costs nothing.
	if resp, _ := send(t, srv, http.MethodGet, path, ""); resp.StatusCode != 405 {
		t.Fatalf("GET: status %d, want 405", resp.StatusCode)
	}
	for i := range 2 {
		if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
			t.Fatalf("push %d within the burst: status %d (%q)", i, resp.StatusCode, body)
		}
	}
	// Over the limit, even a valid push is refused.
	resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push"))
	if resp.StatusCode != 429 {
		t.Fatalf("push over the limit: status %d (%q), want 429", resp.StatusCode, body)
	}
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 3600 {
		t.Errorf("Retry-After %q, want seconds in [1, 3600]", resp.Header.Get("Retry-After"))
	}
	// An unauthenticated request has a budget of its own.
	if resp, body := send(t, srv, http.MethodPost, path, githubPush); resp.StatusCode != 401 {
		t.Fatalf("unsigned push: status %d (%q), want 401", resp.StatusCode, body)
	}

	events, observed, _ := c.snapshot()
	if len(events) != 2 {
		t.Errorf("Trigger called %d times, want 2", len(events))
	}
	want := []string{"generic/method_not_allowed", "github/accepted", "github/accepted", "github/rate_limited", "generic/unauthorized"}
	if diff := cmp.Diff(want, observed); diff != "" {
		t.Errorf("Observe calls (-want +got):\n%s", diff)
	}
}

// TestRateLimitPerOutcome: requests that fail authentication spend a budget
// of their own, so that someone without the secret cannot starve the
// forge's pushes; over it they get 429 too.
func TestRateLimitPerOutcome(t *testing.T) {
	h, c := newHandler(t, func(cfg *Config) {
		cfg.Rate = rate.Every(time.Hour)
		cfg.Burst = 10
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	path := Path(testSecret)
	bad := signedWith("X-Hub-Signature-256", []byte("not-the-secret-at-all"), "sha256=")

	for i := range 10 {
		if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push"), bad); resp.StatusCode != 403 {
			t.Fatalf("bad signature %d: status %d (%q), want 403", i, resp.StatusCode, body)
		}
	}
	if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("valid push after ten bad requests: status %d (%q), want 202", resp.StatusCode, body)
	}
	for _, mods := range [][]mod{{github("push"), bad}, nil} {
		resp, body := send(t, srv, http.MethodPost, path, githubPush, mods...)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("unauthenticated request over its budget: status %d (%q), Retry-After %q; want 429 with Retry-After",
				resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
	}
	if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("valid push with the unauthenticated budget spent: status %d (%q), want 202", resp.StatusCode, body)
	}
	events, observed, _ := c.snapshot()
	if len(events) != 2 {
		t.Errorf("Trigger called %d times, want 2", len(events))
	}
	if got := observed[len(observed)-3:]; !cmp.Equal(got, []string{"github/rate_limited", "generic/rate_limited", "github/accepted"}) {
		t.Errorf("last Observe calls %v", got)
	}
}

func TestNew(t *testing.T) {
	trigger := func(Event) {}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // empty when New must succeed
	}{
		{name: "minimal", cfg: Config{Secret: testSecret, Branch: "main", Trigger: trigger}},
		{name: "full ref as branch", cfg: Config{Secret: testSecret, Branch: "refs/heads/main", Trigger: trigger}},
		{name: "secret of 16 bytes", cfg: Config{Secret: []byte("0123456789abcdef"), Branch: "main", Trigger: trigger}},
		{name: "short secret", cfg: Config{Secret: []byte("hunter2-hunter2"), Branch: "main", Trigger: trigger}, wantErr: "use at least 16 random bytes"},
		{name: "no secret", cfg: Config{Branch: "main", Trigger: trigger}, wantErr: "secret is 0 bytes"},
		{name: "no branch", cfg: Config{Secret: testSecret, Trigger: trigger}, wantErr: "set the branch rigger follows"},
		{name: "bare refs/heads/", cfg: Config{Secret: testSecret, Branch: "refs/heads/", Trigger: trigger}, wantErr: "branch is empty"},
		{name: "no trigger", cfg: Config{Secret: testSecret, Branch: "main"}, wantErr: "trigger is nil"},
		{name: "negative body limit", cfg: Config{Secret: testSecret, Branch: "main", Trigger: trigger, MaxBody: -1}, wantErr: "body limit is -1"},
		{name: "negative rate", cfg: Config{Secret: testSecret, Branch: "main", Trigger: trigger, Rate: -1}, wantErr: "use positive values"},
		{name: "negative burst", cfg: Config{Secret: testSecret, Branch: "main", Trigger: trigger, Burst: -1}, wantErr: "use positive values"},
		{name: "every error at once", cfg: Config{Secret: []byte("hunter2")}, wantErr: "branch is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || h == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if len(tt.cfg.Secret) > 0 && strings.Contains(err.Error(), string(tt.cfg.Secret)) {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

func TestBranchAsFullRef(t *testing.T) {
	h, c := newHandler(t, func(cfg *Config) { cfg.Branch = "refs/heads/main" })
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp, body := send(t, srv, http.MethodPost, Path(testSecret), githubPush, github("push")); resp.StatusCode != 202 || body != "fetch requested\n" {
		t.Fatalf("status %d %q, want 202 fetch requested", resp.StatusCode, body)
	}
	if events, _, _ := c.snapshot(); len(events) != 1 {
		t.Fatalf("Trigger called %d times, want 1", len(events))
	}
}

func TestPath(t *testing.T) {
	// Computed independently:
	// printf 'rigger webhook path' | openssl dgst -sha256 -hmac "It's a Secret to Everybody"
	if got, want := Path(testSecret), "/hooks/9600e5a84a1af864f2ad77c53aea1aa2"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	other := Path([]byte("another secret of 16+ bytes"))
	if !regexp.MustCompile(`^/hooks/[0-9a-f]{32}$`).MatchString(other) {
		t.Errorf("Path = %q, want /hooks/ and 32 hex characters", other)
	}
	if other == Path(testSecret) {
		t.Error("two secrets give the same path")
	}
}

func TestSign(t *testing.T) {
	// The example of GitHub's documentation, "Validating webhook deliveries".
	got := Sign(testSecret, []byte("Hello, World!"))
	if want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"; got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

// TestMountOnMux mounts the handler as the documentation says.
func TestMountOnMux(t *testing.T) {
	h, c := newHandler(t, nil)
	mux := http.NewServeMux()
	mux.Handle(Path(testSecret), h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if resp, body := send(t, srv, http.MethodPost, Path(testSecret), githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("status %d (%q), want 202", resp.StatusCode, body)
	}
	if resp, _ := send(t, srv, http.MethodPost, "/hooks/", githubPush, github("push")); resp.StatusCode != 404 {
		t.Fatalf("/hooks/: status %d, want 404", resp.StatusCode)
	}
	if events, _, _ := c.snapshot(); len(events) != 1 {
		t.Fatalf("Trigger called %d times, want 1", len(events))
	}
}

// TestSecretCopied checks that changing the caller's slice after New does
// not change the secret.
func TestSecretCopied(t *testing.T) {
	secret := append([]byte(nil), testSecret...)
	h, c := newHandler(t, func(cfg *Config) { cfg.Secret = secret })
	secret[0] = 'X'
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp, body := send(t, srv, http.MethodPost, Path(testSecret), githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("status %d (%q), want 202", resp.StatusCode, body)
	}
	if events, _, _ := c.snapshot(); len(events) != 1 {
		t.Fatalf("Trigger called %d times, want 1", len(events))
	}
}

// TestConcurrent sends requests in parallel, for the race detector.
func TestConcurrent(t *testing.T) {
	h, c := newHandler(t, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"ref":"refs/heads/main","n":%d}`, i)
			req, _ := http.NewRequest(http.MethodPost, srv.URL+Path(testSecret), strings.NewReader(body))
			generic()(req.Header, []byte(body))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 202 {
				t.Errorf("status %d, want 202", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	if events, observed, _ := c.snapshot(); len(events) != 16 || len(observed) != 16 {
		t.Errorf("%d Trigger and %d Observe calls, want 16 each", len(events), len(observed))
	}
}

// TestRateLimitedPushFetchedLate: pushes refused for the rate (a forge
// that sends many at once: one per status commit of many clusters) are
// not lost: once the budget allows, one Trigger comes for all of them, and
// no more than the budget.
func TestRateLimitedPushFetchedLate(t *testing.T) {
	const every = 300 * time.Millisecond
	h, c := newHandler(t, func(cfg *Config) {
		cfg.Rate = rate.Every(every)
		cfg.Burst = 1
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	path := Path(testSecret)
	if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
		t.Fatalf("first push: status %d (%q)", resp.StatusCode, body)
	}
	refused := time.Now()
	for i := range 3 {
		if resp, body := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 429 {
			t.Fatalf("push %d over the budget: status %d (%q), want 429", i, resp.StatusCode, body)
		}
	}
	if events, _, _ := c.snapshot(); len(events) != 1 {
		t.Fatalf("Trigger called %d times at once, want 1 (the late one waits for the budget)", len(events))
	}
	if !testwait.Until(5*time.Second, 10*time.Millisecond, func() bool { events, _, _ := c.snapshot(); return len(events) == 2 }) {
		t.Fatal("the pushes refused for the rate were never fetched")
	}
	if took := time.Since(refused); took < every/2 {
		t.Errorf("the late fetch came %s after the refusals, before the budget allowed it (%s)", took, every)
	}
	<-time.After(3 * every)
	if events, _, _ := c.snapshot(); len(events) != 2 {
		t.Errorf("Trigger called %d times, want 2: three refused pushes make one late fetch", len(events))
	}
}
