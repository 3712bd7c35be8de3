package notify

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Payload shapes of a webhook Target.
const (
	// FormatJSON is the generic JSON payload (the Event).
	FormatJSON = "json"
	// FormatSlack is Slack's incoming-webhook payload (text and blocks).
	FormatSlack = "slack"
)

// Target is a webhook notifications are sent to. Its URL is a secret: it
// is shown as Host only.
type Target struct {
	Format string
	URL    string
	// Host is the URL's scheme and host, which logs and errors show.
	Host string
}

// ParseTarget reads "[json=|slack=]URL": the URL of a webhook, preceded
// by the payload's format (json when none). The URL must be http(s); it
// never appears in an error, as it may hold a token.
func ParseTarget(s string) (Target, error) {
	s = strings.TrimSpace(s)
	t := Target{Format: FormatJSON, URL: s}
	for _, f := range []string{FormatJSON, FormatSlack} {
		if rest, ok := strings.CutPrefix(s, f+"="); ok {
			t.Format, t.URL = f, rest
		}
	}
	if prefix, _, ok := strings.Cut(t.URL, "="); ok && !strings.Contains(prefix, "/") && !strings.Contains(prefix, ":") {
		return Target{}, fmt.Errorf("unknown notification format %q: give json=URL, slack=URL or the URL alone (json)", prefix)
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Target{}, errors.New("not an http(s) URL (not shown: it may hold a token): give [json=|slack=]https://host/path")
	}
	t.Host = u.Scheme + "://" + u.Host
	return t, nil
}

// maxTargetsFile bounds the file of webhooks read.
const maxTargetsFile = 1 << 20

// ReadTargets reads a file of webhooks, one "[json=|slack=]URL" a line
// (blank lines and lines starting with # are skipped), such as a mounted
// Kubernetes Secret. Errors name the file and line, never the URL.
func ReadTargets(file string) ([]Target, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read --notify-file: %w", err)
	}
	if len(b) > maxTargetsFile {
		return nil, fmt.Errorf("--notify-file %s is %d bytes: over %d, it is not a list of webhooks", file, len(b), maxTargetsFile)
	}
	var out []Target
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxTargetsFile)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		t, err := ParseTarget(s)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read --notify-file %s: %w", file, err)
	}
	return out, nil
}
