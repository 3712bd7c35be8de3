package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Providers, as in Event.Provider and Config.Observe.
const (
	ProviderGitHub  = "github"
	ProviderGitLab  = "gitlab"
	ProviderGitea   = "gitea"
	ProviderForgejo = "forgejo"
	ProviderGeneric = "generic"
)

// Headers read from requests.
const (
	headerGitHubEvent      = "X-GitHub-Event"
	headerGitHubSignature  = "X-Hub-Signature-256"
	headerGitLabEvent      = "X-Gitlab-Event"
	headerGitLabToken      = "X-Gitlab-Token"
	headerGiteaEvent       = "X-Gitea-Event"
	headerGiteaSignature   = "X-Gitea-Signature"
	headerForgejoEvent     = "X-Forgejo-Event"
	headerForgejoSignature = "X-Forgejo-Signature"
	headerGenericSignature = "X-Rigger-Signature-256"
)

// authResult is what authentication found.
type authResult int

const (
	authOK       authResult = iota
	authMissing             // no signature or token header at all
	authMismatch            // a header that does not match the secret
)

// eventKind is what an event header asks for.
type eventKind int

const (
	eventPush eventKind = iota
	eventPing
	eventOther
)

// provider is how one forge (or the generic form) sends a webhook: its
// headers, its event names and its payload parser (a pure function).
type provider struct {
	name        string
	eventHeader string // empty for the generic form, which has no event
	pushEvent   string
	pingEvent   string   // empty when the forge has none
	sigHeaders  []string // HMAC signature headers, first present wins; none for GitLab
	sigPrefix   string   // before the hex in sigHeaders, such as "sha256="
	tokenHeader string   // a plain token equal to the secret (GitLab)
	parse       func(body []byte) (push, error)
	missing     string // what to send, for a 401
	mismatch    string // what to check, for a 403
}

// detect tells the provider by its event header. Gitea and Forgejo also send
// GitHub's headers for compatibility, so they are looked for first.
func detect(h http.Header) provider {
	hmacMismatch := "signature does not match: check the webhook secret"
	switch {
	case h.Get(headerForgejoEvent) != "":
		return provider{name: ProviderForgejo, eventHeader: headerForgejoEvent, pushEvent: "push",
			sigHeaders: []string{headerForgejoSignature, headerGiteaSignature},
			parse:      parseGitea,
			missing:    "set the webhook secret in Forgejo so that it sends " + headerForgejoSignature,
			mismatch:   hmacMismatch}
	case h.Get(headerGiteaEvent) != "":
		return provider{name: ProviderGitea, eventHeader: headerGiteaEvent, pushEvent: "push",
			sigHeaders: []string{headerGiteaSignature, headerForgejoSignature},
			parse:      parseGitea,
			missing:    "set the webhook secret in Gitea so that it sends " + headerGiteaSignature,
			mismatch:   hmacMismatch}
	case h.Get(headerGitLabEvent) != "":
		return provider{name: ProviderGitLab, eventHeader: headerGitLabEvent, pushEvent: "Push Hook",
			tokenHeader: headerGitLabToken,
			parse:       parseGitLab,
			missing:     "set the webhook's secret token in GitLab so that it sends " + headerGitLabToken,
			mismatch:    "token does not match: check the webhook's secret token"}
	case h.Get(headerGitHubEvent) != "":
		return provider{name: ProviderGitHub, eventHeader: headerGitHubEvent, pushEvent: "push", pingEvent: "ping",
			sigHeaders: []string{headerGitHubSignature}, sigPrefix: "sha256=",
			parse:    parseGitHub,
			missing:  "set the webhook secret in GitHub so that it sends " + headerGitHubSignature,
			mismatch: hmacMismatch}
	default:
		return provider{name: ProviderGeneric,
			sigHeaders: []string{headerGenericSignature}, sigPrefix: "sha256=",
			parse: parseGeneric,
			missing: "send " + headerGenericSignature + ": sha256=<hex HMAC-SHA256 of the body>, or a forge's headers (" +
				headerGitHubEvent + " and " + headerGitHubSignature + ", " +
				headerGitLabEvent + " and " + headerGitLabToken + ", " +
				headerGiteaEvent + " and " + headerGiteaSignature + ", " +
				headerForgejoEvent + " and " + headerForgejoSignature + ")",
			mismatch: hmacMismatch}
	}
}

// authenticate checks the request's signature or token against secret, in
// constant time.
func (p provider) authenticate(h http.Header, secret, body []byte) authResult {
	if p.tokenHeader != "" {
		v := h.Values(p.tokenHeader)
		if len(v) == 0 {
			return authMissing
		}
		if !tokenEqual(v[0], secret) {
			return authMismatch
		}
		return authOK
	}
	for _, name := range p.sigHeaders {
		v := h.Values(name)
		if len(v) == 0 {
			continue
		}
		if !signatureValid(v[0], p.sigPrefix, secret, body) {
			return authMismatch
		}
		return authOK
	}
	return authMissing
}

// signatureValid reports whether sig is prefix followed by the hex
// HMAC-SHA256 of body with secret.
func signatureValid(sig, prefix string, secret, body []byte) bool {
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(sig), prefix)
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	return hmac.Equal(got, mac(secret, body))
}

