package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of [Config].
const (
	// DefaultMaxBody is the largest body accepted when Config.MaxBody is 0.
	// Push payloads of large pushes stay well below it.
	DefaultMaxBody int64 = 1 << 20
	// DefaultRate is the sustained number of requests a second when
	// Config.Rate is 0.
	DefaultRate rate.Limit = 1
	// DefaultBurst is the number of requests accepted at once when
	// Config.Burst is 0.
	DefaultBurst = 10
	// MinSecretLen is the shortest secret New accepts, in bytes.
	MinSecretLen = 16
)

// Results of a request, as passed to Config.Observe and logged under the key
// "result". They are stable: metrics are labelled with them.
const (
	// ResultAccepted: an authenticated push to the followed branch; Trigger
	// was called.
	ResultAccepted = "accepted"
	// ResultIgnored: an authenticated event that is not a push to the
	// followed branch (another branch, a tag, a deletion, another event).
	ResultIgnored = "ignored"
	// ResultUnauthorized: no signature or token header at all.
	ResultUnauthorized = "unauthorized"
	// ResultForbidden: a signature or token that does not match the secret.
	ResultForbidden = "forbidden"
	// ResultBadRequest: an authenticated body that is not a push payload.
	ResultBadRequest = "bad_request"
	// ResultTooLarge: a body over Config.MaxBody.
	ResultTooLarge = "too_large"
	// ResultRateLimited: over Config.Rate and Config.Burst, of authenticated
	// requests or of those that failed authentication.
	ResultRateLimited = "rate_limited"
	// ResultMethodNotAllowed: not a POST.
	ResultMethodNotAllowed = "method_not_allowed"
	// ResultPing: GitHub's ping event, authenticated.
	ResultPing = "ping"
	// ResultReplay: an authenticated delivery already received (the same
	// delivery ID): a replay, answered without spending the forge's budget.
	ResultReplay = "replay"
	// ResultOwn: an authenticated push of rigger's own commits only
	// (Config.Own, Config.OwnMessage): answered 200 without a fetch and
	// without spending the forge's budget.
	ResultOwn = "own_commit"
)

// deliveryHeaders name a delivery's ID, by forge. A request with none (a
// generic hook script posts the same body for every push) cannot be told
// from a replay, and is taken as a delivery each time.
var deliveryHeaders = []string{"X-GitHub-Delivery", "X-Gitlab-Event-UUID", "X-Gitea-Delivery", "X-Forgejo-Delivery",
	"X-Rigger-Delivery"}

// rememberedDeliveries is how many delivery IDs the endpoint remembers
// (the oldest is forgotten first).
const rememberedDeliveries = 4096

// Config of the webhook endpoint.
type Config struct {
	// Secret shared with the forge; at least MinSecretLen bytes.
	Secret []byte
	// Branch followed: only pushes to refs/heads/<Branch> trigger. A
	// leading "refs/heads/" is accepted.
	Branch string
	// Trigger is called for an accepted push, on the request's goroutine;
	// it must not block (serve does a non-blocking send).
	Trigger func(Event)
	// MaxBody caps the body, in bytes (413 above); DefaultMaxBody when 0.
	MaxBody int64
	// Rate and Burst limit authenticated requests (429 with Retry-After
	// above), and, with a budget of their own, requests that fail
	// authentication, so that these cannot starve the forge's pushes;
	// DefaultRate and DefaultBurst when 0.
	Rate  rate.Limit
	Burst int
	// Own, when set, reports whether a commit id is one rigger itself
	// made (serve's status commits): a push whose new head is one is
	// answered ResultOwn.
	Own func(commit string) bool
	// OwnMessage, when set, reports whether a commit message is one of
	// rigger's (it carries the status trailer): a push whose payload
	// lists every pushed commit, each with such a message, is answered
	// ResultOwn.
	OwnMessage func(message string) bool
	// Observe, when not nil, is called once for each request to the
	// endpoint's path with the provider (a Provider* constant) and the
	// result (a Result* constant); for metrics.
	Observe func(provider, result string)
	// Log receives one line per request; nil discards them.
	Log *slog.Logger
	// Relay, when set, is called after Trigger for an accepted push that
	// was not relayed itself (no RelayedHeader), with the request's path,
	// headers and body: the replicas of serve pass it to the others, which
	// check its signature again (replicas.Set.Relay). It must not block.
	Relay func(path string, header http.Header, body []byte)
}

