package statedir_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rigger/rigger/internal/fuzzcheck"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// TestReadJSONTooLarge: a state file larger than any rigger writes is
// damaged, and is not read whole.
func TestReadJSONTooLarge(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: no disk space, yet a read would take 16 GiB.
	if err := f.Truncate(16 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var nodes []spec.Node
	err = statedir.ReadJSON(dir, "nodes.json", &nodes)
	var damaged *statedir.DamagedError
	if !errors.As(err, &damaged) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("got %v, want a *DamagedError that says the file is too large", err)
	}
}

// FuzzReadJSON feeds ReadJSON what a state file may hold (nodes.json,
// restores.json): no panic, work in proportion to the file, and what it
// reads is written and read back the same.
func FuzzReadJSON(f *testing.F) {
	dir := f.TempDir()
	f.Add([]byte(`[{"address":"10.0.0.1","port":"22","internal_address":"192.168.0.1","role":["etcd","controlplane","worker"],` +
		`"hostname_override":"n1","user":"rancher","docker_socket":"/var/run/docker.sock","ssh_key_path":"~/.ssh/id_rsa",` +
		`"labels":{"a":"b"},"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]}]`))
	f.Add([]byte(`[{"id":"r1","snapshot_name":"rigger-prod-20261122T013000Z-node1","started_at":"2026-11-22T01:30:00Z",` +
		`"finished_at":"2026-11-22T01:31:00+01:00","error":"etcd not healthy"}]`))
	f.Add([]byte(`[{"labels":{},"role":null,"started_at":"0001-01-01T00:00:00Z"}]`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, "in.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		roundTrip(t, dir, len(b), new([]spec.Node), new([]spec.Node))
		roundTrip(t, dir, len(b), new([]etcdsnap.RestoreRecord), new([]etcdsnap.RestoreRecord))
	})
}

// roundTrip reads in.json into v; when it reads, writes v to out.json
// and reads that into again, which must equal v.
func roundTrip[T any](t *testing.T, dir string, size int, v, again *T) {
	t.Helper()
	var err error
	fuzzcheck.Bounded(t, size, func() { err = statedir.ReadJSON(dir, "in.json", v) })
	if err != nil {
		var damaged *statedir.DamagedError
		if !errors.As(err, &damaged) {
			t.Fatalf("a file that reads is not damaged but %v", err)
		}
		return
	}
	// As WriteJSON encodes, without its fsyncs, which would make the
	// fuzzer crawl.
	b, err := json.MarshalIndent(*v, "", "  ")
	if err != nil {
		t.Fatalf("what was read does not encode: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "out.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := statedir.ReadJSON(dir, "out.json", again); err != nil {
		t.Fatalf("what was written does not read: %v", err)
	}
	if diff := cmp.Diff(*v, *again, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("written and read again, it differs (-first +again):\n%s", diff)
	}
}
