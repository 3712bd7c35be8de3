package webhook

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

// checkPush holds for every push a parser returns without error.
func checkPush(t *testing.T, p push, needRef bool) {
	t.Helper()
	if p.after != "" && !isCommitID(p.after) {
		t.Errorf("after %q is not a commit id", p.after)
	}
	if p.deleted && p.after != "" {
		t.Errorf("deleted push with after %q", p.after)
	}
	if needRef && p.ref == "" {
		t.Error("forge push without a ref accepted")
	}
	_ = p.ignored("refs/heads/main", "main")
}

// fuzzParser fuzzes one provider's parser.
func fuzzParser(f *testing.F, parse func([]byte) (push, error), needRef bool, seeds ...string) {
	for _, s := range append(seeds, ``, `{}`, `null`, `[]`, `{"ref":null}`, `{"ref":"refs/heads/main","after":"`+zeroID+`"}`,
		`{"ref":"\u0000","after":1e999}`, `{"deleted":"yes"}`, `{"ref":"refs/heads/main"`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parse(body)
		if err != nil {
			return
		}
		checkPush(t, p, needRef)
	})
}

func FuzzParseGitHub(f *testing.F) {
	fuzzParser(f, parseGitHub, true, githubPush, githubDeleted, githubTag, githubPing, githubPushOf(ownSHA, ownMsg, humanMsg),
		`{"ref":"refs/heads/main","commits":[null,{"message":null},{"message":"\n\nRigger-Status: x"}]}`)
}

func FuzzParseGitLab(f *testing.F) {
	fuzzParser(f, parseGitLab, true, gitlabPush, gitlabDeleted, gitlabTagPushHook, gitlabPushOf(sha1, 1, ownMsg),
		`{"ref":"refs/heads/main","commits":[{"message":"x"}],"total_commits_count":-1}`)
}

func FuzzParseGitea(f *testing.F) {
	fuzzParser(f, parseGitea, true, giteaPush, giteaDeleted, giteaPushOf(ownSHA, 2, ownMsg, ownMsg), giteaPushOf(sha1, -1, ownMsg))
}

func FuzzParseGeneric(f *testing.F) {
	fuzzParser(f, parseGeneric, false, `{"ref":"refs/heads/main"}`, `{"reason":"nightly"}`)
}

// FuzzHandler sends any event header, body and signature to the handler.
// sign chooses whether the request is correctly signed for its provider, so
// that the fuzzer reaches the parsers as well as authentication.
func FuzzHandler(f *testing.F) {
	f.Add(uint8(0), "push", []byte(githubPush), true, "")
	f.Add(uint8(0), "ping", []byte(githubPing), true, "")
	f.Add(uint8(1), "Push Hook", []byte(gitlabPush), true, "")
	f.Add(uint8(2), "push", []byte(giteaPush), true, "")
	f.Add(uint8(3), "push", []byte(giteaDeleted), true, "")
	f.Add(uint8(4), "", []byte(`{"ref":"refs/heads/main"}`), true, "")
	f.Add(uint8(4), "", []byte(`{"ref":`), false, "sha256=00")
	f.Add(uint8(0), "push", []byte(githubPush), false, "sha256=zz")
	f.Add(uint8(0), "push", []byte(githubPushOf(ownSHA, humanMsg)), true, "")
	f.Add(uint8(1), "Push Hook", []byte(gitlabPushOf(sha1, 2, ownMsg, ownMsg)), true, "")
	f.Add(uint8(3), "push", []byte(giteaPushOf(sha1, 1, ownMsg)), true, "")
	f.Add(uint8(4), "", []byte(`{"ref":"refs/heads/main","after":"`+ownSHA+`"}`), true, "")
	f.Fuzz(func(t *testing.T, which uint8, event string, body []byte, sign bool, sig string) {
		var triggered []Event
		var observed []string
		h, err := New(Config{
			Secret:     testSecret,
			Branch:     "main",
			Trigger:    func(e Event) { triggered = append(triggered, e) },
			Observe:    func(p, r string) { observed = append(observed, r) },
			MaxBody:    1 << 16,
			Rate:       rate.Inf,
			Own:        func(c string) bool { return c == ownSHA },
			OwnMessage: isStatusMessage,
		})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, Path(testSecret), strings.NewReader(string(body)))
		// Header values with control characters cannot be sent; the
		// server would refuse them before the handler.
		if strings.ContainsAny(event, "\r\n\x00") || strings.ContainsAny(sig, "\r\n\x00") {
			return
		}
		hexMAC := hex.EncodeToString(mac(testSecret, body))
		if !sign {
			hexMAC = sig
		}
		switch which % 5 {
		case 0:
			req.Header.Set("X-GitHub-Event", event)
			req.Header.Set("X-Hub-Signature-256", "sha256="+hexMAC)
		case 1:
			req.Header.Set("X-Gitlab-Event", event)
			if sign {
				req.Header.Set("X-Gitlab-Token", string(testSecret))
			} else {
				req.Header.Set("X-Gitlab-Token", sig)
			}
		case 2:
			req.Header.Set("X-Gitea-Event", event)
			req.Header.Set("X-Gitea-Signature", hexMAC)
		case 3:
			req.Header.Set("X-Forgejo-Event", event)
			req.Header.Set("X-Forgejo-Signature", hexMAC)
		case 4:
			req.Header.Set("X-Rigger-Signature-256", "sha256="+hexMAC)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		if len(observed) != 1 {
			t.Fatalf("%d Observe calls, want 1", len(observed))
		}
		codes := map[string]int{
			ResultAccepted: 202, ResultIgnored: 202, ResultPing: 200, ResultUnauthorized: 401,
			ResultForbidden: 403, ResultBadRequest: 400, ResultTooLarge: 413, ResultOwn: 200,
		}
		want, ok := codes[observed[0]]
		if !ok || rec.Code != want {
			t.Fatalf("result %q with status %d", observed[0], rec.Code)
		}
		if (observed[0] == ResultAccepted) != (len(triggered) == 1) || len(triggered) > 1 {
			t.Fatalf("result %q with %d Trigger calls", observed[0], len(triggered))
		}
		// A request that got past authentication without being signed
		// here must have guessed the real signature or token.
		authenticated := observed[0] != ResultUnauthorized && observed[0] != ResultForbidden
		if !sign && authenticated {
			real := hex.EncodeToString(mac(testSecret, body))
			if which%5 == 1 && sig != string(testSecret) || which%5 != 1 && !strings.EqualFold(strings.TrimSpace(sig), real) {
				t.Fatalf("authenticated a request signed %q (result %q)", sig, observed[0])
			}
		}
		if strings.Contains(rec.Body.String(), string(testSecret)) {
			t.Fatalf("response contains the secret: %q", rec.Body)
		}
	})
}