// RelayedHeader marks a webhook request that a replica of serve relayed
// to another (its value: the relaying replica); such a request is
// authenticated as any other, and never relayed again.
const RelayedHeader = "X-Rigger-Relayed-By"

// Event is an accepted push.
type Event struct {
	// Provider that sent it: a Provider* constant.
	Provider string
	// Ref pushed, such as "refs/heads/main"; empty when a generic request
	// did not say.
	Ref string
	// After is the new head commit when the payload gives one that looks
	// like a commit id (40 or 64 hex characters), else empty.
	After string
}

// Path is the path the endpoint for secret is served at: "/hooks/" and the
// first 32 hex characters of HMAC-SHA256(secret, "rigger webhook path").
// Knowing the path does not reveal the secret.
func Path(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("rigger webhook path"))
	return "/hooks/" + hex.EncodeToString(m.Sum(nil))[:32]
}

// Sign returns the signature of body for the generic provider's
// X-Rigger-Signature-256 header (and GitHub's X-Hub-Signature-256):
// "sha256=" and the hex HMAC-SHA256 of body with secret.
func Sign(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, body))
}

// mac is HMAC-SHA256(secret, body).
func mac(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// handler serves one endpoint. It is safe for concurrent use: its only
// mutable parts are the limiters and late, which are.
type handler struct {
	secret  []byte
	path    string
	ref     string // refs/heads/<branch>
	branch  string
	trigger func(Event)
	relay   func(path string, header http.Header, body []byte)
	maxBody int64
	// own and ownMessage tell rigger's own commits (Config.Own,
	// Config.OwnMessage); nil: none are told.
	own, ownMessage func(string) bool
	// limiter is the budget of authenticated requests; rejected that of
	// requests that fail authentication (or are too large to be).
	limiter, rejected *rate.Limiter
	observe           func(provider, result string)
	log               *slog.Logger
	seen              *deliveries
	// late is set while a fetch refused for the rate waits for its token
	// (limitedForge).
	late atomic.Bool
}

// deliveries are the IDs of the last deliveries received, a bounded set.
type deliveries struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string
	next int
}

