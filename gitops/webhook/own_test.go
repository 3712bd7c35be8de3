package webhook

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ownSHA is a commit rigger made; ownMsg and humanMsg are messages of
// rigger's status commits and of a person's.
const (
	ownSHA   = "5b0e8f6bd0f0c3b6bd5ab1e7bd6c1b0a2e3f4a5b"
	ownMsg   = "rigger: status of prod: Ready True (Converged)\n\nObserved revision 1481a2d of clusters/prod/cluster.yml.\n\nRigger-Status: clusters/prod/cluster.yml\n"
	humanMsg = "scale workers\n\nRigger-Status: mentioned in the body is not a trailer\n\nSigned-off-by: Ops <ops@example.test>"
)

// jsonString quotes s for a JSON payload.
func jsonString(s string) string {
	return fmt.Sprintf("%q", s) // the messages here have only JSON-safe escapes
}

// commitsJSON lists commits with messages, each with an id, as the
// forges do.
func commitsJSON(messages ...string) string {
	var parts []string
	for i, m := range messages {
		parts = append(parts, fmt.Sprintf(`{"id":"%040x","message":%s,"author":{"name":"x"}}`, i+1, jsonString(m)))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Real-shaped payloads of pushes of rigger's own commits, and of mixed ones.
func githubPushOf(after string, messages ...string) string {
	return `{"ref":"refs/heads/main","before":"` + sha2 + `","after":"` + after + `","created":false,"deleted":false,"forced":false,` +
		`"commits":` + commitsJSON(messages...) + `,"repository":{"full_name":"acme/clusters"}}`
}

func gitlabPushOf(after string, total int, messages ...string) string {
	return `{"object_kind":"push","event_name":"push","before":"` + sha2 + `","after":"` + after + `","ref":"refs/heads/main","checkout_sha":"` + after +
		`","commits":` + commitsJSON(messages...) + fmt.Sprintf(`,"total_commits_count":%d}`, total)
}

func giteaPushOf(after string, total int, messages ...string) string {
	t := ""
	if total >= 0 {
		t = fmt.Sprintf(`,"total_commits":%d`, total)
	}
	return `{"ref":"refs/heads/main","before":"` + sha2 + `","after":"` + after + `","compare_url":"https://git.example/acme/clusters/compare/x...y","commits":` +
		commitsJSON(messages...) + t + `,"repository":{"full_name":"acme/clusters"}}`
}

// isStatusMessage tells a message with a Rigger-Status trailer in its last
// paragraph, as gitrepo.IsRiggerCommit does for serve.
func isStatusMessage(m string) bool {
	m = strings.TrimRight(m, "\n")
	i := strings.LastIndex(m, "\n\n")
	return i >= 0 && strings.HasPrefix(m[i+2:], "Rigger-Status:")
}

func TestOwnCommits(t *testing.T) {
	many := make([]string, gitlabMaxCommits)
	for i := range many {
		many[i] = ownMsg
	}
	tests := []struct {
		name string
		body string
		mods []mod
		own  bool // answered ResultOwn; else accepted, or ignored when ignored is set
		// ignored is the answer's body for a push that is not taken as
		// rigger's and does not trigger.
		ignored string
	}{
		{name: "github head is rigger's", body: githubPushOf(ownSHA, humanMsg), mods: []mod{github("push")}, own: true},
		{name: "github every commit rigger's", body: githubPushOf(sha1, ownMsg, ownMsg), mods: []mod{github("push")}, own: true},
		{name: "github one commit a person's", body: githubPushOf(sha1, ownMsg, humanMsg), mods: []mod{github("push")}},
		{name: "github no commits listed", body: githubPushOf(sha1), mods: []mod{github("push")}},
		{name: "github documented payload", body: githubPush, mods: []mod{github("push")}},
		{name: "github head rigger's, on the status branch", body: strings.Replace(githubPushOf(ownSHA), "refs/heads/main", "refs/heads/rigger-status", 1),
			mods: []mod{github("push")}, own: true},
		{name: "github deleted branch is no push of rigger's", body: githubDeleted, mods: []mod{github("push")}, ignored: "ref deleted"},
		{name: "github not a push event", body: githubPushOf(ownSHA, ownMsg), mods: []mod{github("create")}, ignored: "not a push event"},
		{name: "gitlab head is rigger's", body: gitlabPushOf(ownSHA, 1, humanMsg), mods: []mod{gitlab("Push Hook")}, own: true},
		{name: "gitlab every commit rigger's", body: gitlabPushOf(sha1, 2, ownMsg, ownMsg), mods: []mod{gitlab("Push Hook")}, own: true},
		{name: "gitlab more pushed than listed", body: gitlabPushOf(sha1, 25, many...), mods: []mod{gitlab("Push Hook")}},
		{name: "gitlab one commit a person's", body: gitlabPushOf(sha1, 2, humanMsg, ownMsg), mods: []mod{gitlab("Push Hook")}},
		{name: "gitea head is rigger's", body: giteaPushOf(ownSHA, 1, humanMsg), mods: []mod{gitea("push")}, own: true},
		{name: "gitea every commit rigger's", body: giteaPushOf(sha1, 1, ownMsg), mods: []mod{gitea("push")}, own: true},
		{name: "gitea without total_commits", body: giteaPushOf(sha1, -1, ownMsg), mods: []mod{gitea("push")}},
		{name: "gitea documented payload", body: giteaPush, mods: []mod{gitea("push")}},
		{name: "forgejo every commit rigger's", body: giteaPushOf(sha1, 3, ownMsg, ownMsg, ownMsg), mods: []mod{forgejo("push")}, own: true},
		{name: "forgejo one commit a person's", body: giteaPushOf(sha1, 2, ownMsg, humanMsg), mods: []mod{forgejo("push")}},
		{name: "generic head is rigger's", body: `{"ref":"refs/heads/main","after":"` + ownSHA + `"}`, mods: []mod{generic()}, own: true},
		{name: "generic other head", body: `{"ref":"refs/heads/main","after":"` + sha1 + `"}`, mods: []mod{generic()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, c := newHandler(t, func(cfg *Config) {
				cfg.Own = func(commit string) bool { return commit == ownSHA }
				cfg.OwnMessage = isStatusMessage
				cfg.MaxBody = 1 << 16
			})
			srv := newServer(t, h)
			resp, body := send(t, srv, http.MethodPost, Path(testSecret), tt.body, tt.mods...)
			events, observed, _ := c.snapshot()
			switch {
			case tt.own:
				if resp.StatusCode != 200 || !strings.Contains(body, "rigger's own status commit") || len(events) != 0 {
					t.Errorf("status %d %q, %d Trigger calls; want 200, a body that says it is rigger's own commit, no Trigger", resp.StatusCode, body, len(events))
				}
				if len(observed) != 1 || !strings.HasSuffix(observed[0], "/"+ResultOwn) {
					t.Errorf("observed %v, want one %s", observed, ResultOwn)
				}
			case tt.ignored != "":
				if resp.StatusCode != 202 || !strings.Contains(body, tt.ignored) || len(events) != 0 {
					t.Errorf("status %d %q, %d Trigger calls; want 202 %q, no Trigger", resp.StatusCode, body, len(events), tt.ignored)
				}
			default:
				if resp.StatusCode != 202 || len(events) != 1 {
					t.Errorf("status %d %q, %d Trigger calls; want 202 and a fetch: a person's push", resp.StatusCode, body, len(events))
				}
			}
		})
	}
}

// TestOwnCommitsSpendNoBudget: a hundred pushes of rigger's own status
// commits, then a person's push: it is accepted at once, within a budget
// of 2; and a push that looks like rigger's but is not authenticated is
// refused before anything is read of it.
func TestOwnCommitsSpendNoBudget(t *testing.T) {
	h, c := newHandler(t, func(cfg *Config) {
		cfg.Rate, cfg.Burst = 1e-9, 2 // one token an eon: the burst is all there is
		cfg.Own = func(commit string) bool { return commit == ownSHA }
		cfg.OwnMessage = isStatusMessage
	})
	srv := newServer(t, h)
	path := Path(testSecret)
	for i := range 100 {
		body := githubPushOf(sha1, ownMsg)
		if i%2 == 0 {
			body = giteaPushOf(ownSHA, 1, ownMsg)
		}
		mods := []mod{github("push")}
		if i%2 == 0 {
			mods = []mod{gitea("push")}
		}
		if resp, b := send(t, srv, http.MethodPost, path, body, mods...); resp.StatusCode != 200 {
			t.Fatalf("rigger's own push %d: status %d %q, want 200", i, resp.StatusCode, b)
		}
	}
	for i := range 2 {
		if resp, b := send(t, srv, http.MethodPost, path, githubPush, github("push")); resp.StatusCode != 202 {
			t.Fatalf("a person's push %d after 100 of rigger's: status %d %q, want 202 at once", i, resp.StatusCode, b)
		}
	}
	if events, _, _ := c.snapshot(); len(events) != 2 {
		t.Errorf("Trigger called %d times, want 2: the people's pushes only", len(events))
	}
	// Authentication comes first: a forged push of rigger's head is
	// refused, and does not count as rigger's.
	resp, _ := send(t, srv, http.MethodPost, path, githubPushOf(ownSHA), github("push"), signedWith("X-Hub-Signature-256", []byte("not the secret at all"), "sha256="))
	if resp.StatusCode != 403 {
		t.Errorf("a push of rigger's head signed with another secret: status %d, want 403", resp.StatusCode)
	}
	resp, _ = send(t, srv, http.MethodGet, path, githubPushOf(ownSHA), github("push"))
	if resp.StatusCode != 405 {
		t.Errorf("a GET with rigger's head: status %d, want 405", resp.StatusCode)
	}
	if _, observed, _ := c.snapshot(); observed[len(observed)-2] != "github/forbidden" {
		t.Errorf("observed %v, want the forged push forbidden", observed[len(observed)-2:])
	}
}

// newServer serves h for the test's length.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
