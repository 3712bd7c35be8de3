package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rigger/rigger/transport/agenttun"
)

// TestListenersCloseIdleConnections: a connection to the agent endpoint
// or the webhook listener that sends nothing (no TLS handshake, no
// request) or nothing more (after a request) is closed by serve within
// its deadlines, not held for ever.
func TestListenersCloseIdleConnections(t *testing.T) {
	store, err := agenttun.OpenStore("", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := store.CA().TLSConfig([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	agentLn := listen(t)
	webhookLn := listen(t)
	ahs := agenttun.NewHTTPServer(ok, tlsConfig)
	hs := newServeHTTPServer(ok)
	go ahs.ServeTLS(agentLn, "", "")
	go hs.Serve(webhookLn)
	t.Cleanup(func() { ahs.Close(); hs.Close() })

	type probe struct {
		name  string
		conn  func() net.Conn
		bound time.Duration
	}
	silentTCP := func(addr string) func() net.Conn {
		return func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	afterRequest := func(addr string, secure bool) func() net.Conn {
		return func() net.Conn {
			var c net.Conn
			var err error
			if secure {
				c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads nothing secret
			} else {
				c, err = net.Dial("tcp", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			return c
		}
	}
	probes := []probe{
		{"agent endpoint, no TLS handshake", silentTCP(agentLn.Addr().String()), agenttun.HandshakeTimeout},
		{"agent endpoint, idle after a request", afterRequest(agentLn.Addr().String(), true), agenttun.IdleTimeout},
		{"webhook, no request", silentTCP(webhookLn.Addr().String()), listenHeaderTimeout},
		{"webhook, idle after a request", afterRequest(webhookLn.Addr().String(), false), listenIdleTimeout},
	}
	errs := make(chan error, len(probes))
	for _, p := range probes {
		c := p.conn()
		go func() {
			defer c.Close()
			start := time.Now()
			c.SetReadDeadline(start.Add(p.bound + 5*time.Second))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				errs <- fmt.Errorf("%s: still open after %s", p.name, time.Since(start).Round(time.Second))
				return
			}
			errs <- nil
		}()
	}
	for range probes {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