func newDeliveries(n int) *deliveries {
	return &deliveries{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records id and says whether it was seen before.
func (d *deliveries) add(id string) (seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.ids[id]; ok {
		return true
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.ids, old)
	}
	d.ring[d.next] = id
	d.ids[id] = struct{}{}
	d.next = (d.next + 1) % len(d.ring)
	return false
}

// deliveryID is what tells a delivery from a replay of it: the forge's
// delivery ID; "" when it sends none.
func deliveryID(hdr http.Header) string {
	for _, h := range deliveryHeaders {
		if v := hdr.Get(h); v != "" {
			return h + ":" + v
		}
	}
	return ""
}

// New returns the handler of the endpoint described by cfg. It serves only
// Path(cfg.Secret) and answers 404 elsewhere; mount it with
// mux.Handle(Path(secret), h), without stripping the prefix.
func New(cfg Config) (http.Handler, error) {
	var errs []error
	if len(cfg.Secret) < MinSecretLen {
		errs = append(errs, fmt.Errorf("webhook secret is %d bytes: use at least %d random bytes (for example `openssl rand -hex 32`)", len(cfg.Secret), MinSecretLen))
	}
	branch := strings.TrimPrefix(cfg.Branch, "refs/heads/")
	if branch == "" {
		errs = append(errs, errors.New("webhook branch is empty: set the branch rigger follows"))
	}
	if cfg.Trigger == nil {
		errs = append(errs, errors.New("webhook trigger is nil: pass the function that requests a fetch"))
	}
	if cfg.MaxBody < 0 {
		errs = append(errs, fmt.Errorf("webhook body limit is %d: use a positive number of bytes, or 0 for %d", cfg.MaxBody, DefaultMaxBody))
	}
	if cfg.Rate < 0 || cfg.Burst < 0 {
		errs = append(errs, fmt.Errorf("webhook rate %v burst %d: use positive values, or 0 for %v a second and bursts of %d", cfg.Rate, cfg.Burst, DefaultRate, DefaultBurst))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("configure webhook: %w", err)
	}

	h := &handler{
		secret:  append([]byte(nil), cfg.Secret...),
		path:    Path(cfg.Secret),
		ref:     "refs/heads/" + branch,
		branch:  branch,
		trigger: cfg.Trigger,
		relay:   cfg.Relay,
		maxBody: cfg.MaxBody,
		own:     cfg.Own, ownMessage: cfg.OwnMessage,
		observe: cfg.Observe,
		log:     cfg.Log,
		seen:    newDeliveries(rememberedDeliveries),
	}
	if h.maxBody == 0 {
		h.maxBody = DefaultMaxBody
	}
	limit, burst := cfg.Rate, cfg.Burst
	if limit == 0 {
		limit = DefaultRate
	}
	if burst == 0 {
		burst = DefaultBurst
	}
	h.limiter, h.rejected = rate.NewLimiter(limit, burst), rate.NewLimiter(limit, burst)
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

// outcome is the answer to one request.
type outcome struct {
	code   int
	result string // a Result* constant
	msg    string // the response body: one short line, no secret, nothing of the request body
	reason string // for the log only; may name what the payload said, never the secret
	retry  int    // seconds, for Retry-After
	event  *Event // set when Trigger is to be called
	relay  []byte // the body, when Relay is to be called
}

// ServeHTTP answers a webhook request; see the package documentation.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The path is derived from the secret: compare it in constant time.
	if subtle.ConstantTimeCompare([]byte(r.URL.Path), []byte(h.path)) != 1 {
		http.NotFound(w, r)
		return
	}
	p := detect(r.Header)
	o := h.handle(w, r, p)
	if o.event != nil {
		h.trigger(*o.event)
	}
	if o.relay != nil && h.relay != nil && r.Header.Get(RelayedHeader) == "" {
		h.relay(r.URL.Path, r.Header.Clone(), o.relay)
	}

	level := slog.LevelInfo
	if o.code >= 400 {
		level = slog.LevelWarn
	}
	attrs := []any{"provider", p.name, "result", o.result, "status", o.code, "remote", r.RemoteAddr}
	if o.reason != "" {
		attrs = append(attrs, "reason", o.reason)
	}
	if o.event != nil {
		attrs = append(attrs, "ref", o.event.Ref, "after", o.event.After)
	}
	h.log.Log(r.Context(), level, "webhook request", attrs...)
	if h.observe != nil {
		h.observe(p.name, o.result)
	}

	switch o.code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodPost)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(o.retry))
	}
	http.Error(w, o.msg, o.code)
}

