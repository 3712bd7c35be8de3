package secretsenc

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

// FuzzParse feeds Parse what a controlplane node's encryption.yaml, or
// RKE's encryptionConfig, may hold: no panic, work bounded by the input's
// size, and what parses is written back (Marshal) to a file that parses to
// the same configuration.
func FuzzParse(f *testing.F) {
	c, err := New()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.Marshal())
	c.IdentityFirst = true
	f.Add(c.Marshal())
	f.Add([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: a, secret: AAAAAAAAAAAAAAAAAAAAAA==}]}\n  - identity: {}\n"))
	f.Add([]byte("a: &a [*a, *a]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got *Config
		var err error
		fuzzcheck.Bounded(t, len(b), func() { got, err = Parse("encryption.yaml", b) })
		if err != nil {
			return
		}
		again, err := Parse("encryption.yaml", got.Marshal())
		if err != nil {
			t.Fatalf("what parsed does not parse once written back: %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("written back and read again (-first +again):\n%s", diff)
		}
	})
}
