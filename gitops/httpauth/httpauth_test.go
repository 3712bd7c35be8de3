package httpauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/gitops/httpauth"
)

// guarded is a listener's mux as serve builds it: the page guarded, the
// probe not.
func guarded(g *httpauth.Guard) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.Handle("/", g.Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "page "+r.URL.RequestURI())
	})))
	return mux
}

func get(t *testing.T, c *http.Client, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOpenByDefault(t *testing.T) {
	for _, g := range []*httpauth.Guard{nil, httpauth.New("", false)} {
		srv := httptest.NewServer(guarded(g))
		if code, body := get(t, srv.Client(), srv.URL+"/"); code != 200 || body != "page /" {
			t.Errorf("no token, no client CA: %d %q, want the page", code, body)
		}
		srv.Close()
	}
}

// TestToken: a bearer token in the header, or the cookie that /?token=
// sets, opens the page; a wrong or missing one does not, and the probe
// needs none.
func TestToken(t *testing.T) {
	const token = "s3cret-token"
	srv := httptest.NewServer(guarded(httpauth.New(token, false)))
	defer srv.Close()
	c := srv.Client()

	for name, tc := range map[string]struct {
		path   string
		header []string
		want   int
	}{
		"no token":             {"/", nil, http.StatusUnauthorized},
		"wrong bearer":         {"/", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		"right bearer":         {"/events", []string{"Authorization", "Bearer " + token}, http.StatusOK},
		"bearer in lower case": {"/", []string{"Authorization", "bearer " + token}, http.StatusOK},
		"basic is not it":      {"/", []string{"Authorization", "Basic " + token}, http.StatusUnauthorized},
		"forged cookie":        {"/", []string{"Cookie", httpauth.CookieName + "=" + token}, http.StatusUnauthorized},
		"wrong query token":    {"/?token=nope", nil, http.StatusUnauthorized},
		"probe":                {"/healthz", nil, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			code, body := get(t, c, srv.URL+tc.path, tc.header...)
			if code != tc.want {
				t.Errorf("GET %s: %d %q, want %d", tc.path, code, body, tc.want)
			}
			if strings.Contains(body, token) {
				t.Errorf("the answer shows the token: %q", body)
			}
		})
	}

	// A browser: /?token= once, then the cookie alone.
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar, Transport: c.Transport}
	resp, err := browser.Get(srv.URL + "/?token=" + token + "&x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == httpauth.CookieName {
			cookie = ck
		}
	}
	switch {
	case resp.StatusCode != http.StatusOK || cookie == nil:
		t.Fatalf("/?token=: %d, cookie %v", resp.StatusCode, cookie)
	case !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/":
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/", cookie)
	case strings.Contains(cookie.Value, token) || strings.Contains(string(body), token):
		t.Errorf("the cookie or the page holds the token: %v %q", cookie, body)
	case !strings.Contains(string(body), `url=/?x=1"`):
		t.Errorf("the page does not move on to the address without the token: %q", body)
	}
	if code, body := get(t, browser, srv.URL+"/events"); code != 200 || body != "page /events" {
		t.Errorf("with the cookie: %d %q, want the page", code, body)
	}

	// A new token: the cookie of the old one opens nothing.
	srv2 := httptest.NewServer(guarded(httpauth.New("another", false)))
	defer srv2.Close()
	if code, _ := get(t, srv2.Client(), srv2.URL+"/", "Cookie", httpauth.CookieName+"="+cookie.Value); code != http.StatusUnauthorized {
		t.Errorf("the cookie of an old token: %d, want 401", code)
	}
}

// TestSignInStaysOnHost: /?token= never sends the browser elsewhere.
func TestSignInStaysOnHost(t *testing.T) {
	h := httpauth.New("t", false).Protect(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/?token=t", nil)
	req.URL.Path = "//evil.example/x"
	h.ServeHTTP(rec, req)
	if b := rec.Body.String(); !strings.Contains(b, `url=/evil.example/x"`) {
		t.Errorf("sign-in page %q: want a path on this host", b)
	}
}

// pki is a CA that signs server and client certificates.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &pki{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue is a certificate for a server (127.0.0.1) or a client, as PEM.
func (ca *pki) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func write(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClientCertificate: over TLS with --client-ca-file, the page needs a
// certificate signed by that CA; the probe needs none.
func TestClientCertificate(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "other CA")
	sc, sk := serverCA.issue(t, "serve", true)
	cfg, err := httpauth.ServerTLS(write(t, dir, "tls.crt", sc), write(t, dir, "tls.key", sk), write(t, dir, "ca.crt", clientCA.pem))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(guarded(httpauth.New("", true)))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()

	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	client := func(ca *pki) *http.Client {
		tc := &tls.Config{RootCAs: roots}
		if ca != nil {
			c, k := ca.issue(t, "reader", false)
			pair, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	if code, body := get(t, client(clientCA), srv.URL+"/"); code != 200 || body != "page /" {
		t.Errorf("a client certificate of the CA: %d %q, want the page", code, body)
	}
	if code, _ := get(t, client(nil), srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("no client certificate: %d, want 401", code)
	}
	if code, _ := get(t, client(nil), srv.URL+"/healthz"); code != 200 {
		t.Errorf("the probe without a client certificate: %d, want 200", code)
	}
	// A certificate of another CA is not sent (the server names its CA),
	// or fails the handshake.
	if resp, err := client(otherCA).Get(srv.URL + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a client certificate of another CA: %d, want 401", resp.StatusCode)
		}
	}

	// Plain HTTP to a guard that asks for a certificate: refused.
	plain := httptest.NewServer(guarded(httpauth.New("", true)))
	defer plain.Close()
	if code, _ := get(t, plain.Client(), plain.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("no TLS: %d, want 401", code)
	}
}

func TestServerTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	c, k := ca.issue(t, "serve", true)
	cert, key := write(t, dir, "c", c), write(t, dir, "k", k)
	for name, tc := range map[string]struct {
		cert, key, ca, want string
	}{
		"key missing":  {cert, "", "", "give both"},
		"no such file": {filepath.Join(dir, "none"), key, "", "--tls-cert-file"},
		"CA not PEM":   {cert, key, write(t, dir, "bad", []byte("not a certificate")), "holds no PEM certificate"},
		"CA file gone": {cert, key, filepath.Join(dir, "gone"), "--client-ca-file"},
	} {
		if _, err := httpauth.ServerTLS(tc.cert, tc.key, tc.ca); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}
