package plan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/fuzzcheck"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/spec"
)

// apiServerSpec is the spec label rigger sets on a kube-apiserver of
// baseYML, changed by change.
func apiServerSpec(t testing.TB, change func(*spec.Cluster)) string {
	t.Helper()
	for _, c := range build(t, baseYML, change).Nodes[0].Containers {
		if c.Name == desired.KubeAPIServer {
			return c.SpecJSON()
		}
	}
	t.Fatal("no kube-apiserver on the first node")
	return ""
}

func TestSpecReasonLabelTooLarge(t *testing.T) {
	want := apiServerSpec(t, nil)
	huge := `{"image":"` + strings.Repeat("a", maxSpecLabelSize) + `"}`
	got := specReason(huge, want)
	if !strings.Contains(got, "larger than") || len(got) > 200 {
		t.Errorf("specReason of a %d-byte label = %.200q, want a short reason that says it is too large", len(huge), got)
	}
}

// FuzzSpecReason feeds specReason what a node may hold in a container's
// io.rigger.spec label (anyone with access to the node's Docker socket can
// set it): no panic, work and a reason in proportion to the label, and a
// label that is the desired spec itself names no change.
func FuzzSpecReason(f *testing.F) {
	want := apiServerSpec(f, nil)
	f.Add(want)
	f.Add(apiServerSpec(f, func(c *spec.Cluster) {
		c.Services.KubeAPI.ExtraArgs = map[string]string{"v": "4", "oidc-token": "tok"}
		c.Services.KubeAPI.ExtraEnv = []string{"HTTPS_PROXY=http://proxy:3128", "AWS_SECRET_ACCESS_KEY=s3cr3t"}
		c.Services.KubeAPI.ExtraBinds = []string{"/var/log/audit:/var/log/audit"}
	}))
	f.Add(`{"v":"rigger.io/spec-hash/v0","args":[1,{"a":[]},null,true]}`)
	f.Add(`{"args":"not a list","env":{"A":"B"}}`)
	f.Add(`[]`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, label string) {
		var reason string
		fuzzcheck.Bounded(t, len(label)+len(want), func() { reason = specReason(label, want) })
		if reason == "" {
			t.Fatalf("specReason(%q) gave no reason", label)
		}
		if limit := 8*(len(label)+len(want)) + 4096; len(reason) > limit {
			t.Fatalf("a %d-byte label gave a %d-byte reason", len(label), len(reason))
		}
		if label == want && reason != reasonHashDiffers {
			t.Fatalf("the desired spec itself gave %q", reason)
		}
	})
}

// TestReadSavedRefuses: a file that is not a saved plan is refused before
// anything is compared.
func TestReadSavedRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not json", "steps: []", "invalid character"},
		{"two values", `{"steps":[]} {}`, "invalid character"},
		{"too large", `{"steps":[` + strings.Repeat(" ", maxSavedSize) + `]}`, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSaved(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// FuzzReadSaved feeds ReadSaved what a --plan file may hold: no panic,
// work in proportion to the file, and a plan that reads survives being
// written and read again (Diff sees no difference).
func FuzzReadSaved(f *testing.F) {
	d := build(f, baseYML, func(c *spec.Cluster) { c.Services.Kubelet.Image = "k:new" })
	p := Compute(d, asApplied(build(f, baseYML, nil)))
	saved, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(saved)
	f.Add([]byte(`{"steps":[{"node":"10.0.0.5","component":"etcd","action":"remove_member","phase":"etcd","reason":"r",` +
		`"member":{"id":1,"name":"etcd-10.0.0.5","peer_urls":["https://10.0.0.5:2380"]}}],` +
		`"unreachable":[{"node":"10.0.0.9","error":"dial tcp: timeout"}],"removed_nodes":["10.0.0.5"],` +
		`"observed_at":"2026-11-22T00:00:00Z","first":["10.0.0.1"],"new_etcd":true}`))
	f.Add([]byte(`{"steps":null,"observed_at":"not a time"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p *Plan
		var err error
		fuzzcheck.Bounded(t, len(b), func() { p, err = ReadSaved(bytes.NewReader(b)) })
		if err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("a plan read back does not encode: %v", err)
		}
		p2, err := ReadSaved(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("a plan written again does not read: %v\n%s", err, again)
		}
		if diff := Diff(p, p2); diff != "" || !p.ObservedAt.Equal(p2.ObservedAt) {
			t.Fatalf("a plan written again differs (observed at %v, %v):\n%s", p.ObservedAt, p2.ObservedAt, diff)
		}
	})
}
