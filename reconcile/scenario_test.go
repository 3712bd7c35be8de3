package reconcile

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// The scenarios of compute, the one place a plan is decided: each is a
// converged three-node cluster (every node etcd, controlplane and worker)
// brought by builders into a half-finished state — a record of a staged
// operation at one of its stages, the nodes as the stage before left them
// (or as this stage left them, stopped before its restarts), an etcd
// learner never promoted, components at mixed versions — and the plan
// expected of it: its steps (summarized), the stage it carries out and
// what the apply goes on with after it (Planned.Next).

const scenarioYML = `cluster_name: scenario
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.3, user: u, role: [etcd, controlplane, worker]}
services:
  kube-api:
    secrets_encryption_config: {enabled: true}
`

var scenarioNow = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// scenarioDocker is the nodes' Docker version.
const scenarioDocker = "28.3.3"

// scenario is a cluster's state directory and an observation of its nodes.
type scenario struct {
	t   *testing.T
	c   *spec.Cluster
	dir string
	o   *observe.Cluster
}

// converged is the scenario of a cluster as an apply left it: the state
// directory with its PKI and key, every node running what the plan of
// that state asks for, etcd's members all voting and healthy.
func converged(t *testing.T) *scenario {
	t.Helper()
	c, diags := spec.Parse([]byte(scenarioYML), "cluster.yml")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	sc := &scenario{t: t, c: c, dir: t.TempDir()}
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), scenarioNow)
	if err != nil {
		t.Fatal(err)
	}
	key, err := secretsenc.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.Save(sc.dir, set); err != nil {
		t.Fatal(err)
	}
	if err := secretsenc.Save(sc.dir, key); err != nil {
		t.Fatal(err)
	}
	sc.o = &observe.Cluster{At: scenarioNow, Nodes: map[string]*observe.Node{}}
	for _, n := range c.Nodes {
		sc.o.Nodes[n.Address] = &observe.Node{Address: n.Address, Reachable: true, FilesRead: true, DockerVersion: scenarioDocker}
	}
	sc.applied(sc.plan(nil))
	return sc
}

// session opens a session on the scenario's cluster; opts changes its
// options (nil: none).
func (sc *scenario) session(opts func(*Options)) *Session {
	o := Options{StateDir: sc.dir, Transport: struct{ transport.Transport }{}, Now: func() time.Time { return scenarioNow }}
	if opts != nil {
		opts(&o)
	}
	s, err := Open(sc.c, o)
	if err != nil {
		sc.t.Fatal(err)
	}
	return s
}

// plan is compute's plan of the scenario, with opts (nil: none).
func (sc *scenario) plan(opts func(*Options)) *Planned {
	sc.t.Helper()
	s := sc.session(opts)
	st, err := s.loadState()
	if err != nil {
		sc.t.Fatal(err)
	}
	a := asked{rotate: s.opts.Rotate, rotateKey: s.opts.RotateKey}
	rp, err := s.resolvePKI(st, sc.o, a)
	if err != nil {
		sc.t.Fatal(err)
	}
	pl, err := s.compute(st, sc.o, rp, a)
	if err != nil {
		sc.t.Fatal(err)
	}
	return pl
}

// applied makes the nodes run what pl asks for, as an apply of pl leaves
// them (every node's files written, its containers created as desired),
// with etcd's members voting and healthy.
func (sc *scenario) applied(pl *Planned) {
	sc.o.Etcd = &observe.Etcd{}
	for i, n := range pl.Desired.Nodes {
		on := &observe.Node{Address: n.Address, Reachable: true, FilesRead: true, DockerVersion: scenarioDocker, Files: map[string]string{},
			Containers: map[string]observe.Container{}}
		for p, b := range n.Files {
			on.Files[p] = observe.FileHash(b)
		}
		for _, dc := range n.Containers {
			on.Containers[dc.Name] = observe.Container{Name: dc.Name, Image: dc.Image, State: "running",
				Component: dc.Labels[desired.LabelComponent], SpecHash: dc.Labels[desired.LabelSpecHash], Spec: dc.Labels[desired.LabelSpec]}
		}
		sc.o.Nodes[n.Address] = on
		if _, ok := n.Container(desired.Etcd); ok {
			sc.o.Etcd.Members = append(sc.o.Etcd.Members, etcdmember.Member{ID: uint64(i + 1), Name: desired.EtcdMemberName(n.Hostname),
				PeerURLs: []string{desired.EtcdPeerURL(n.InternalAddress)}, Healthy: true})
		}
	}
}

// started saves what an apply of pl saves before the nodes change: the
// PKI, the rotation's record and generations, the key and its record.
func (sc *scenario) started(pl *Planned) {
	sc.t.Helper()
	if r := pl.pki; r.Save {
		if err := pki.Save(sc.dir, r.State); err != nil {
			sc.t.Fatal(err)
		}
	}
	if _, err := pl.rotation().Start(sc.dir, scenarioNow); err != nil {
		sc.t.Fatal(err)
	}
	if e := pl.encryption; e != nil {
		if _, err := e.Save(sc.dir, scenarioNow); err != nil {
			sc.t.Fatal(err)
		}
	}
}

