// Package httpauth guards what rigger serve's HTTP listener shows (the
// status page, its events, the metrics): open by default, as they only
// read, and when asked, a bearer token, a client certificate, or both.
// The probes and the webhook (which has its own HMAC) are not guarded:
// their handlers are simply not wrapped.
package httpauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"strings"
	"time"
)

// CookieName is the cookie a browser gets for the token: an EventSource
// cannot send an Authorization header.
const CookieName = "rigger_session"

// TokenParam is the query parameter a browser opens the page with once,
// /?token=…, to get the cookie.
const TokenParam = "token"

// cookieLifetime is how long the cookie is kept; a new token makes every
// cookie invalid at once (the cookie is derived from the token).
const cookieLifetime = 30 * 24 * time.Hour

// Guard checks the requests of the guarded handlers. The zero Guard, and
// nil, let every request through.
type Guard struct {
	// token is the bearer token's hash, cookie the cookie's value's:
	// both compared in constant time, of equal length.
	token, cookie []byte
	// cookieValue is what the cookie holds: an HMAC of the token, not the
	// token.
	cookieValue string
	clientCert  bool
}

// New is a Guard that asks for token when it is not "" (in an
// Authorization: Bearer header, or the cookie that /?token= sets) and
// for a client certificate that the listener's TLS configuration verified
// when clientCert is set (ServerTLS with a client CA).
func New(token string, clientCert bool) *Guard {
	g := &Guard{clientCert: clientCert}
	if token != "" {
		mac := hmac.New(sha256.New, []byte(token))
		mac.Write([]byte("rigger serve status page session"))
		g.cookieValue = hex.EncodeToString(mac.Sum(nil))
		g.token, g.cookie = hash(token), hash(g.cookieValue)
	}
	return g
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// equal compares s with want, a hash, in constant time.
func equal(s string, want []byte) bool {
	return subtle.ConstantTimeCompare(hash(s), want) == 1
}

// Asks says what g asks for: a token, a client certificate.
func (g *Guard) Asks() (token, clientCert bool) {
	if g == nil {
		return false, false
	}
	return g.token != nil, g.clientCert
}

// Open says whether g lets every request through.
func (g *Guard) Open() bool { return g == nil || (g.token == nil && !g.clientCert) }

// Protect wraps next: a request without what g asks for is answered 401,
// saying what to send.
func (g *Guard) Protect(next http.Handler) http.Handler {
	if g.Open() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.clientCert && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			http.Error(w, "this page needs a client certificate signed by serve's --client-ca-file", http.StatusUnauthorized)
			return
		}
		if g.token == nil {
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query(); q.Has(TokenParam) {
			g.signIn(w, r, q.Get(TokenParam))
			return
		}
		if auth, ok := bearer(r.Header.Get("Authorization")); ok && equal(auth, g.token) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(CookieName); err == nil && equal(c.Value, g.cookie) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="rigger serve"`)
		http.Error(w, "this page needs serve's token (--http-token-file or $RIGGER_HTTP_TOKEN): send \"Authorization: Bearer <token>\", or open /?"+TokenParam+"=<token> once in a browser", http.StatusUnauthorized)
	})
}

// bearer is the token of an Authorization header of the scheme Bearer
// (any case, RFC 9110).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// signedIn sends the browser on to the page it asked for, without the
// token in its address. It is a page that moves on by itself, not a 30x:
// a browser withholds a SameSite=Strict cookie from a redirect that a link
// on another site started, and the page would then refuse it.
var signedIn = template.Must(template.New("signed-in").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url={{.}}">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>rigger</title></head>
<body><p>Signed in. <a href="{{.}}">Go on to the page</a>.</p></body></html>
`))

// signIn checks the token of /?token=: when it is right, the browser gets
// the cookie (HttpOnly, SameSite=Strict, Secure over TLS) and is sent on.
func (g *Guard) signIn(w http.ResponseWriter, r *http.Request, token string) {
	if !equal(token, g.token) {
		http.Error(w, "wrong token: give the one in serve's --http-token-file or $RIGGER_HTTP_TOKEN", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: g.cookieValue, Path: "/", MaxAge: int(cookieLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	q := r.URL.Query()
	q.Del(TokenParam)
	// A path only (this host): never an open redirect.
	to := "/" + strings.TrimLeft(r.URL.Path, "/")
	if len(q) > 0 {
		to += "?" + q.Encode()
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	_ = signedIn.Execute(w, to)
}

// ServerTLS is the TLS configuration of a listener serving certFile and
// keyFile; with clientCAFile, it verifies the client certificates that
// clients send against the CAs in it, and asks none of them for one (the
// probes and the webhook send none: Guard decides per handler).
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together: give both")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load --tls-cert-file %s and --tls-key-file %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("read --client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--client-ca-file %s holds no PEM certificate: give the CA that signs the clients' certificates", clientCAFile)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	return cfg, nil
}
