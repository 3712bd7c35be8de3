package etcdsnap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/spec"
)

var at = time.Date(2026, 11, 22, 1, 30, 0, 0, time.UTC)

// TestName: the names rigger gives are RKE's, with the ':' of the time
// stamp made '-' by safe_timestamp.
func TestName(t *testing.T) {
	tests := []struct {
		name string
		kind string
		t    time.Time
		safe bool
		want string
	}{
		{name: "scheduled, as RKE's etcd-rolling-snapshots", kind: KindScheduled, t: at, want: "2026-11-22T01:30:00Z_etcd"},
		{name: "scheduled, safe_timestamp", kind: KindScheduled, t: at, safe: true, want: "2026-11-22T01-30-00Z_etcd"},
		{name: "manual, as rke etcd snapshot-save without --name", kind: KindManual, t: at, want: "rke_etcd_snapshot_2026-11-22T01:30:00Z"},
		{name: "manual, safe_timestamp", kind: KindManual, t: at, safe: true, want: "rke_etcd_snapshot_2026-11-22T01-30-00Z"},
		{name: "before a change", kind: KindBeforeChange, t: at, want: "rke_etcd_snapshot_2026-11-22T01:30:00Z"},
		{name: "local time is UTC in the name", kind: KindScheduled, t: at.In(time.FixedZone("CET", 3600)), want: "2026-11-22T01:30:00Z_etcd"},
		{name: "no fraction of a second", kind: KindScheduled, t: at.Add(999 * time.Millisecond), want: "2026-11-22T01:30:00Z_etcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Name(tt.kind, tt.t, tt.safe)
			if got != tt.want {
				t.Fatalf("Name = %q, want %q", got, tt.want)
			}
			if err := CheckName(got); err != nil {
				t.Fatalf("rigger's own name is refused: %v", err)
			}
			p, ok := ParseName(got)
			if !ok || !p.Time.Equal(tt.t.Truncate(time.Second)) || p.Scheduled != (tt.kind == KindScheduled) {
				t.Fatalf("ParseName(%q) = %+v, %v", got, p, ok)
			}
		})
	}
}

// TestParseName: the time of the names rigger gives, of those RKE (and
// Rancher, which drives RKE) gives with and without safe_timestamp, and of
// those earlier rigger releases gave; nothing of a name a user chose.
func TestParseName(t *testing.T) {
	plus1 := at.In(time.FixedZone("", 3600))
	minus5 := at.In(time.FixedZone("", -5*3600))
	tests := []struct {
		in   string
		want ParsedName
		ok   bool
	}{
		{in: "2026-11-22T01:30:00Z_etcd", want: ParsedName{at, true}, ok: true},
		{in: "2026-11-22T01:30:00Z_etcd.zip", want: ParsedName{at, true}, ok: true},
		{in: "2026-11-22T01-30-00Z_etcd", want: ParsedName{at, true}, ok: true},
		{in: "2026-11-22T01-30-00Z_etcd.zip", want: ParsedName{at, true}, ok: true},
		{in: "rke_etcd_snapshot_2026-11-22T01:30:00Z", want: ParsedName{at, false}, ok: true},
		{in: "rke_etcd_snapshot_2026-11-22T02:30:00+01:00.zip", want: ParsedName{plus1, false}, ok: true},
		{in: "rke_etcd_snapshot_2026-11-22T02-30-00+01-00.zip", want: ParsedName{plus1, false}, ok: true},
		{in: "rke_etcd_snapshot_2026-11-21T20-30-00-05-00", want: ParsedName{minus5, false}, ok: true},
		{in: "rke_etcd_snapshot_2026-11-22T01-30-00.5Z", want: ParsedName{at.Add(500 * time.Millisecond), false}, ok: true},
		// Rancher's names: <cluster>-<r|m><l|s>-<random>_<stamp>.zip.
		{in: "c-h5jxq-rl-7tcp2_2026-11-22T01:30:00Z.zip", want: ParsedName{at, false}, ok: true},
		{in: "c-h5jxq-rs-7tcp2_2026-11-22T01-30-00Z.zip", want: ParsedName{at, false}, ok: true},
		// Earlier rigger releases.
		{in: "rigger-prod-20261122T013000Z-node1", want: ParsedName{at, false}, ok: true},
		{in: "rigger-x-20200101T000000Z-y-20261122T013000Z-node1", want: ParsedName{at, false}, ok: true},
		{in: "rigger-prod-20261322T013000Z-node1"}, // month 13
		{in: "rigger--20261122T013000Z-node1"},
		{in: "rigger-prod-20261122T013000Z-"},
		{in: "before-upgrade"},
		{in: "before_upgrade"},
		{in: "_etcd"},
		{in: "2026-11-22T01:30:00Z_etcd.json"},
		{in: "2026-11-22T25:30:00Z_etcd"},
		{in: "2026-11-22T01-30:00Z_etcd"}, // half safe
		{in: "2026-11-22_etcd"},
		{in: "etcd-snapshot-2026-11-22T01:30:00Z_etcd"},
	}
	for _, tt := range tests {
		got, ok := ParseName(tt.in)
		if ok != tt.ok || ok && (!got.Time.Equal(tt.want.Time) || got.Scheduled != tt.want.Scheduled) {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, bad := range []string{"", "../x", "a/b", ".hidden", "-flag", ":x", "x.json", "x.part", "a b", "ü", strings.Repeat("a", MaxNameLength+1)} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
	for _, good := range []string{"before-upgrade", "a", "snap_1.db", "rigger-prod-20261122T013000Z-node1",
		"2026-11-22T01:30:00Z_etcd.zip", "rke_etcd_snapshot_2026-11-22T02:30:00+01:00"} {
		if err := CheckName(good); err != nil {
			t.Errorf("CheckName(%q): %v", good, err)
		}
	}
}

// FuzzParseName: a name that parses is a valid name, and the name rigger
// would give its time parses to that time, to the second.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"2026-11-22T01:30:00Z_etcd.zip", "2026-11-22T01-30-00Z_etcd", "rke_etcd_snapshot_2026-11-21T20-30-00-05-00",
		"c-h5jxq-rl-7tcp2_2026-11-22T01:30:00Z.zip", "rigger-prod-20261122T013000Z-node1", "before", "_etcd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParseName(s)
		if !ok {
			return
		}
		if CheckName(s) != nil {
			t.Fatalf("ParseName accepted %q, which CheckName refuses", s)
		}
		if y := p.Time.UTC().Year(); y < 0 || y > 9999 {
			return // RFC 3339 has 4 digits of year: an offset can move a time out
		}
		for _, safe := range []bool{false, true} {
			name := Name(KindScheduled, p.Time, safe)
			q, ok := ParseName(name)
			if want := p.Time.Truncate(time.Second); !ok || !q.Time.Equal(want) || !q.Scheduled {
				t.Fatalf("ParseName(%q) = %+v, %v; want %s, scheduled (the name of %q's time)", name, q, ok, want, s)
			}
		}
	})
}

