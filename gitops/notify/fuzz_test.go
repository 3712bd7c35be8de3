package notify

import (
	"net/url"
	"testing"
	"time"
)

// FuzzParseTarget: any --notify value parses or is refused, and a parsed
// one's Host (what logs show of it) is its URL's scheme and host, without
// the user part, path or query, which may hold a token.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"https://h/x", "slack=https://hooks.slack.com/services/T/B/x", "json=", "a=b=c", "http://[::1]:80/x?y=z", "https://u:p@h/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		u, perr := url.Parse(tg.URL)
		if perr != nil || tg.Host != u.Scheme+"://"+u.Host || (tg.Format != FormatJSON && tg.Format != FormatSlack) {
			t.Fatalf("ParseTarget(%q) = %+v", s, tg)
		}
	})
}

// FuzzRetryAfter: a server's Retry-After never makes a negative wait.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "-1", "Wed, 02 Dec 2026 16:01:00 GMT", "99999999999999999999", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if d := retryAfter(s, now); d < 0 {
			t.Fatalf("retryAfter(%q) = %v", s, d)
		}
	})
}
