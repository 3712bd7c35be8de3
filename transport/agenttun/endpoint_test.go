package agenttun

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// shortDeadlines serves ts's server on a second listener whose request
// deadline is 3 s, and returns its address.
func shortDeadlines(t *testing.T, ts *testServer) string {
	t.Helper()
	tlsConfig, err := ts.srv.store.CA().TLSConfig([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(ts.srv)
	hs.Config = newHTTPServer(ts.srv, tlsConfig, 10*time.Second, 3*time.Second)
	hs.TLS = tlsConfig
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return hs.Listener.Addr().String()
}

// TestSlowClientsClosed: connections that send their request a byte at a
// time, without a token (a join's body, a body nobody asked for with the
// CA's fetch), are answered without waiting for the body and closed
// within the endpoint's deadlines, however many; and the endpoint speaks
// HTTP/1.1 only, whatever a client offers.
func TestSlowClientsClosed(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	addr := shortDeadlines(t, ts)
	const clients = 300
	requests := []string{
		"POST " + PathJoin + "?node=n1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rgt_" + strings.Repeat("x", 43) + "\r\nContent-Length: 100000\r\n\r\n",
		"GET " + PathCACerts + "?node=n1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
	}
	start := time.Now()
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- slowClient(addr, requests[i%len(requests)])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
			break
		}
	}
	// The request deadline, 3 s, on a busy machine.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("%d slow clients held their connections for %s", clients, took.Round(time.Second))
	}
}

// slowClient sends request's headers, then its body a byte every 100 ms,
// and checks that the answer comes at once and the server closes the
// connection within a few seconds.
func slowClient(addr, request string) error {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // nothing secret is read
	if err != nil {
		return err
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		return fmt.Errorf("the endpoint negotiated %q, want http/1.1", p)
	}
	if _, err := io.WriteString(c, request); err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("%q: no answer before the body: %w", request[:20], err)
	}
	io.Copy(io.Discard, resp.Body)
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("the connection was still open 15 s after its answer")
	}
	return nil
}

// TestUnprovenStepsMarked: anyone can fetch the CA, or try a join with a
// made-up token, in a declared node's name; the node's journal keeps one
// such step, marked unproven wherever it is shown, and the node's own
// steps stay.
func TestUnprovenStepsMarked(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	ra := runAgent(t, ts.agentConfig(t, "n1", n))
	testwait.For(t, 30*time.Second, "the agent connected", func() bool { return ts.connected("n1") })
	ra.stop()
	testwait.For(t, 30*time.Second, "the server saw the tunnel end", func() bool { return !ts.connected("n1") })

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // nothing secret is read
	defer hc.CloseIdleConnections()
	for range 20 {
		for _, req := range []*http.Request{
			must(http.NewRequest(http.MethodGet, ts.URL+PathCACerts+"?node=n1", nil)),
			must(http.NewRequest(http.MethodPost, ts.URL+PathJoin+"?node=n1", strings.NewReader(`{"node":"n1"}`))),
		} {
			req.Header.Set("Authorization", "Bearer rgt_made-up")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	nc := notConnected(t, ts)
	var proven, unproven []string
	for _, j := range nc.Journal {
		if j.Unproven {
			unproven = append(unproven, j.Step)
		} else {
			proven = append(proven, j.Step)
		}
	}
	if got := strings.Join(proven, ", "); got != "certificate issued, tunnel up, tunnel lost" {
		t.Errorf("the node's own steps: %s", got)
	}
	if len(unproven) != 1 || unproven[0] != StepJoinRefused {
		t.Errorf("unproven steps kept: %v, want the newest alone", unproven)
	}
	msg := nc.Error()
	if !strings.Contains(msg, "join refused "+unprovenText) || !strings.Contains(nc.Next, "proved nothing") {
		t.Errorf("the unproven step is not marked so: %s", msg)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestRefusedTokensLoggedSampled: 2,000 joins with made-up tokens make a
// few log lines that count them, not 2,000.
func TestRefusedTokensLoggedSampled(t *testing.T) {
	ts := startServer(t, Node{Name: "n1", DockerSocket: "/var/run/docker.sock"})
	ts.srv.refusals = newSampledLog(ts.srv.log, 300*time.Millisecond, ts.srv.refusals.msg)
	// Each refusal closes its connection: the sessions are resumed.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, //nolint:gosec // nothing secret is read
		ClientSessionCache: tls.NewLRUClientSessionCache(16)}}}
	defer hc.CloseIdleConnections()
	const tries = 2000
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < tries; i += 8 {
				req := must(http.NewRequest(http.MethodPost, ts.URL+PathJoin+"?node=n1", strings.NewReader(`{}`)))
				req.Header.Set("Authorization", fmt.Sprintf("Bearer rgt_%043d", i))
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	count := regexp.MustCompile(`agent joins refused.* count=(\d+)`)
	testwait.For(t, 10*time.Second, "every refusal counted in the log", func() error {
		sum, lines := 0, 0
		for _, m := range count.FindAllStringSubmatch(ts.logs.String(), -1) {
			c, _ := strconv.Atoi(m[1])
			sum += c
			lines++
		}
		if sum != tries {
			return fmt.Errorf("%d refusals counted in %d lines", sum, lines)
		}
		if max := int(took/(300*time.Millisecond)) + 3; lines > max {
			t.Fatalf("%d lines for %d refusals in %s, want at most %d", lines, tries, took, max)
		}
		return nil
	})
	if lines := strings.Count(ts.logs.String(), "refused"); lines > int(took/(300*time.Millisecond))+3 {
		t.Errorf("%d log lines about refusals", lines)
	}
}