// caRotationAt is the scenario of a CA rotation begun (rigger cert rotate
// --ca) and recorded at stage, the nodes as the stage before it left
// them; with written, as stage itself left them, stopped before its
// restarts.
func caRotationAt(t *testing.T, stage pki.CAStage, written bool) *scenario {
	sc := converged(t)
	first := sc.plan(func(o *Options) { o.Rotate = &pki.Rotation{CA: true} })
	sc.started(first)
	for _, st := range pki.CAStages {
		if st == stage && !written {
			break
		}
		sc.applied(sc.plan(nil))
		if st == stage {
			break
		}
		rec, err := certrotate.Load(sc.dir)
		if err != nil {
			t.Fatal(err)
		}
		rec, _ = certrotate.Advanced(rec)
		if err := certrotate.Save(sc.dir, rec); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

// keyRotationAt is the scenario of a rotation of the generated key
// recorded at stage, its new key saved, the nodes holding the
// configuration of the stage before (the key before the rotation for its
// first); with written, the stage's own, stopped before its restarts.
func keyRotationAt(t *testing.T, stage secretsenc.Stage, written bool) *scenario {
	sc := converged(t)
	cur, err := secretsenc.Load(sc.dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := secretsenc.NewKey(cur.Names())
	if err != nil {
		t.Fatal(err)
	}
	stages := secretsenc.Stages(secretsenc.KindRotate)
	onNodes := cur.Marshal()
	for _, st := range stages {
		if st == stage && !written {
			break
		}
		c, err := secretsenc.Desired(&secretsenc.Config{Keys: append(slices.Clone(cur.Keys), k)}, &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: st, NewKey: k.Name})
		if err != nil {
			t.Fatal(err)
		}
		onNodes = c.Marshal()
		if st == stage {
			break
		}
	}
	cur.Keys = append(cur.Keys, k)
	if err := secretsenc.Save(sc.dir, cur); err != nil {
		t.Fatal(err)
	}
	rec := secretsenc.Record{Op: &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: stage, NewKey: k.Name, StartedAt: scenarioNow}}
	if err := secretsenc.SaveRecord(sc.dir, rec); err != nil {
		t.Fatal(err)
	}
	for _, n := range sc.o.Nodes {
		n.Files[desired.EncryptionConfigFile] = observe.FileHash(onNodes)
	}
	return sc
}

// summary is a plan as the scenarios compare it: each kind of step with
// its reason and on how many nodes, the CA rotation's stage, the key's
// stage, and what follows.
func summary(pl *Planned) []string {
	count := map[string]int{}
	for _, s := range pl.Plan.Steps {
		count[fmt.Sprintf("%s %s %s (%s)", s.Phase, s.Action, s.Component, s.Reason)]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		out = append(out, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	if r := pl.Rotation(); r != nil {
		out = append(out, fmt.Sprintf("CA rotation at %s (resumed %v)", r.Stage, r.Resumed))
	}
	if e := pl.Encryption; e != nil && e.Op != nil {
		out = append(out, fmt.Sprintf("key %s at %s", e.Op.Kind, e.Op.Stage))
	}
	if next := pl.Next(); next != "" {
		out = append(out, "next: "+next)
	}
	return out
}

func TestComputeScenarios(t *testing.T) {
	const (
		restartAPI   = "controlplane restart kube-apiserver"
		keyChanged   = "files write-files files (changed: encryption.yaml) ×3"
		keyRestarted = restartAPI + " (reads changed files) ×3"
		caFiles      = "files write-files files (changed: kube-apiserver-requestheader-ca.pem, kube-ca.pem, kubecfg-kube-controller-manager.yaml and 3 more) ×3"
		certFiles    = "files write-files files (changed: kube-admin-key.pem, kube-admin.pem, kube-apiserver-key.pem and 25 more) ×3"
		toIssue      = "next: CA rotation, stage new-certificates (every certificate is the new CA's, both CAs trusted)"
		toFinish     = "next: CA rotation, stage new-ca-only (the new CA alone is trusted)"
	)
	// every is the restart, for why, of every component on every node,
	// with lines, sorted as summary sorts them.
	every := func(why string, lines ...string) []string {
		out := slices.Clone(lines)
		for _, c := range []string{"controlplane restart kube-apiserver", "controlplane restart kube-controller-manager",
			"controlplane restart kube-scheduler", "etcd restart etcd", "worker restart kube-proxy", "worker restart kubelet"} {
			out = append(out, c+" ("+why+") ×3")
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name  string
		build func(t *testing.T) *scenario
		opts  func(*Options)
		want  []string
	}{
		{name: "converged", build: converged, want: nil},
		{
			name: "etcd learner never promoted",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.o.Etcd.Members[2].IsLearner = true
				return sc
			},
			want: []string{"etcd add-member etcd-member (added as a learner by an apply that stopped before it voted: joins, votes once it has caught up) ×1"},
		},
		{
			name: "mixed component versions",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				kl := sc.o.Nodes["10.0.0.2"].Containers[desired.Kubelet]
				kl.Image, kl.SpecHash, kl.Spec = kl.Image+"-older", "0ld", ""
				sc.o.Nodes["10.0.0.2"].Containers[desired.Kubelet] = kl
				return sc
			},
			want: []string{"worker replace kubelet (spec hash differs) ×1"},
		},
		{
			name:  "key rotation requested",
			build: converged, opts: func(o *Options) { o.RotateKey = true },
			want: []string{keyRestarted, keyChanged, "key rotate at add-key", "next: secrets encryption rotate, stage write-new-key"},
		},
		{
			name: "key rotation requested while the Secrets are rewritten after enabling",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				if err := secretsenc.SaveRecord(sc.dir, secretsenc.Record{Op: &secretsenc.Op{Kind: secretsenc.KindEncrypt, Stage: secretsenc.StageRewrite, StartedAt: scenarioNow}}); err != nil {
					t.Fatal(err)
				}
				return sc
			},
			opts: func(o *Options) { o.RotateKey = true },
			want: []string{"key encrypt at rewrite-secrets", "next: secrets encryption rotate, stage add-key"},
		},
		{
			name:  "key rotation stopped at add-key",
			build: func(t *testing.T) *scenario { return keyRotationAt(t, secretsenc.StageAddKey, false) },
			want:  []string{keyRestarted, keyChanged, "key rotate at add-key", "next: secrets encryption rotate, stage write-new-key"},
		},
		{
			name:  "key rotation stopped at add-key, its file written",
			build: func(t *testing.T) *scenario { return keyRotationAt(t, secretsenc.StageAddKey, true) },
			want: []string{restartAPI + " (secrets encryption rotate, stage add-key: reads /etc/kubernetes/ssl/encryption.yaml again) ×3",
				"key rotate at add-key", "next: secrets encryption rotate, stage write-new-key"},
		},
		{
			name:  "key rotation stopped at write-new-key",
			build: func(t *testing.T) *scenario { return keyRotationAt(t, secretsenc.StageWriteKey, false) },
			want:  []string{keyRestarted, keyChanged, "key rotate at write-new-key", "next: secrets encryption rotate, stage rewrite-secrets"},
		},
		{
			name:  "key rotation stopped at rewrite-secrets",
			build: func(t *testing.T) *scenario { return keyRotationAt(t, secretsenc.StageRewrite, false) },
			want:  []string{"key rotate at rewrite-secrets", "next: secrets encryption rotate, stage drop-old-keys"},
		},
		{
			name:  "key rotation stopped at drop-old-keys",
			build: func(t *testing.T) *scenario { return keyRotationAt(t, secretsenc.StageDropOld, false) },
			want:  []string{keyRestarted, keyChanged, "key rotate at drop-old-keys"},
		},
		{
			name:  "CA rotation requested",
			build: converged, opts: func(o *Options) { o.Rotate = &pki.Rotation{CA: true} },
			want: append(every("reads changed files", caFiles), "CA rotation at trust-both (resumed false)", toIssue),
		},
		{
			name:  "CA rotation stopped at trust-both",
			build: func(t *testing.T) *scenario { return caRotationAt(t, pki.StageTrust, false) },
			want:  append(every("reads changed files", caFiles), "CA rotation at trust-both (resumed true)", toIssue),
		},
		{
			name:  "CA rotation stopped at trust-both, its files written",
			build: func(t *testing.T) *scenario { return caRotationAt(t, pki.StageTrust, true) },
			want:  append(every("reads rotated certificates"), "CA rotation at trust-both (resumed true)", toIssue),
		},
		{
			name:  "CA rotation stopped at new-certificates",
			build: func(t *testing.T) *scenario { return caRotationAt(t, pki.StageIssue, false) },
			want:  append(every("reads changed files", certFiles), "CA rotation at new-certificates (resumed true)", toFinish),
		},
		{
			name:  "CA rotation stopped at new-ca-only",
			build: func(t *testing.T) *scenario { return caRotationAt(t, pki.StageFinish, false) },
			want:  append(every("reads changed files", caFiles), "CA rotation at new-ca-only (resumed true)"),
		},
		{
			name:  "CA rotation stopped at new-ca-only, its files written",
			build: func(t *testing.T) *scenario { return caRotationAt(t, pki.StageFinish, true) },
			want:  append(every("reads rotated certificates"), "CA rotation at new-ca-only (resumed true)"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := tc.build(t)
			if diff := cmp.Diff(tc.want, summary(sc.plan(tc.opts))); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAskedAfter: the command line's requests are asked of the first plan
// of an apply; the plans after the one that started them go on from the
// records and do not start them again.
func TestAskedAfter(t *testing.T) {
	ca := &pki.Rotation{CA: true}
	both := asked{rotate: ca, rotateKey: true}
	sc := converged(t)
	rotating := sc.plan(func(o *Options) { o.Rotate, o.RotateKey = ca, true })
	if got := both.after(rotating); got.rotate != nil || got.rotateKey {
		t.Errorf("after a plan that started both rotations: %+v, want nothing asked", got)
	}
	if got := both.after(sc.plan(nil)); got.rotate != ca || !got.rotateKey {
		t.Errorf("after a plan that started neither: %+v, want both still asked", got)
	}
}