// handle decides the answer to a request to the endpoint's path, in the
// documented order: method, body size, authentication, replay, rigger's
// own commits, rate, event, branch. Authentication comes before the rate:
// a request that fails it spends the budget of such requests (h.rejected),
// never that of the forge's (h.limiter). A push of rigger's own commits
// spends neither: it is authenticated, and answered without a fetch.
func (h *handler) handle(w http.ResponseWriter, r *http.Request, p provider) outcome {
	if r.Method != http.MethodPost {
		return outcome{code: http.StatusMethodNotAllowed, result: ResultMethodNotAllowed,
			msg: "method not allowed: send a POST", reason: "method " + r.Method}
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return h.reject(outcome{code: http.StatusRequestEntityTooLarge, result: ResultTooLarge,
				msg: fmt.Sprintf("payload too large: the limit is %d bytes", h.maxBody)})
		}
		return h.reject(outcome{code: http.StatusBadRequest, result: ResultBadRequest,
			msg: "could not read the body", reason: err.Error()})
	}

	switch p.authenticate(r.Header, h.secret, body) {
	case authMissing:
		return h.reject(outcome{code: http.StatusUnauthorized, result: ResultUnauthorized,
			msg: "missing signature: " + p.missing, reason: "no signature header"})
	case authMismatch:
		return h.reject(outcome{code: http.StatusForbidden, result: ResultForbidden,
			msg: p.mismatch, reason: "signature does not match"})
	}
	// A captured delivery sent again is authenticated too: it spends the
	// budget of rejected requests, never the forge's.
	if id := deliveryID(r.Header); id != "" && h.seen.add(id) {
		return h.reject(outcome{code: http.StatusOK, result: ResultReplay,
			msg: "ignored: this delivery was received already", reason: "replayed delivery"})
	}
	kind := p.kind(r.Header)
	var push push
	if kind == eventPush {
		push, err = p.parse(body)
		if why := push.ownWhy(h.own, h.ownMessage); err == nil && why != "" {
			return outcome{code: http.StatusOK, result: ResultOwn,
				msg: "ignored: a push of rigger's own status commit (" + why + "); nothing to fetch", reason: why}
		}
	}
	if o, limited := h.limitedForge(p.name); limited {
		return o
	}

	switch kind {
	case eventPing:
		return outcome{code: http.StatusOK, result: ResultPing, msg: "pong"}
	case eventOther:
		return outcome{code: http.StatusAccepted, result: ResultIgnored,
			msg: "ignored: not a push event", reason: "event " + p.event(r.Header)}
	}

	if err != nil {
		return outcome{code: http.StatusBadRequest, result: ResultBadRequest,
			msg: "bad payload: send the push event as application/json", reason: err.Error()}
	}
	if why := push.ignored(h.ref, h.branch); why != "" {
		return outcome{code: http.StatusAccepted, result: ResultIgnored,
			msg: "ignored: " + why, reason: "ref " + strconv.Quote(push.ref)}
	}
	return outcome{code: http.StatusAccepted, result: ResultAccepted, msg: "fetch requested",
		event: &Event{Provider: p.name, Ref: push.ref, After: push.after}, relay: body}
}

// reject is o, the answer to a request that was not authenticated, or 429
// when such requests are over their budget.
func (h *handler) reject(o outcome) outcome {
	if tooMany, limited := limited(h.rejected); limited {
		tooMany.reason = o.reason
		return tooMany
	}
	return o
}

// limitedForge takes a token of the forge's budget, or returns the 429
// answer. Over the budget, unless a late fetch is pending already, it
// keeps the next token and calls Trigger when it comes (an Event with the
// provider only: the request was not read further): a push refused for
// the rate is fetched late, not lost (GitHub does not deliver again),
// however many were refused meanwhile, and never more often than the
// budget allows.
func (h *handler) limitedForge(provider string) (outcome, bool) {
	if !h.late.CompareAndSwap(false, true) {
		return limited(h.limiter)
	}
	res := h.limiter.Reserve()
	if !res.OK() {
		h.late.Store(false)
		return limited(h.limiter)
	}
	d := res.Delay()
	if d == 0 {
		h.late.Store(false)
		return outcome{}, false
	}
	time.AfterFunc(d, func() {
		h.late.Store(false)
		h.trigger(Event{Provider: provider})
	})
	retry := max(1, int(math.Ceil(d.Seconds())))
	return outcome{code: http.StatusTooManyRequests, result: ResultRateLimited,
		msg: "too many requests: retry after " + strconv.Itoa(retry) + "s (a fetch is made then)", retry: retry}, true
}

// limited takes a token from l, or returns the 429 answer, with how many
// seconds to wait for one.
func limited(l *rate.Limiter) (outcome, bool) {
	res := l.Reserve()
	retry := 1
	if res.OK() {
		d := res.Delay()
		if d == 0 {
			return outcome{}, false
		}
		res.Cancel()
		retry = max(1, int(math.Ceil(d.Seconds())))
	}
	return outcome{code: http.StatusTooManyRequests, result: ResultRateLimited,
		msg: "too many requests: retry after " + strconv.Itoa(retry) + "s", retry: retry}, true
}

// compile-time check that the handler is one.
var _ http.Handler = (*handler)(nil)
