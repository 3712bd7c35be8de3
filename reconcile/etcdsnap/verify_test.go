package etcdsnap

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

// maxVerifyErrorSize bounds the error of a verify parser: it ends up in
// status.yml and in logs, whatever the node printed.
const maxVerifyErrorSize = 1024

// TestVerifyOutputTooLarge: output larger than any etcdctl or sha256sum
// prints is refused before it is decoded, with a short error.
func TestVerifyOutputTooLarge(t *testing.T) {
	sum := strings.Repeat("0123456789abcdef", 4)
	huge := []byte(`{"hash":1,"revision":1,"totalKey":1,"totalSize":1,"x":"` + strings.Repeat("a", maxToolOutput) + `"}`)
	for name, parse := range map[string]func([]byte) error{
		"snapshot status": func(b []byte) error { _, err := ParseStatus(b); return err },
		"endpoint status": func(b []byte) error { _, err := ParseEndpointVersion(b); return err },
		"sha256sum":       func(b []byte) error { _, err := ParseSHA256Sum(b, "/f"); return err },
		"sha256sum, sum ok": func([]byte) error {
			_, err := ParseSHA256Sum([]byte(sum+"  /f\n"+strings.Repeat("x", maxToolOutput)), "/f")
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := parse(huge)
			if err == nil || !strings.Contains(err.Error(), "more than 64 KiB") || len(err.Error()) > maxVerifyErrorSize {
				t.Fatalf("got %.300v, want a short error that says the output is too large", err)
			}
		})
	}
}

// FuzzVerifyOutput feeds the parsers of what a snapshot's verification
// runs on a node (etcdctl snapshot status and endpoint status, sha256sum)
// whatever the node prints: what they accept describes a usable snapshot
// and reads back the same, and their errors stay short.
func FuzzVerifyOutput(f *testing.F) {
	const file = "/opt/rke/etcd-snapshots/rigger-prod-20261122T013000Z-node1"
	f.Add([]byte(`{"hash":2958329797,"revision":123,"totalKey":456,"totalSize":2068480}` + "\n"))
	f.Add([]byte(`[{"Endpoint":"https://10.231.4.11:2379","Status":{"header":{"cluster_id":1,"member_id":2,"revision":77,"raft_term":3},"version":"3.4.23","dbSize":1234,"leader":2,"raftIndex":90,"raftTerm":3}}]`))
	f.Add([]byte(strings.Repeat("0123456789abcdef", 4) + "  " + file + "\n"))
	f.Add([]byte(strings.Repeat("Z", 1000) + "  " + file + "\n"))
	f.Add([]byte("Error: snapshot file has no hash\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		var (
			st                        Status
			version, sum              string
			stErr, versionErr, sumErr error
		)
		fuzzcheck.Bounded(t, len(out), func() {
			st, stErr = ParseStatus(out)
			version, versionErr = ParseEndpointVersion(out)
			sum, sumErr = ParseSHA256Sum(out, file)
		})
		for _, err := range []error{stErr, versionErr, sumErr} {
			if err != nil && len(err.Error()) > maxVerifyErrorSize {
				t.Fatalf("an error of %d bytes: %.200s…", len(err.Error()), err)
			}
		}
		if stErr == nil {
			if st.TotalSize <= 0 || st.TotalKeys <= 0 || st.Revision <= 0 {
				t.Fatalf("accepted the status of an unusable snapshot: %+v", st)
			}
			b, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := ParseStatus(b); err != nil || again != st {
				t.Fatalf("status %+v reads back as %+v, %v", st, again, err)
			}
		}
		if versionErr == nil && version == "" {
			t.Fatal("accepted an empty version")
		}
		if sumErr == nil {
			if err := checkSHA256(sum); err != nil {
				t.Fatalf("accepted checksum %q: %v", sum, err)
			}
			if !strings.Contains(string(out), sum+"  "+file) {
				t.Fatalf("checksum %q is not the one printed for %s", sum, file)
			}
		}
	})
}