// tokenEqual compares a plain token with secret in constant time. Both are
// hashed first so that not even the secret's length leaks.
func tokenEqual(token string, secret []byte) bool {
	a, b := sha256.Sum256([]byte(token)), sha256.Sum256(secret)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// event is the value of the event header.
func (p provider) event(h http.Header) string {
	if p.eventHeader == "" {
		return ""
	}
	return h.Get(p.eventHeader)
}

// kind says what the event asks for. The generic form is always a push.
func (p provider) kind(h http.Header) eventKind {
	if p.eventHeader == "" {
		return eventPush
	}
	switch e := p.event(h); {
	case e == p.pushEvent:
		return eventPush
	case p.pingEvent != "" && e == p.pingEvent:
		return eventPing
	default:
		return eventOther
	}
}

// push is what rigger needs of a push payload.
type push struct {
	ref     string // empty only for a generic request that does not say
	after   string // a commit id, or empty
	deleted bool
	// messages are the messages of the pushed commits the payload lists;
	// complete says whether it lists every pushed commit (forges cap the
	// list: GitLab at 20, GitHub at 2048).
	messages []string
	complete bool
}

// commit is a pushed commit as GitHub, GitLab, Gitea and Forgejo list it.
type commit struct {
	Message string `json:"message"`
}

// withCommits is p with the pushed commits' messages. total is how many
// commits were pushed, when the payload says (nil: it does not); limit is
// the most the forge lists (0: unknown, then total must say).
func (p push) withCommits(commits []commit, total *int, limit int) push {
	for _, c := range commits {
		p.messages = append(p.messages, c.Message)
	}
	switch n := len(commits); {
	case n == 0:
	case total != nil:
		p.complete = *total == n
	case limit > 0:
		p.complete = n < limit
	}
	return p
}

// The most commits a forge lists in a push payload.
const (
	githubMaxCommits = 2048
	gitlabMaxCommits = 20
)

// ownWhy says why p is a push of rigger's own commits only, or "" when it
// is not (or may not be): its new head is one of them (own), or it lists
// every pushed commit and each carries rigger's trailer (ownMessage).
func (p push) ownWhy(own, ownMessage func(string) bool) string {
	if p.deleted {
		return ""
	}
	if own != nil && p.after != "" && own(p.after) {
		return "its head is a commit rigger made"
	}
	if ownMessage == nil || !p.complete {
		return ""
	}
	for _, m := range p.messages {
		if !ownMessage(m) {
			return ""
		}
	}
	return "every commit carries rigger's status trailer"
}

// newPush normalises what a payload said: an all-zero after means the ref
// was deleted, and an after that is not a commit id is dropped.
func newPush(ref, after string, deleted bool) push {
	if after != "" && strings.Trim(after, "0") == "" {
		deleted = true
	}
	if deleted || !isCommitID(after) {
		after = ""
	}
	return push{ref: ref, after: after, deleted: deleted}
}

// isCommitID reports whether s is a SHA-1 or SHA-256 object id in lower-case hex.
func isCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ignored says why a push does not trigger a fetch of refs/heads/<branch>
// (ref), or "" when it does. A push that names no ref triggers.
func (p push) ignored(ref, branch string) string {
	switch {
	case p.deleted:
		return "ref deleted"
	case strings.HasPrefix(p.ref, "refs/tags/"):
		return "tag push"
	case p.ref != "" && p.ref != ref:
		return "not a push to branch " + branch
	}
	return ""
}

// errNoRef is returned for a forge's push payload without a ref.
var errNoRef = errors.New("push payload has no ref")

// decode unmarshals a JSON object payload.
func decode(what string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s push payload: %w", what, err)
	}
	return nil
}

// parseGitHub reads a GitHub push event payload.
func parseGitHub(body []byte) (push, error) {
	var v struct {
		Ref     string   `json:"ref"`
		After   string   `json:"after"`
		Deleted bool     `json:"deleted"`
		Commits []commit `json:"commits"`
	}
	if err := decode("GitHub", body, &v); err != nil {
		return push{}, err
	}
	if v.Ref == "" {
		return push{}, errNoRef
	}
	return newPush(v.Ref, v.After, v.Deleted).withCommits(v.Commits, nil, githubMaxCommits), nil
}

// parseGitLab reads a GitLab "Push Hook" payload. checkout_sha is the head
// of the pushed ref; it is null when the ref was deleted.
func parseGitLab(body []byte) (push, error) {
	var v struct {
		Ref         string   `json:"ref"`
		After       string   `json:"after"`
		CheckoutSHA *string  `json:"checkout_sha"`
		Commits     []commit `json:"commits"`
		Total       *int     `json:"total_commits_count"`
	}
	if err := decode("GitLab", body, &v); err != nil {
		return push{}, err
	}
	if v.Ref == "" {
		return push{}, errNoRef
	}
	after := v.After
	if v.CheckoutSHA != nil && *v.CheckoutSHA != "" {
		after = *v.CheckoutSHA
	}
	return newPush(v.Ref, after, false).withCommits(v.Commits, v.Total, gitlabMaxCommits), nil
}

// parseGitea reads a Gitea or Forgejo push payload. They tell a deletion by
// an all-zero after.
func parseGitea(body []byte) (push, error) {
	var v struct {
		Ref     string   `json:"ref"`
		After   string   `json:"after"`
		Deleted bool     `json:"deleted"`
		Commits []commit `json:"commits"`
		Total   *int     `json:"total_commits"`
	}
	if err := decode("Gitea", body, &v); err != nil {
		return push{}, err
	}
	if v.Ref == "" {
		return push{}, errNoRef
	}
	return newPush(v.Ref, v.After, v.Deleted).withCommits(v.Commits, v.Total, 0), nil
}

// parseGeneric reads a generic request's body: empty, or a JSON object
// whose ref, after and deleted are all optional.
func parseGeneric(body []byte) (push, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return push{}, nil
	}
	var v struct {
		Ref     string `json:"ref"`
		After   string `json:"after"`
		Deleted bool   `json:"deleted"`
	}
	if err := decode("generic", body, &v); err != nil {
		return push{}, err
	}
	return newPush(v.Ref, v.After, v.Deleted), nil
}