func validSidecar() *Sidecar {
	return &Sidecar{
		Format: SidecarFormat, Name: "rigger-prod-20261122T013000Z-node1", Kind: KindManual,
		Node: "10.0.0.1", Hostname: "node1", TakenAt: at, Size: 2 << 20,
		SHA256:   strings.Repeat("ab", 32),
		Revision: 1234, Hash: 42, TotalKeys: 900, EtcdVersion: "3.5.16", EtcdImage: "rancher/mirrored-coreos-etcd:v3.5.16",
		PKIFingerprint: strings.Repeat("0f", 32),
		Cluster: ClusterState{ClusterName: "prod", KubernetesVersion: "v1.31.4", Nodes: []NodeState{
			{Address: "10.0.0.1", Hostname: "node1", Roles: []string{"etcd", "controlplane", "worker"}},
		}},
	}
}

func TestSidecarRoundTrip(t *testing.T) {
	sc := validSidecar()
	b, err := sc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSidecar(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sc, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestParseSidecarRefuses(t *testing.T) {
	good, _ := validSidecar().Marshal()
	tests := []struct {
		name, in, want string
	}{
		{name: "not json", in: "nope", want: "decode sidecar"},
		{name: "unknown field", in: strings.Replace(string(good), `"format"`, `"secret_key": "x", "format"`, 1), want: "unknown field"},
		{name: "two objects", in: string(good) + "{}", want: "data after"},
		{name: "newer format", in: strings.Replace(string(good), `"format": 1`, `"format": 2`, 1), want: "format 2"},
		{name: "bad checksum", in: strings.Replace(string(good), strings.Repeat("ab", 32), "ABAB", 1), want: "sha256"},
		{name: "empty", in: strings.Replace(string(good), `"size": 2097152`, `"size": 0`, 1), want: "never empty"},
		{name: "path in name", in: strings.Replace(string(good), `"name": "rigger-prod-20261122T013000Z-node1"`, `"name": "../../etc/passwd"`, 1), want: "snapshot name"},
		{name: "huge", in: strings.Repeat(" ", MaxSidecarSize+1), want: "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSidecar([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// FuzzParseSidecar: whatever a node or a bucket holds, a sidecar that
// parses is valid and survives a round trip.
func FuzzParseSidecar(f *testing.F) {
	good, _ := validSidecar().Marshal()
	f.Add(good)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ParseSidecar(b)
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed an invalid sidecar: %v", err)
		}
		again, err := sc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		sc2, err := ParseSidecar(again)
		if err != nil || !cmp.Equal(sc, sc2) {
			t.Fatalf("round trip: %v\n%s", err, cmp.Diff(sc, sc2))
		}
	})
}

func TestParseStatus(t *testing.T) {
	st, err := ParseStatus([]byte(`{"hash":2958329797,"revision":123,"totalKey":456,"totalSize":2068480}` + "\n"))
	if err != nil || st != (Status{Hash: 2958329797, Revision: 123, TotalKeys: 456, TotalSize: 2068480}) {
		t.Fatalf("%+v %v", st, err)
	}
	for _, bad := range []string{`{"hash":1,"revision":1,"totalKey":0,"totalSize":10}`, `{"hash":1,"revision":0,"totalKey":3,"totalSize":10}`,
		`{"hash":1,"revision":1,"totalKey":3,"totalSize":0}`, `Error: snapshot file has no hash`} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("ParseStatus(%s) accepted it", bad)
		}
	}
}

