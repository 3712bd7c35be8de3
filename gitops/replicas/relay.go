package replicas

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/rigger/rigger/gitops/webhook"
)

// RelayTimeout bounds each request of Relay.
const RelayTimeout = 10 * time.Second

// hopHeaders are not copied to a relayed request (RFC 9110 7.6.1, and
// what the client sets itself).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding",
	"Upgrade", "Host", "Content-Length", "Accept-Encoding", "X-Forwarded-For"}

// Relay posts an accepted webhook request (its path, headers and body) to
// every other live replica that has an address, in the background, marked
// with the relaying replica's id: the replica holding a cluster that the
// push changed fetches at once, whichever replica the forge reached. Each
// checks the signature again, as for a request from the forge; none relays
// it further. client sends the requests (nil: http.DefaultClient). ctx
// bounds the background requests (serve's).
func (s *Set) Relay(ctx context.Context, client *http.Client, path string, header http.Header, body []byte) {
	if client == nil {
		client = http.DefaultClient
	}
	for _, m := range s.Members() {
		if m.ID == s.cfg.ID || m.Address == "" {
			continue
		}
		go func() {
			rctx, cancel := context.WithTimeout(ctx, RelayTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(rctx, http.MethodPost, m.Address+path, bytes.NewReader(body))
			if err != nil {
				s.cfg.Log.Warn("relay the webhook to a replica", "to", m.ID, "err", err)
				return
			}
			for k, v := range header {
				req.Header[k] = v
			}
			for _, k := range hopHeaders {
				req.Header.Del(k)
			}
			req.Header.Set(webhook.RelayedHeader, s.cfg.ID)
			resp, err := client.Do(req)
			if err != nil {
				s.cfg.Log.Warn("relay the webhook to a replica; it fetches at its next poll", "to", m.ID, "address", m.Address, "err", err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				s.cfg.Log.Warn("webhook relayed and refused; the replica fetches at its next poll", "to", m.ID, "status", resp.StatusCode)
				return
			}
			s.cfg.Log.Debug("webhook relayed", "to", m.ID, "status", resp.StatusCode)
		}()
	}
}
