package etcdsnap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/spec"
)

func TestRestoreCommand(t *testing.T) {
	c := &spec.Cluster{ClusterName: "prod", Nodes: []spec.Node{
		{Address: "10.0.0.1", InternalAddress: "192.168.0.1", HostnameOverride: "a", Role: []string{spec.RoleEtcd, spec.RoleControlPlane}},
		{Address: "10.0.0.2", HostnameOverride: "b", Role: []string{spec.RoleWorker}},
		{Address: "10.0.0.3", HostnameOverride: "c", Role: []string{spec.RoleEtcd}},
	}}
	spec.SetDefaults(c)
	d, err := desired.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	members := restoreMembers(etcdNodes(d))
	want := []RestoreMember{
		{Node: "10.0.0.1", Name: "etcd-a", PeerURL: "https://192.168.0.1:2380"},
		{Node: "10.0.0.3", Name: "etcd-c", PeerURL: "https://10.0.0.3:2380"},
	}
	if diff := cmp.Diff(want, members); diff != "" {
		t.Fatalf("members (-want +got):\n%s", diff)
	}
	if got := initialCluster(members); got != "etcd-a=https://192.168.0.1:2380,etcd-c=https://10.0.0.3:2380" {
		t.Errorf("initial cluster %q", got)
	}
	got := restoreCommand("rancher/mirrored-coreos-etcd:v3.5.16", "/opt/rke/etcd-snapshots/s1", members[1], members, "/var/lib/rancher/etcd/rigger-restore")
	wantCmd := []string{"etcdctl", "snapshot", "restore", "/opt/rke/etcd-snapshots/s1",
		"--name", "etcd-c",
		"--initial-cluster", "etcd-a=https://192.168.0.1:2380,etcd-c=https://10.0.0.3:2380",
		"--initial-cluster-token", desired.EtcdClusterToken,
		"--initial-advertise-peer-urls", "https://10.0.0.3:2380",
		"--data-dir", "/var/lib/rancher/etcd/rigger-restore",
		"--bump-revision", restoreBump, "--mark-compacted"}
	if diff := cmp.Diff(wantCmd, got); diff != "" {
		t.Errorf("restore command (-want +got):\n%s", diff)
	}
	// etcd before 3.5.10 has no --bump-revision.
	for image, bump := range map[string]bool{"rancher/mirrored-coreos-etcd:v3.5.9": false, "rancher/mirrored-coreos-etcd:v3.4.27": false,
		"etcd:v3.5.10": true, "etcd:v3.6.16": true, "registry.k8s.io/etcd:3.5.21-0": true, "etcd:latest": true, "etcd": true} {
		if got := slices.Contains(restoreCommand(image, "f", members[1], members, "d"), "--bump-revision"); got != bump {
			t.Errorf("restore with %s: --bump-revision %v, want %v", image, got, bump)
		}
	}
	// The member names and peer URLs are those the etcd containers run with.
	for _, m := range etcdNodes(d) {
		args := strings.Join(m.etcd.Args, " ")
		name := desired.EtcdMemberName(m.node.Hostname)
		if !strings.Contains(args, "--name="+name) || !strings.Contains(args, "--initial-advertise-peer-urls="+desired.EtcdPeerURL(m.node.InternalAddress)) {
			t.Errorf("%s: etcd args %s do not match the restored member %s", m.node.Address, args, name)
		}
		host, in, err := etcdDataBind(m.etcd)
		if err != nil || host != desired.EtcdHostDataDir || in != "/var/lib/rancher/etcd" {
			t.Errorf("%s: data bind %q %q %v", m.node.Address, host, in, err)
		}
	}
}

