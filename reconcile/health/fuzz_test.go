package health

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

func TestParseEtcdHealth(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"healthy", `{"health":"true","reason":""}`, ""},
		{"healthy, etcd 3.4", `{"health":"true"}`, ""},
		{"no leader", `{"health":"false","reason":"RAFT NO LEADER"}`, `etcd reports health "false": RAFT NO LEADER`},
		{"not json", `<html>`, "etcd /health: invalid character"},
		{"too large", `{"health":"true","reason":"` + strings.Repeat("x", maxEtcdHealthSize) + `"}`, "etcd /health: answered more than 64 KiB"},
		{"long reason", `{"health":"false","reason":"` + strings.Repeat("x", 10000) + `"}`, `etcd reports health "false": xxxxx`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseEtcdHealth([]byte(tc.body))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want healthy", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %.300v, want an error that starts %q", err, tc.want)
			}
			if len(err.Error()) > maxHealthErrorSize {
				t.Errorf("error of %d bytes, want at most %d", len(err.Error()), maxHealthErrorSize)
			}
		})
	}
}

// FuzzParseEtcdHealth feeds parseEtcdHealth what a node's port 2379 may
// answer: healthy exactly when etcd says "true", and an error short enough
// for a status file whatever the answer.
func FuzzParseEtcdHealth(f *testing.F) {
	f.Add([]byte(`{"health":"true","reason":""}`))
	f.Add([]byte(`{"health":"false","reason":"RAFT NO LEADER"}`))
	f.Add([]byte(`{"health":"true","reason":"","extra":[1,2,{"a":null}]}`))
	f.Add([]byte(`{"health":true}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var err error
		fuzzcheck.Bounded(t, len(body), func() { err = parseEtcdHealth(body) })
		var h struct {
			Health string `json:"health"`
		}
		healthy := len(body) <= maxEtcdHealthSize && json.Unmarshal(body, &h) == nil && h.Health == "true"
		if (err == nil) != healthy {
			t.Fatalf("parseEtcdHealth(%q) = %v, want healthy %v", body, err, healthy)
		}
		if err != nil && len(err.Error()) > maxHealthErrorSize {
			t.Fatalf("an error of %d bytes", len(err.Error()))
		}
	})
}