func TestParseEndpointVersion(t *testing.T) {
	out := `[{"Endpoint":"https://10.231.4.11:2379","Status":{"header":{"cluster_id":1,"member_id":2,"revision":77,"raft_term":3},"version":"3.4.23","dbSize":1234,"leader":2,"raftIndex":90,"raftTerm":3}}]`
	v, err := ParseEndpointVersion([]byte(out))
	if err != nil || v != "3.4.23" {
		t.Fatalf("%q %v", v, err)
	}
	if _, err := ParseEndpointVersion([]byte(`[]`)); err == nil {
		t.Error("no endpoint accepted")
	}
}

func TestParseSHA256Sum(t *testing.T) {
	sum := strings.Repeat("0123456789abcdef", 4)
	got, err := ParseSHA256Sum([]byte(sum+"  /opt/rke/etcd-snapshots/x\n"), "/opt/rke/etcd-snapshots/x")
	if err != nil || got != sum {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := ParseSHA256Sum([]byte(sum+"  /other\n"), "/opt/rke/etcd-snapshots/x"); err == nil {
		t.Error("the checksum of another file was taken")
	}
	if _, err := ParseSHA256Sum([]byte("xyz  /f\n"), "/f"); err == nil {
		t.Error("a checksum that is not hex was taken")
	}
}

func TestRetry(t *testing.T) {
	r := Retry{Attempts: 4, First: time.Millisecond, Max: 3 * time.Millisecond}
	calls := 0
	err := r.do(context.Background(), func() error {
		calls++
		if calls < 4 {
			return &S3Error{Temporary: true, msg: "slow down"}
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Errorf("err %v, %d calls", err, calls)
	}

	calls = 0
	err = r.do(context.Background(), func() error { calls++; return &S3Error{Code: "AccessDenied", msg: "denied"} })
	if calls != 1 || err == nil {
		t.Errorf("a permanent error was retried: %d calls, %v", calls, err)
	}

	calls = 0
	err = r.do(context.Background(), func() error { calls++; return errors.New("connection refused") })
	if calls != 4 || err == nil || !strings.Contains(err.Error(), "gave up after 4") {
		t.Errorf("network errors: %d calls, %v", calls, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	err = Retry{Attempts: 5, First: time.Hour}.do(ctx, func() error { calls++; return errors.New("down") })
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled retry: %d calls, %v", calls, err)
	}
}

func TestNewS3(t *testing.T) {
	base := spec.S3BackupConfig{Endpoint: "s3.example.com", BucketName: "b", Folder: "/a/b/", AccessKey: "AKIAEXAMPLE", SecretKey: "very-secret"}
	s, err := NewS3(&base)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Where("snap"); got != "s3://b/a/b/snap" {
		t.Errorf("Where = %s", got)
	}
	if !strings.HasPrefix(s.cl.EndpointURL().String(), "https://") {
		t.Errorf("endpoint %s: TLS is always used", s.cl.EndpointURL())
	}
	for name, change := range map[string]func(*spec.S3BackupConfig){
		"scheme":    func(c *spec.S3BackupConfig) { c.Endpoint = "http://127.0.0.1:9000" },
		"no bucket": func(c *spec.S3BackupConfig) { c.BucketName = "" },
		"bad ca":    func(c *spec.S3BackupConfig) { c.CustomCA = "not a pem" },
	} {
		c := base
		change(&c)
		if _, err := NewS3(&c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestS3ErrorsHideCredentials(t *testing.T) {
	s, err := NewS3(&spec.S3BackupConfig{Endpoint: "s3.example.com", BucketName: "b", AccessKey: "AKIAEXAMPLE", SecretKey: "very-secret"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.wrap("upload", "k", errors.New("server said: key AKIAEXAMPLE with secret very-secret is wrong"))
	if strings.Contains(err.Error(), "AKIAEXAMPLE") || strings.Contains(err.Error(), "very-secret") {
		t.Errorf("credentials in %q", err)
	}
}
