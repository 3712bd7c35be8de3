package agenttun

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/libp2p/go-yamux/v5"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

// FuzzJoinRequest feeds the server's join what a token holder may send as
// its body: no panic, no certificate for a node the token is not for, and
// an answer that is either a certificate or a refusal.
func FuzzJoinRequest(f *testing.F) {
	store, err := OpenStore("", time.Now())
	if err != nil {
		f.Fatal(err)
	}
	srv, err := NewServer(Config{Cluster: "c1", Store: store, Nodes: []Node{{Name: "n1", DockerSocket: "/var/run/docker.sock"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	f.Add([]byte(`{"node":"n1","csr":"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n","hostname":"h"}`))
	f.Add([]byte(`{"node":"n2","csr":"","hostname":"h"}`))
	f.Add([]byte(`{"node":"n1","hostname":"\u001b[2K"}`))
	f.Add([]byte(`{"node":`))
	f.Add([]byte(`[]`))
	// One call first, so that what the first call initialises once
	// (JSON's type caches, the mux's patterns) is not counted against an
	// input.
	warm := httptest.NewRequest(http.MethodPost, PathJoin, bytes.NewReader([]byte(`{"node":"n1"}`)))
	warm.Header.Set("Authorization", "Bearer rgt_x")
	srv.ServeHTTP(httptest.NewRecorder(), warm)
	f.Fuzz(func(t *testing.T, body []byte) {
		tok, err := store.IssueToken("c1", "n1", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, PathJoin, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		fuzzcheck.Bounded(t, len(body), func() { srv.ServeHTTP(rec, req) })
		switch rec.Code {
		case http.StatusOK:
			cert, err := parseCertPEM([]byte(mustJoinResponse(t, rec.Body.Bytes()).Cert))
			if err != nil || cert.Subject.CommonName != "n1" {
				t.Fatalf("a join answered 200 with %v, %v; want n1's certificate", cert, err)
			}
			store.revoke("c1", "n1") // the next input joins afresh
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict:
		default:
			t.Fatalf("join answered %d: %s", rec.Code, rec.Body)
		}
		store.useToken(tok) // unused tokens would pile up in the in-memory store
		if p := srv.Pending(); len(p) > maxPending {
			t.Fatalf("%d pending agents", len(p))
		}
	})
}

func mustJoinResponse(t *testing.T, b []byte) joinResponse {
	t.Helper()
	var jr joinResponse
	if err := json.Unmarshal(b, &jr); err != nil {
		t.Fatalf("join's answer: %v", err)
	}
	return jr
}

// FuzzTunnelFrames feeds a tunnel's multiplexer, configured as the
// server's, the bytes an agent may send: no panic, and the session ends
// or stays within its budgets (no stream is accepted from an agent).
func FuzzTunnelFrames(f *testing.F) {
	f.Add(yamuxPing(1))
	f.Add(append(yamuxPing(1), yamuxPing(2)...))
	f.Add([]byte{0, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0})                                     // SYN of stream 2
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 4, 'a', 'b', 'c', 'd'})                 // data on an unknown stream
	f.Add([]byte{0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})                                     // go away
	f.Add([]byte{0, 1, 0, 1, 0, 0, 0, 2, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}) // huge window
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		defer b.Close()
		cfg := muxConfig(time.Hour, serverIncomingStreams, slog.New(slog.DiscardHandler))
		cfg.ConnectionWriteTimeout = time.Second
		sess, err := yamux.Client(a, cfg, newWindowBudget(tunnelWindowBudget))
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		go func() { // the agent reads what the server answers
			buf := make([]byte, 4096)
			for {
				if _, err := b.Read(buf); err != nil {
					return
				}
			}
		}()
		b.SetWriteDeadline(time.Now().Add(2 * time.Second))
		b.Write(in)
		if n := sess.NumStreams(); n > 0 {
			t.Fatalf("the server's session holds %d streams an agent opened", n)
		}
	})
}