func TestDecideRestore(t *testing.T) {
	const name, ca = "snap1", "ca-sum"
	sc := &Sidecar{Name: name, Size: 100, SHA256: "good", PKIFingerprint: ca}
	ok := func(node string) nodeCopy {
		return nodeCopy{Node: node, Present: true, Size: 100, SHA256: "good", Sidecar: sc}
	}
	missing := func(node string) nodeCopy { return nodeCopy{Node: node} }
	otherCA := *sc
	otherCA.PKIFingerprint = "other-ca"
	otherSum := *sc
	otherSum.SHA256 = "other"
	// rke is a copy without a sidecar, as RKE leaves them: each node's
	// differs (its own member's); hashOK and hashBad after etcd's
	// integrity hash was checked.
	rke := func(node string) nodeCopy {
		return nodeCopy{Node: node, Present: true, Size: 544, SHA256: "sum-" + node}
	}
	hashOK := func(c nodeCopy) nodeCopy { c.HashChecked = true; return c }
	// zipped is a node with only RKE's zip file; unzippedOK after it
	// was unzipped here and passed etcd's integrity hash.
	zipped := func(node string) nodeCopy { return nodeCopy{Node: node, Zipped: true} }
	unz := &unzipped{File: "/tmp/rigger-restore-snap1-1", Size: 544, SHA256: "unzipped-n2"}
	unzippedOK := func(c nodeCopy) nodeCopy {
		c.HashChecked, c.Unzipped, c.Size, c.SHA256 = true, unz, unz.Size, unz.SHA256
		return c
	}
	hashBad := func(c nodeCopy) nodeCopy {
		c.HashChecked, c.HashErr = true, errors.New("etcd's integrity hash at its end is 00…, its data has sha256 11…")
		return c
	}

	tests := []struct {
		name     string
		copies   []nodeCopy
		s3       *s3Copy
		haveS3   bool
		fromNode string
		want     *restoreDecision
		err      string // a part of the error; "" for none
	}{
		{
			name:   "verified everywhere",
			copies: []nodeCopy{ok("n1"), ok("n2"), ok("n3")},
			want:   &restoreDecision{Sidecar: sc, Verified: []string{"n1", "n2", "n3"}, Fetch: map[string]string{}},
		},
		{
			name:   "missing copy fetched from the first verified node",
			copies: []nodeCopy{missing("n1"), ok("n2"), ok("n3")},
			want:   &restoreDecision{Sidecar: sc, Verified: []string{"n2", "n3"}, Fetch: map[string]string{"n1": "n2"}},
		},
		{
			name:   "unreachable node refused",
			copies: []nodeCopy{ok("n1"), {Node: "n2", Err: errors.New("connection refused")}},
			err:    "every etcd node to answer: node n2: connection refused",
		},
		{
			name:   "damaged copy refused, not replaced",
			copies: []nodeCopy{ok("n1"), {Node: "n2", Present: true, Size: 100, SHA256: "bad", Sidecar: sc}, ok("n3")},
			err:    "node n2: the copy of snap1 is 100 bytes with sha256 bad, its sidecar says 100 bytes, sha256 good: it is damaged",
		},
		{
			name:   "truncated copy refused",
			copies: []nodeCopy{ok("n1"), {Node: "n2", Present: true, Size: 50, SHA256: "short"}},
			err:    "node n2: the copy of snap1 is 50 bytes",
		},
		{
			name:   "another cluster's CA refused",
			copies: []nodeCopy{{Node: "n1", Present: true, Size: 100, SHA256: "good", Sidecar: &otherCA}},
			err:    "CA certificate has sha256 other-ca, and this cluster's CA has sha256 ca-sum",
		},
		{
			name:   "sidecars that disagree refused",
			copies: []nodeCopy{ok("n1"), {Node: "n2", Present: true, Size: 100, SHA256: "other", Sidecar: &otherSum}},
			err:    "the sidecars of snap1 on node n2 and node n1 differ",
		},
		{
			name:   "unreadable sidecar refused",
			copies: []nodeCopy{ok("n1"), {Node: "n2", Present: true, Size: 100, SHA256: "good", SidecarErr: errors.New("bad json")}},
			err:    "node n2: the sidecar of snap1: bad json",
		},
		{
			name:   "no sidecar: the first node's copy is checked first",
			copies: []nodeCopy{missing("n1"), rke("n2"), rke("n3")},
			want:   &restoreDecision{CheckHash: "n2"},
		},
		{
			name:   "no sidecar: the first copy, sent beside every other node's own",
			copies: []nodeCopy{missing("n1"), hashOK(rke("n2")), rke("n3")},
			want: &restoreDecision{Source: "n2", Size: 544, SHA256: "sum-n2", Verified: []string{"n2"},
				Fetch: map[string]string{"n1": "n2", "n3": "n2"}},
		},
		{
			name:     "no sidecar, from-node: that node's copy",
			copies:   []nodeCopy{hashOK(rke("n1")), rke("n2"), hashOK(rke("n3"))},
			fromNode: "n3",
			want: &restoreDecision{Source: "n3", Size: 544, SHA256: "sum-n3", Verified: []string{"n3"},
				Fetch: map[string]string{"n1": "n3", "n2": "n3"}},
		},
		{
			name:     "no sidecar, from-node not checked yet",
			copies:   []nodeCopy{hashOK(rke("n1")), rke("n2")},
			fromNode: "n2",
			want:     &restoreDecision{CheckHash: "n2"},
		},
		{
			name:     "no sidecar, from-node without a copy",
			copies:   []nodeCopy{rke("n1"), missing("n2"), rke("n3")},
			fromNode: "n2",
			err:      "--from-node n2 has no copy of snap1 (/opt/rke/etcd-snapshots/snap1, nor snap1.zip); the etcd nodes with one: n1, n3",
		},
		{
			name:     "from-node that is no etcd node",
			copies:   []nodeCopy{rke("n1"), rke("n2")},
			fromNode: "n9",
			err:      "--from-node n9 is not an etcd node of cluster.yml (its etcd nodes: n1, n2)",
		},
		{
			name:   "no sidecar, a bad hash: refused, naming the node, the file and --from-node",
			copies: []nodeCopy{hashBad(rke("n1")), rke("n2"), missing("n3")},
			err:    "node n1: /opt/rke/etcd-snapshots/snap1 is damaged: etcd's integrity hash at its end is 00…, its data has sha256 11…; restore another node's copy with --from-node (the etcd nodes with one: n2)",
		},
		{
			name:   "no sidecar, the only copy has a bad hash",
			copies: []nodeCopy{hashBad(rke("n1")), missing("n2")},
			err:    "is damaged: etcd's integrity hash at its end is 00…, its data has sha256 11…; no other etcd node has a copy",
		},
		{
			name:   "no sidecar on the nodes: s3 is asked for one first",
			copies: []nodeCopy{rke("n1")},
			haveS3: true,
			want:   &restoreDecision{NeedS3: true},
		},
		{
			name:   "no sidecar on the nodes nor in s3",
			copies: []nodeCopy{hashOK(rke("n1")), missing("n2")},
			s3:     &s3Copy{Where: "s3://b/snap1"}, haveS3: true,
			want: &restoreDecision{Source: "n1", Size: 544, SHA256: "sum-n1", Verified: []string{"n1"}, Fetch: map[string]string{"n2": "n1"}},
		},
		{
			name:   "no sidecar, only in s3",
			copies: []nodeCopy{missing("n1")},
			s3:     &s3Copy{Where: "s3://b/snap1", Present: true, Size: 544}, haveS3: true,
			err: "snapshot snap1 is only in s3://b/snap1, without a sidecar",
		},
		{
			name:     "from-node with a sidecar refused",
			copies:   []nodeCopy{ok("n1"), ok("n2")},
			fromNode: "n2",
			err:      "--from-node is for a snapshot rigger did not take: snap1 has a sidecar (from node n1)",
		},
		{
			name:   "only RKE's zip file: unzipped first",
			copies: []nodeCopy{missing("n1"), zipped("n2")},
			want:   &restoreDecision{CheckHash: "n2"},
		},
		{
			name:   "only RKE's zip file, unzipped: sent to every node, its own too",
			copies: []nodeCopy{missing("n1"), unzippedOK(zipped("n2"))},
			want:   &restoreDecision{Source: "n2", Size: 544, SHA256: "unzipped-n2", Unzipped: unz, Fetch: map[string]string{"n1": "n2", "n2": "n2"}},
		},
		{
			name:     "a file before a zip file in cluster.yml order",
			copies:   []nodeCopy{zipped("n1"), hashOK(rke("n2"))},
			fromNode: "n2",
			want:     &restoreDecision{Source: "n2", Size: 544, SHA256: "sum-n2", Verified: []string{"n2"}, Fetch: map[string]string{"n1": "n2"}},
		},
		{
			name:   "a zip file that is refused names it",
			copies: []nodeCopy{hashBad(zipped("n1")), zipped("n2")},
			err:    "node n1: /opt/rke/etcd-snapshots/snap1.zip is damaged: etcd's integrity hash at its end is 00…, its data has sha256 11…; restore another node's copy with --from-node (the etcd nodes with one: n2)",
		},
		{
			name:     "from-node with neither the file nor its zip",
			copies:   []nodeCopy{zipped("n1"), missing("n2")},
			fromNode: "n2",
			err:      "--from-node n2 has no copy of snap1 (/opt/rke/etcd-snapshots/snap1, nor snap1.zip); the etcd nodes with one: n1",
		},
		{
			name:   "found nowhere",
			copies: []nodeCopy{missing("n1"), missing("n2")},
			err:    "no snapshot named snap1 on the etcd nodes (",
		},
		{
			name:   "found nowhere: s3 is asked first",
			copies: []nodeCopy{missing("n1"), missing("n2")},
			haveS3: true,
			want:   &restoreDecision{NeedS3: true},
		},
		{
			name:   "found nowhere, not in s3 either",
			copies: []nodeCopy{missing("n1"), missing("n2")},
			s3:     &s3Copy{Where: "s3://b/snap1"}, haveS3: true,
			err: "no snapshot named snap1 on the etcd nodes or in s3",
		},
		{
			name:   "only in s3: fetched from there everywhere",
			copies: []nodeCopy{missing("n1"), missing("n2")},
			s3:     &s3Copy{Where: "s3://b/snap1", Present: true, Size: 100, Sidecar: sc}, haveS3: true,
			want: &restoreDecision{Sidecar: sc, Fetch: map[string]string{"n1": fromS3, "n2": fromS3}},
		},
		{
			name:   "sidecar on a node, copy only in s3",
			copies: []nodeCopy{{Node: "n1", Sidecar: sc}, missing("n2")},
			haveS3: true,
			want:   &restoreDecision{NeedS3: true},
		},
		{
			name:   "s3 copy of the wrong size",
			copies: []nodeCopy{{Node: "n1", Sidecar: sc}},
			s3:     &s3Copy{Where: "s3://b/snap1", Present: true, Size: 7}, haveS3: true,
			err: "its copy in s3://b/snap1 is 7 bytes, its sidecar says 100: it is damaged",
		},
		{
			name:   "s3 down when it is needed",
			copies: []nodeCopy{{Node: "n1", Sidecar: sc}},
			s3:     &s3Copy{Err: errors.New("no route")}, haveS3: true,
			err: "s3 could not be asked: no route",
		},
		{
			name:   "only the sidecar is left",
			copies: []nodeCopy{{Node: "n1", Sidecar: sc}},
			err:    "no copy of snapshot snap1 on any etcd node, nor in s3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decideRestore(name, tt.copies, tt.s3, tt.haveS3, ca, tt.fromNode)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSameMembers(t *testing.T) {
	want := []RestoreMember{{Name: "etcd-a", PeerURL: "https://10.0.0.1:2380"}, {Name: "etcd-b", PeerURL: "https://10.0.0.2:2380"}}
	a := etcdmember.Member{Name: "etcd-a", PeerURLs: []string{"https://10.0.0.1:2380"}}
	b := etcdmember.Member{Name: "etcd-b", PeerURLs: []string{"https://10.0.0.2:2380"}}
	if err := sameMembers([]etcdmember.Member{b, a}, want); err != nil {
		t.Errorf("same members: %v", err)
	}
	learner := b
	learner.IsLearner = true
	old := etcdmember.Member{Name: "etcd-old", PeerURLs: []string{"https://10.0.0.9:2380"}}
	for _, got := range [][]etcdmember.Member{{a}, {a, learner}, {a, b, old}} {
		if err := sameMembers(got, want); err == nil {
			t.Errorf("members %v accepted, want %v", got, want)
		}
	}
}

func TestRestoreErrorSaysHowToGoOn(t *testing.T) {
	e := &RestoreError{
		Name: "snap1", Step: "restore the snapshot", Err: errors.New("etcdctl exited with code 1"),
		Stopped:    []string{"10.0.0.1 etcd", "10.0.0.1 kube-apiserver", "10.0.0.2 etcd"},
		MovedAside: map[string]string{"10.0.0.1": "/var/lib/etcd/member.before-restore-20261122T013000Z", "10.0.0.2": "/var/lib/etcd/member.before-restore-20261122T013000Z"},
		Restored:   []string{"10.0.0.1"},
		EtcdNodes:  []string{"10.0.0.1", "10.0.0.2"}, HelperImage: "alpine:3",
	}
	msg := e.Error()
	for _, want := range []string{
		"restore snapshot snap1: restore the snapshot: etcdctl exited with code 1",
		"stopped and removed: 10.0.0.1 etcd, 10.0.0.1 kube-apiserver, 10.0.0.2 etcd",
		"10.0.0.1: restored from snap1; its old data is in /var/lib/etcd/member.before-restore-20261122T013000Z",
		"10.0.0.2: not restored; its old data is in /var/lib/etcd/member.before-restore-20261122T013000Z",
		"run `rigger snapshot restore snap1 -f cluster.yml` again",
		"10.0.0.2: docker rm -f etcd; docker run --rm -v /var/lib/etcd:/var/lib/etcd alpine:3 sh -c 'rm -rf /var/lib/etcd/member && mv /var/lib/etcd/member.before-restore-20261122T013000Z /var/lib/etcd/member'",
		"then run `rigger apply -f cluster.yml`",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	e.MovedAside, e.Restored = nil, nil
	if msg := e.Error(); !strings.Contains(msg, "nothing was moved") || !strings.Contains(msg, "10.0.0.2: not restored; its data directory was not moved") {
		t.Errorf("message before anything moved:\n%s", msg)
	}
}

func TestOfflineTool(t *testing.T) {
	for image, want := range map[string]string{
		"rancher/mirrored-coreos-etcd:v3.4.23":     "etcdctl",
		"rancher/mirrored-coreos-etcd:v3.5.16":     "etcdctl",
		"quay.io/coreos/etcd:v3.6.0":               "etcdutl",
		"registry.k8s.io/etcd:3.6.1-0":             "etcdutl",
		"registry:5000/etcd:v3.6.4":                "etcdutl",
		"registry:5000/etcd":                       "etcdctl",
		"rigger-sandbox/etcd:latest":               "etcdctl",
		"gcr.io/etcd-development/etcd:v4.0.0-rc.1": "etcdutl",
	} {
		if got := offlineTool(image); got != want {
			t.Errorf("offlineTool(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestVerifyIntegrity(t *testing.T) {
	// snapshot is a file as etcdctl snapshot save writes it: a database
	// whose size is a multiple of 512, then its sha256.
	db := bytes.Repeat([]byte("etcd-db!"), 512)
	sum := sha256.Sum256(db)
	snapshot := append(slices.Clone(db), sum[:]...)
	flipped := func(i int) []byte { b := slices.Clone(snapshot); b[i] ^= 1; return b }
	var ie *integrityError
	for _, tt := range []struct {
		name  string
		file  []byte
		size  int64
		err   string // a part of the error; "" for none
		isInt bool   // an *integrityError
	}{
		{name: "as etcdctl saved it", file: snapshot, size: int64(len(snapshot))},
		{name: "a byte of the data flipped", file: flipped(100), size: int64(len(snapshot)), err: "its data has sha256", isInt: true},
		{name: "a byte of the hash flipped", file: flipped(len(snapshot) - 1), size: int64(len(snapshot)), err: "etcd's integrity hash at its end is", isInt: true},
		{name: "no hash (the bare database)", file: db, size: int64(len(db)), err: "not 32 bytes past a multiple of 512", isInt: true},
		{name: "truncated", file: snapshot[:len(snapshot)-1], size: int64(len(snapshot) - 1), err: "not 32 bytes past a multiple of 512", isInt: true},
		{name: "shorter than its size says", file: snapshot[:100], size: int64(len(snapshot)), err: "read: EOF"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyIntegrity(bytes.NewReader(tt.file), tt.size)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one with %q", err, tt.err)
			}
			if got := errors.As(err, &ie); got != tt.isInt {
				t.Errorf("%v: an integrity error %v, want %v", err, got, tt.isInt)
			}
		})
	}
}

// restore NAME.zip is the restore of NAME: it gets past the name to the
// cluster's own checks.
func TestRestoreTakesZipNameAsSnapshot(t *testing.T) {
	for _, name := range []string{"before-rigger.zip", "before-rigger"} {
		_, err := Restore(context.Background(), &Cluster{External: true}, name, RestoreOptions{})
		if err == nil || !strings.Contains(err.Error(), "services.etcd.external_urls is set") {
			t.Errorf("restore %s: %v, want it past the name to the cluster's checks", name, err)
		}
	}
	if _, err := Restore(context.Background(), &Cluster{External: true}, ".zip", RestoreOptions{}); err == nil || strings.Contains(err.Error(), "external_urls") {
		t.Errorf("restore .zip: %v, want the name refused", err)
	}
}
