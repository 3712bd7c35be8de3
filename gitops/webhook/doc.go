// Package webhook is the HTTP endpoint through which a git forge tells
// `rigger serve` that the repository it follows has changed. A webhook only
// asks rigger to fetch now: what is applied always comes from git itself, so
// a forged or replayed request can at worst cause an early fetch.
//
// The endpoint's path is derived from the shared secret (see [Path]), so the
// URL to give the forge is
//
//	https://rigger.example/hooks/<id>
//
// where <id> is the first 32 hex characters of HMAC-SHA256(secret,
// "rigger webhook path"). Every other path answers 404, and every method but
// POST 405. Forges must send their payload as application/json (a
// form-encoded payload answers 400). Use a secret of at least 16 random
// bytes, for example the output of `openssl rand -hex 32`.
//
// GitHub: Settings → Webhooks → Add webhook. Payload URL: the URL above;
// Content type: application/json; Secret: the secret; events: "Just the push
// event". GitHub signs the body in X-Hub-Signature-256. Its ping event, sent
// when the webhook is created, answers 200 "pong".
//
// GitLab: Settings → Webhooks → Add new webhook. URL: the URL above; Secret
// token: the secret; Trigger: Push events (a branch filter for the followed
// branch saves requests). GitLab sends the token as it is in X-Gitlab-Token,
// so use HTTPS.
//
// Gitea and Forgejo: Settings → Webhooks → Add webhook → Gitea (or
// Forgejo). Target URL: the URL above; HTTP method: POST; POST content type:
// application/json; Secret: the secret; Trigger on: Push events. They sign
// the body in X-Gitea-Signature or X-Forgejo-Signature.
//
// Anything else (a CI job, a script) uses the generic form: a POST whose
// X-Rigger-Signature-256 header is "sha256=" followed by the hex HMAC-SHA256
// of the body (see [Sign]). The body may be empty, or JSON naming the ref:
//
//	body='{"ref":"refs/heads/main"}'
//	sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$SECRET" | awk '{print $NF}')
//	curl -X POST -H 'Content-Type: application/json' \
//	     -H "X-Rigger-Signature-256: sha256=$sig" -d "$body" https://rigger.example/hooks/<id>
//
// Only pushes to the followed branch trigger a fetch; pushes to other
// branches, tags and deletions answer 202 "ignored: ...". A push of
// rigger's own commits only (its new head is one Config.Own knows, or the
// payload lists every pushed commit and Config.OwnMessage knows each
// message) answers 200 "ignored: a push of rigger's own status commit",
// once authenticated and before the rate limit: it costs no fetch and none
// of the forge's budget. Requests are authenticated first, then rate
// limited (default 1 request a second,
// bursts of 10); an authenticated request over the rate gets 429, and one
// Trigger comes once the rate allows, for all those refused meanwhile, so
// that no push is lost (forges do not deliver again). Those that fail
// authentication have a budget of their own, and get 429 over it, so that
// no one without the secret can use up the forge's.
package webhook
