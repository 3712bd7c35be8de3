package notify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	const secret = "T000/B000/XXXXsecret"
	for _, tc := range []struct {
		in, format, host, err string
	}{
		{"https://hooks.example.com/rigger", FormatJSON, "https://hooks.example.com", ""},
		{"json=https://hooks.example.com/x?token=" + secret, FormatJSON, "https://hooks.example.com", ""},
		{"slack=https://hooks.slack.com/services/" + secret, FormatSlack, "https://hooks.slack.com", ""},
		{"  slack=http://mattermost:8065/hooks/" + secret + "  ", FormatSlack, "http://mattermost:8065", ""},
		{"https://h.example/x?a=b=c", FormatJSON, "https://h.example", ""},
		{"teams=https://h.example/" + secret, "", "", `unknown notification format "teams"`},
		{"hooks.slack.com/services/" + secret, "", "", "not an http(s) URL"},
		{"ftp://h.example/" + secret, "", "", "not an http(s) URL"},
		{"slack=", "", "", "not an http(s) URL"},
		{"https:///" + secret, "", "", "not an http(s) URL"},
	} {
		got, err := ParseTarget(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTarget(%q) = %v, want the error %q", tc.in, err, tc.err)
			} else if strings.Contains(err.Error(), secret) {
				t.Errorf("ParseTarget's error shows the URL: %v", err)
			}
		case err != nil:
			t.Errorf("ParseTarget(%q): %v", tc.in, err)
		case got.Format != tc.format || got.Host != tc.host || got.URL != strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(tc.in), "json="), "slack=")):
			t.Errorf("ParseTarget(%q) = %+v", tc.in, got)
		}
	}
}

func TestReadTargets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notify")
	os.WriteFile(file, []byte("# the team's channels\n\nslack=https://hooks.slack.com/services/T/B/secret1\nhttps://alerts.example.com/rigger\n"), 0o600)
	got, err := ReadTargets(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Format != FormatSlack || got[1].Format != FormatJSON || got[1].URL != "https://alerts.example.com/rigger" {
		t.Fatalf("ReadTargets = %+v", got)
	}
	os.WriteFile(file, []byte("https://alerts.example.com/ok\n\nhooks.slack.com/services/T/B/secret2\n"), 0o600)
	_, err = ReadTargets(file)
	if err == nil || !strings.Contains(err.Error(), file+":3: not an http(s) URL") || strings.Contains(err.Error(), "secret2") {
		t.Fatalf("a bad line: %v, want the file and line 3, and no URL", err)
	}
	if _, err := ReadTargets(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--notify-file") {
		t.Fatalf("a missing file: %v", err)
	}
}
