package testnode

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and can go silent on the
// connections it carries, as a partitioned network does (no data, no
// reset, no FIN), or reset them, as a crashed peer or a NAT that forgot
// them does.
type Proxy struct {
	Addr string

	mu     sync.Mutex
	frozen map[*proxied]bool
	live   map[*proxied]bool
}

type proxied struct {
	client, server net.Conn
	silent         chan struct{} // closed when the connection goes silent
}

// StartProxy starts a proxy to target; it stops when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), frozen: map[*proxied]bool{}, live: map[*proxied]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.live {
			c.client.Close()
			c.server.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pc := &proxied{client: c, server: s, silent: make(chan struct{})}
			p.mu.Lock()
			p.live[pc] = true
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.copy(pc, s, c) }()
			go func() { defer wg.Done(); p.copy(pc, c, s) }()
		}
	}()
	return p
}

// Silence stops forwarding on every connection open now, without closing
// any. New connections are forwarded normally.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.live {
		if !p.frozen[c] {
			p.frozen[c] = true
			close(c.silent)
		}
	}
}

// Reset resets every connection open now, both ways: no FIN, no more
// data. New connections are forwarded normally.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.live {
		for _, conn := range []net.Conn{c.client, c.server} {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	}
}

func (p *Proxy) copy(pc *proxied, dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.live, pc)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-pc.silent:
			// Swallow everything until the connection is closed.
			for err == nil {
				_, err = src.Read(buf)
			}
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
