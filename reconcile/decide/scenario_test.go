package decide

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// The scenarios of Compute, the one place a plan is decided, as CKE's
// table of DecideOps: each is a cluster brought by builders into a state —
// converged, a record of a staged operation at one of its stages with the
// nodes as the stage before left them (or as this stage left them, stopped
// before its restarts), an etcd learner never promoted, components at
// mixed versions, a node down, a node removed, a stale Node — and the plan
// expected of it, summarized: its steps, the stage of each staged
// operation and what follows it, why it is blocked, the budgets that stop
// a phase, the Nodes' changes. Every scenario is values only: the state
// directory is a State, the nodes an observe.Cluster, and no Session, disk
// or clock is involved.

const scenarioYML = `cluster_name: scenario
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.3, user: u, role: [etcd, controlplane, worker]}
services:
  kube-api:
    secrets_encryption_config: {enabled: true}
`

// splitYML is a cluster of one etcd and controlplane node and four
// workers, without a generated key.
const splitYML = `cluster_name: split
nodes:
  - {address: 10.0.1.1, user: u, role: [etcd, controlplane]}
  - {address: 10.0.1.2, user: u, role: [worker]}
  - {address: 10.0.1.3, user: u, role: [worker]}
  - {address: 10.0.1.4, user: u, role: [worker]}
  - {address: 10.0.1.5, user: u, role: [worker]}
`

// dump prints each scenario's summary, to write a new row's want.
var dump = flag.Bool("dump", false, "print the summary of each scenario's plan (go test -run TestComputeScenarios -dump)")

var scenarioNow = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// scenarioDocker is the nodes' Docker version.
const scenarioDocker = "28.3.3"

// scenario is a cluster.yml, its state directory's records, an
// observation of its nodes, and what the command line asks.
type scenario struct {
	t     *testing.T
	c     *spec.Cluster
	st    *State
	o     *observe.Cluster
	asked Asked
}

// parse is cluster.yml yml, loaded.
func parse(t *testing.T, yml string) *spec.Cluster {
	t.Helper()
	c, diags := spec.Parse([]byte(yml), "cluster.yml")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// converged is the scenario of the three-node cluster as an apply left
// it: the state with its PKI and key, every node running what the plan of
// that state asks for, etcd's members all voting and healthy.
func converged(t *testing.T) *scenario { return convergedYML(t, scenarioYML) }

// convergedYML is converged for the cluster.yml yml.
func convergedYML(t *testing.T, yml string) *scenario {
	t.Helper()
	sc := &scenario{t: t, c: parse(t, yml), st: &State{}}
	set, _, err := pki.Ensure(nil, pki.RequestFor(sc.c), scenarioNow)
	if err != nil {
		t.Fatal(err)
	}
	sc.st.PKI = set
	if desired.GeneratedEncryption(sc.c) {
		if sc.st.Key, err = secretsenc.New(); err != nil {
			t.Fatal(err)
		}
	}
	sc.o = &observe.Cluster{At: scenarioNow, Nodes: map[string]*observe.Node{}}
	for _, n := range sc.c.Nodes {
		sc.o.Nodes[n.Address] = &observe.Node{Address: n.Address, Reachable: true, FilesRead: true, DockerVersion: scenarioDocker}
	}
	sc.applied(sc.plan())
	return sc
}

// compute is Compute of the scenario.
func (sc *scenario) compute() (*Planned, error) {
	return Compute(Input{Spec: sc.c, StateDir: "/state", State: sc.st, Observed: sc.o, Asked: sc.asked, Now: scenarioNow})
}

// plan is Compute's plan of the scenario; an error fails the test.
func (sc *scenario) plan() *Planned {
	sc.t.Helper()
	pl, err := sc.compute()
	if err != nil {
		sc.t.Fatal(err)
	}
	return pl
}

// applied makes the nodes run what pl asks for, as an apply of pl leaves
// them (every node's files written, its containers created as desired),
// with etcd's members voting and healthy; the nodes pl removes are gone.
func (sc *scenario) applied(pl *Planned) {
	sc.o.Etcd = &observe.Etcd{}
	for _, a := range pl.Plan.RemovedNodes {
		delete(sc.o.Nodes, a)
	}
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

// started is what an apply of pl writes to the state directory before the
// nodes change (Planned.SavePKI, each staged operation's Before), kept in
// the scenario's State.
func (sc *scenario) started(pl *Planned) {
	if pl.SavePKI != nil {
		sc.st.PKI = pl.SavePKI
	}
	if rot := pl.rotation(); rot != nil {
		sc.st.Rotation, _ = rot.Recorded(scenarioNow)
		if rot.SavesGenerations() {
			sc.st.Old, sc.st.New = rot.Old, rot.Rotated
		}
	}
	if e := pl.encryption; e != nil {
		sc.st.KeyRecord = e.Recorded(scenarioNow)
		if e.SaveConfig {
			sc.st.Key = e.Cur
		}
	}
}

// crashLoop makes Docker restart component on node over and over.
func crashLoop(sc *scenario, node, component string) {
	c := sc.o.Nodes[node].Containers[component]
	code := 255
	c.State, c.ExitCode, c.RestartCount = "restarting", &code, 2
	sc.o.Nodes[node].Containers[component] = c
}

// down makes nodes not answer.
func (sc *scenario) down(nodes ...string) *scenario {
	for _, a := range nodes {
		sc.o.Nodes[a] = &observe.Node{Address: a, Error: "dial tcp " + a + ":22: connect: no route to host"}
	}
	return sc
}

// kubernetes makes the API server list a Node of each machine, as its
// kubelet registered it and an apply labelled it (Ready unless notReady
// names it), and the extra Nodes.
func (sc *scenario) kubernetes(notReady []string, extra ...corev1.Node) *scenario {
	machines := kubenode.Machines(sc.c)
	var nodes []corev1.Node
	for _, m := range machines {
		labels, taints := kubenode.Wanted(m)
		name := m.Hostname
		if name == "" {
			name = m.Address
		}
		ready := corev1.ConditionTrue
		if slices.Contains(notReady, m.Address) {
			ready = corev1.ConditionFalse
		}
		var managed []string
		for _, t := range taints {
			managed = append(managed, t.Key+":"+string(t.Effect))
		}
		nodes = append(nodes, corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
				kubenode.AnnotationManagedLabels: strings.Join(slices.Sorted(maps.Keys(labels)), ","),
				kubenode.AnnotationManagedTaints: strings.Join(managed, ",")}},
			Spec:   corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
		})
	}
	nodes = append(nodes, extra...)
	sc.o.Kubernetes = &observe.Kubernetes{Nodes: nodes, Link: kubenode.Link(machines, nodes)}
	return sc
}

// node is the listed Node of name.
func (sc *scenario) node(name string) *corev1.Node {
	for i := range sc.o.Kubernetes.Nodes {
		if n := &sc.o.Kubernetes.Nodes[i]; n.Name == name {
			return n
		}
	}
	sc.t.Fatalf("no Node %s", name)
	return nil
}

// relink links the Nodes again, once changed.
func (sc *scenario) relink() *scenario {
	sc.o.Kubernetes.Link = kubenode.Link(kubenode.Machines(sc.c), sc.o.Kubernetes.Nodes)
	return sc
}

// caRotationAt is the scenario of a CA rotation begun (rigger cert rotate
// --ca) and recorded at stage, the nodes as the stage before it left
// them; with written, as stage itself left them, stopped before its
// restarts.
func caRotationAt(t *testing.T, stage pki.CAStage, written bool) *scenario {
	sc := converged(t)
	sc.asked.Rotate = &pki.Rotation{CA: true}
	first := sc.plan()
	sc.asked.Rotate = nil
	sc.started(first)
	for _, st := range pki.CAStages {
		if st == stage && !written {
			break
		}
		sc.applied(sc.plan())
		if st == stage {
			break
		}
		sc.st.Rotation, _ = certrotate.Advanced(sc.st.Rotation)
	}
	return sc
}

// keyRotationAt is the scenario of a rotation of the generated key
// recorded at stage, its new key saved, the nodes holding the
// configuration of the stage before (the key before the rotation for its
// first); with written, the stage's own, stopped before its restarts.
func keyRotationAt(t *testing.T, stage secretsenc.Stage, written bool) *scenario {
	sc := converged(t)
	cur := sc.st.Key
	k, err := secretsenc.NewKey(cur.Names())
	if err != nil {
		t.Fatal(err)
	}
	onNodes := cur.Marshal()
	for _, st := range secretsenc.Stages(secretsenc.KindRotate) {
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
	sc.st.Key = &secretsenc.Config{IdentityFirst: cur.IdentityFirst, Keys: append(slices.Clone(cur.Keys), k)}
	sc.st.KeyRecord = secretsenc.Record{Op: &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: stage, NewKey: k.Name, StartedAt: scenarioNow}}
	for _, n := range sc.o.Nodes {
		n.Files[desired.EncryptionConfigFile] = observe.FileHash(onNodes)
	}
	return sc
}

// summary is a plan as the scenarios compare it: each kind of step with
// its reason and on how many nodes, the nodes not reached, where the PKI
// comes from when not the state directory and what it issues, each staged
// operation's stage and what follows, the Nodes' changes, the budgets
// that block a phase, and why the plan is blocked.
func summary(pl *Planned) []string {
	count := map[string]int{}
	for _, s := range pl.Plan.Steps {
		count[fmt.Sprintf("%s %s %s (%s)", s.Phase, s.Action, s.Component, s.Reason)]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		out = append(out, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	if u := pl.Unreachable(); len(u) > 0 {
		out = append(out, "unreachable: "+strings.Join(u, ", "))
	}
	for _, u := range pl.Plan.Unreachable {
		if u.Removed {
			out = append(out, "removed, not reached: "+u.Node)
		}
	}
	if k := pl.PKISource.Kind; k != "" && k != "state-directory" {
		out = append(out, "PKI "+string(k))
	}
	if n := len(pl.PKIChanges); n > 0 {
		out = append(out, fmt.Sprintf("PKI issues %d", n))
	}
	if r := pl.Rotation(); r != nil {
		if r.CA {
			out = append(out, fmt.Sprintf("CA rotation at %s (resumed %v)", r.Stage, r.Resumed))
		} else {
			out = append(out, fmt.Sprintf("rotation of %s (resumed %v)", strings.Join(r.Names, ", "), r.Resumed))
		}
	}
	if r := pl.RotationWaiting(); r != nil {
		out = append(out, "rotation waiting: "+r.String())
	}
	if pl.RotationRecordCleared() {
		out = append(out, "rotation record cleared")
	}
	if e := pl.Encryption; e != nil {
		if k := e.Source.Kind; k != "state-directory" {
			out = append(out, "key "+string(k))
		}
		if e.Op != nil {
			out = append(out, fmt.Sprintf("key %s at %s", e.Op.Kind, e.Op.Stage))
		}
		if pl.encryption.SaveRecord && e.Op == nil {
			out = append(out, "key record saved")
		}
	}
	if next := pl.Next(); next != "" {
		out = append(out, "next: "+next)
	}
	for _, c := range pl.NodeChanges {
		out = append(out, fmt.Sprintf("Node %s: %s", c.Name, c.Action))
	}
	blocked := pl.Budgets.Blocked(pl.Plan)
	for _, ph := range slices.Sorted(maps.Keys(blocked)) {
		out = append(out, fmt.Sprintf("%s blocked", ph))
	}
	if b := pl.Budgets.WorkerBatch; b != 1 {
		out = append(out, fmt.Sprintf("worker batch %d", b))
	}
	if err := pl.Blocked(); err != nil {
		reason, _ := stall.Classify(err)
		out = append(out, fmt.Sprintf("blocked: %s", reason))
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
		// asked, when set, changes what the command line asks.
		asked func(*Asked)
		want  []string
		// wantErr, when set, is in Compute's error, which wantReason
		// classifies.
		wantErr    string
		wantReason stall.Reason
	}{
		// Converged, and what drifted on the nodes.
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

		// The secrets encryption key's operations.
		{
			name:  "key rotation requested",
			build: converged, asked: func(a *Asked) { a.RotateKey = true },
			want: []string{keyRestarted, keyChanged, "key rotate at add-key", "next: secrets encryption rotate, stage write-new-key"},
		},
		{
			name: "key rotation requested while the Secrets are rewritten after enabling",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.st.KeyRecord = secretsenc.Record{Op: &secretsenc.Op{Kind: secretsenc.KindEncrypt, Stage: secretsenc.StageRewrite, StartedAt: scenarioNow}}
				return sc
			},
			asked: func(a *Asked) { a.RotateKey = true },
			want:  []string{"key encrypt at rewrite-secrets", "next: secrets encryption rotate, stage add-key"},
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

		// The CA rotation's stages.
		{
			name:  "CA rotation requested",
			build: converged, asked: func(a *Asked) { a.Rotate = &pki.Rotation{CA: true} },
			want: append(every("reads changed files", caFiles), "PKI issues 12", "CA rotation at trust-both (resumed false)", toIssue),
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
		// Certificates rotated, leaf ones, asked by cluster.yml or the
		// command line.
		{
			name: "rotate_certificates of the kubelet in cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.c.RotateCertificates = &spec.RotateCertificates{Services: []string{"kubelet"}}
				return sc
			},
			want: []string{
				"controlplane restart kube-apiserver (reads changed files) ×3",
				"files write-files files (changed: kube-node-key.pem, kube-node.pem, kubecfg-kube-node.yaml) ×3",
				"worker restart kubelet (reads changed files) ×3",
				"PKI issues 1",
				"rotation of kube-node (resumed false)",
			},
		},
		{
			name:  "rigger cert rotate --service etcd",
			build: converged, asked: func(a *Asked) { a.Rotate = &pki.Rotation{Services: []string{"etcd"}} },
			want: []string{
				"etcd restart etcd (reads changed files) ×3",
				"files write-files files (changed: kube-etcd-10-0-0-1-key.pem, kube-etcd-10-0-0-1.pem, kube-etcd-10-0-0-2-key.pem and 3 more) ×3",
				"PKI issues 3",
				"rotation of kube-etcd-10-0-0-1, kube-etcd-10-0-0-2, kube-etcd-10-0-0-3 (resumed false)",
			},
		},
		{
			name: "rotate_certificates carried out, cluster.yml still asks it",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.st.Rotation = certrotate.Record{Requested: &pki.Rotation{Services: []string{"kubelet"}}}
				sc.c.RotateCertificates = &spec.RotateCertificates{Services: []string{"kubelet"}}
				return sc
			},
			want: nil,
		},
		{
			name: "rotate_certificates carried out, gone from cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.st.Rotation = certrotate.Record{Requested: &pki.Rotation{Services: []string{"kubelet"}}}
				return sc
			},
			want: []string{
				"rotation record cleared",
			},
		},
		{
			name: "a leaf rotation stopped before every node ran it",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.asked.Rotate = &pki.Rotation{Services: []string{"kubelet"}}
				sc.started(sc.plan())
				sc.asked.Rotate = nil
				return sc
			},
			want: []string{
				"controlplane restart kube-apiserver (reads changed files) ×3",
				"files write-files files (changed: kube-node-key.pem, kube-node.pem, kubecfg-kube-node.yaml) ×3",
				"worker restart kubelet (reads changed files) ×3",
				"rotation of kube-node (resumed true)",
			},
		},
		{
			name:  "a rotation asked while a CA rotation is under way",
			build: func(t *testing.T) *scenario { return caRotationAt(t, pki.StageIssue, false) },
			asked: func(a *Asked) { a.Rotate = &pki.Rotation{Services: []string{"kubelet"}} },
			want: []string{
				"controlplane restart kube-apiserver (reads changed files) ×3",
				"controlplane restart kube-controller-manager (reads changed files) ×3",
				"controlplane restart kube-scheduler (reads changed files) ×3",
				"etcd restart etcd (reads changed files) ×3",
				"files write-files files (changed: kube-admin-key.pem, kube-admin.pem, kube-apiserver-key.pem and 25 more) ×3",
				"worker restart kube-proxy (reads changed files) ×3",
				"worker restart kubelet (reads changed files) ×3",
				"CA rotation at new-certificates (resumed true)",
				"rotation waiting: the certificates of kubelet",
				"next: CA rotation, stage new-ca-only (the new CA alone is trusted)",
			},
		},

		// Where the certificates and the key come from.
		{
			name:  "a new cluster: no state, nothing on the nodes",
			build: fresh,
			want: created(3,
				"PKI new",
				"PKI issues 13",
				"key new",
				"key encrypt at rewrite-secrets",
			),
		},
		{
			name:  "a new cluster with a node down: the new CA and key blocked",
			build: func(t *testing.T) *scenario { return fresh(t).down("10.0.0.3") },
			want: created(2,
				"unreachable: 10.0.0.3",
				"PKI new",
				"PKI issues 13",
				"key new",
				"key encrypt at rewrite-secrets",
				"controlplane blocked",
				"worker blocked",
				"worker batch 0",
				"blocked: NewCABlocked",
			),
		},
		{
			name: "the state directory lost: the PKI and key recovered from a node",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				pl := sc.plan()
				for _, n := range pl.Desired.Nodes {
					on := sc.o.Nodes[n.Address]
					on.Contents = map[string][]byte{}
					for p, b := range n.Files {
						on.Contents[p] = b
					}
				}
				sc.st = &State{}
				return sc
			},
			want: []string{
				"PKI recovered",
				"key recovered",
			},
		},
		{
			name: "a state directory of another cluster",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				other, _, err := pki.Ensure(nil, pki.RequestFor(sc.c), scenarioNow)
				if err != nil {
					t.Fatal(err)
				}
				sc.st.PKI = other
				return sc
			},
			wantErr: "is not the CA of node 10.0.0.1", wantReason: stall.StateDamaged,
		},
		{
			name: "secrets encryption enabled on a cluster without it",
			build: func(t *testing.T) *scenario {
				sc := convergedYML(t, strings.Replace(scenarioYML, "{enabled: true}", "{enabled: false}", 1))
				sc.c = parse(t, scenarioYML)
				return sc
			},
			want: []string{
				"controlplane replace kube-apiserver (args changed: +--encryption-provider-config=/etc/kubernetes/ssl/encryption.yaml) ×3",
				"files write-files files (missing: encryption.yaml) ×3",
				"key new",
				"key encrypt at rewrite-secrets",
			},
		},
		{
			name: "secrets encryption turned off while Secrets are encrypted",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.c = parse(t, strings.Replace(scenarioYML, "{enabled: true}", "{enabled: false}", 1))
				return sc
			},
			wantErr: "rigger does not turn encryption off", wantReason: stall.InvalidSpec,
		},
		{
			name: "rotate_encryption_key in cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.c.RotateEncryptionKey = true
				return sc
			},
			want: []string{
				"controlplane restart kube-apiserver (reads changed files) ×3",
				"files write-files files (changed: encryption.yaml) ×3",
				"key rotate at add-key",
				"next: secrets encryption rotate, stage write-new-key",
			},
		},
		{
			name: "rotate_encryption_key carried out, still in cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.c.RotateEncryptionKey = true
				sc.st.KeyRecord = secretsenc.Record{RotateHandled: true}
				return sc
			},
			want: nil,
		},
		{
			name: "rotate_encryption_key carried out, gone from cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.st.KeyRecord = secretsenc.Record{RotateHandled: true}
				return sc
			},
			want: []string{
				"key record saved",
			},
		},

		// Nodes down, added, removed: the budgets and the removal guard.
		{
			name:  "a node down",
			build: func(t *testing.T) *scenario { return converged(t).down("10.0.0.2") },
			want: []string{
				"unreachable: 10.0.0.2",
				"worker batch 0",
			},
		},
		{
			name: "a kubelet flag changed with a node down: the workers' budget used up",
			build: func(t *testing.T) *scenario {
				sc := converged(t).down("10.0.0.2")
				sc.c.Services.Kubelet.ExtraArgs = map[string]string{"event-qps": "7"}
				return sc
			},
			want: []string{
				"worker replace kubelet (args changed: +--event-qps=7, ---event-qps=0) ×2",
				"unreachable: 10.0.0.2",
				"worker blocked",
				"worker batch 0",
			},
		},
		{
			name: "an API server flag changed with a node down: the control plane's budget used up",
			build: func(t *testing.T) *scenario {
				sc := converged(t).down("10.0.0.2")
				sc.c.Services.KubeAPI.ExtraArgs = map[string]string{"audit-log-maxage": "7"}
				return sc
			},
			want: []string{
				"controlplane replace kube-apiserver (args changed: +--audit-log-maxage=7, ---audit-log-maxage=30) ×2",
				"unreachable: 10.0.0.2",
				"controlplane blocked",
				"worker batch 0",
			},
		},
		{
			name: "a crash loop with a node down: a repair takes nothing away, no budget stops it",
			build: func(t *testing.T) *scenario {
				sc := converged(t).down("10.0.0.2")
				crashLoop(sc, "10.0.0.1", desired.KubeControllerManager)
				return sc
			},
			want: []string{
				"controlplane replace kube-controller-manager (container restarting (crash loop): exited 255, restarted twice) ×1",
				"unreachable: 10.0.0.2",
				"worker batch 0",
			},
		},
		{
			name: "a crash loop and an API server flag changed with a node down: the change blocked",
			build: func(t *testing.T) *scenario {
				sc := converged(t).down("10.0.0.2")
				crashLoop(sc, "10.0.0.1", desired.KubeControllerManager)
				sc.c.Services.KubeAPI.ExtraArgs = map[string]string{"audit-log-maxage": "7"}
				return sc
			},
			want: []string{
				"controlplane replace kube-apiserver (args changed: +--audit-log-maxage=7, ---audit-log-maxage=30) ×2",
				"controlplane replace kube-controller-manager (container restarting (crash loop): exited 255, restarted twice) ×1",
				"unreachable: 10.0.0.2",
				"controlplane blocked",
				"worker batch 0",
			},
		},
		{
			name: "a kubelet flag changed on four workers, max_unavailable_worker 2, one down",
			build: func(t *testing.T) *scenario {
				sc := convergedYML(t, splitYML+"upgrade_strategy: {max_unavailable_worker: 2}\n").down("10.0.1.5")
				sc.c.Services.Kubelet.ExtraArgs = map[string]string{"event-qps": "7"}
				return sc
			},
			want: []string{
				"worker replace kubelet (args changed: +--event-qps=7, ---event-qps=0) ×4",
				"unreachable: 10.0.1.5",
			},
		},
		{
			name: "a kubelet flag changed on four workers, max_unavailable_worker 50%",
			build: func(t *testing.T) *scenario {
				sc := convergedYML(t, splitYML+"upgrade_strategy: {max_unavailable_worker: 50%}\n")
				sc.c.Services.Kubelet.ExtraArgs = map[string]string{"event-qps": "7"}
				return sc
			},
			want: []string{
				"worker replace kubelet (args changed: +--event-qps=7, ---event-qps=0) ×5",
				"worker batch 2",
			},
		},
		{
			name: "a worker added",
			build: func(t *testing.T) *scenario {
				sc := convergedYML(t, splitYML)
				sc.c = parse(t, splitYML+"  - {address: 10.0.1.6, user: u, role: [worker]}\n")
				sc.o.Nodes["10.0.1.6"] = &observe.Node{Address: "10.0.1.6", Reachable: true, FilesRead: true, DockerVersion: scenarioDocker}
				return sc
			},
			want: []string{
				"files write-files files (changed: etcd-snapshotter.json) ×1",
				"files write-files files (missing: kube-ca.pem, kube-node-key.pem, kube-node.pem and 4 more) ×1",
				"worker create kube-proxy (container missing) ×1",
				"worker create kubelet (container missing) ×1",
				"worker create nginx-proxy (container missing) ×1",
				"worker create service-sidekick (container missing) ×1",
				"worker restart etcd-rolling-snapshots (reads changed files) ×1",
			},
		},
		{
			name:  "a worker removed",
			build: func(t *testing.T) *scenario { return removed(t, splitYML, "", "10.0.1.5") },
			want:  workersRemoved(1),
		},
		{
			// rigger serve in this cluster, on the removed node.
			name: "a worker removed that rigger runs on",
			build: func(t *testing.T) *scenario {
				sc := removed(t, splitYML, "", "10.0.1.5")
				sc.o.Kubernetes = &observe.Kubernetes{Self: &observe.Self{Pod: "rigger-system/rigger-1", Node: "w5", Address: "10.0.1.5"}}
				return sc
			},
			want: workersRemoved(1, "blocked: SelfRemoval"),
		},
		{
			name: "a worker removed, rigger running on another",
			build: func(t *testing.T) *scenario {
				sc := removed(t, splitYML, "", "10.0.1.5")
				sc.o.Kubernetes = &observe.Kubernetes{Self: &observe.Self{Pod: "rigger-system/rigger-1", Node: "w4", Address: "10.0.1.4"}}
				return sc
			},
			want: workersRemoved(1),
		},
		{
			name:  "two workers removed: the removal guard",
			build: func(t *testing.T) *scenario { return removed(t, splitYML, "", "10.0.1.4", "10.0.1.5") },
			want: workersRemoved(2,
				"blocked: RemovalGuard",
			),
		},
		{
			name:  "two workers removed, --allow-removals",
			build: func(t *testing.T) *scenario { return removed(t, splitYML, "", "10.0.1.4", "10.0.1.5") },
			asked: func(a *Asked) { a.AllowRemovals = true },
			want:  workersRemoved(2),
		},
		{
			name: "two workers removed, rigger.max_removed_nodes 2",
			build: func(t *testing.T) *scenario {
				return removed(t, splitYML, "rigger: {max_removed_nodes: 2}\n", "10.0.1.4", "10.0.1.5")
			},
			want: workersRemoved(2),
		},
		{
			// A new member raises the quorum: not while one does not answer.
			name:  "an etcd node added while a member does not answer",
			build: func(t *testing.T) *scenario { return etcdAdded(t, "10.0.0.2") },
			want: []string{
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379,https://10.0.0.4:2379, ---etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379) ×1",
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379,https://10.0.0.3:2379,https://10.0.0.4:2379, ---etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379,https://10.0.0.3:2379) ×1",
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.3:2379,https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.4:2379, ---etcd-servers=https://10.0.0.3:2379,https://10.0.0.1:2379,https://10.0.0.2:2379) ×1",
				"etcd add-member etcd-member (new etcd node: joins as a learner, votes once it has caught up) ×1",
				"etcd create etcd (container missing) ×1",
				"files write-files files (missing: etcd-snapshotter.json, kube-ca.pem, kube-etcd-10-0-0-4-key.pem and 7 more) ×1",
				"files write-files files (missing: kube-etcd-10-0-0-4-key.pem, kube-etcd-10-0-0-4.pem; changed: etcd-snapshotter.json) ×3",
				"worker create etcd-rolling-snapshots (container missing) ×1",
				"worker create kube-proxy (container missing) ×1",
				"worker create kubelet (container missing) ×1",
				"worker create nginx-proxy (container missing) ×1",
				"worker create service-sidekick (container missing) ×1",
				"worker restart etcd-rolling-snapshots (reads changed files) ×3",
				"PKI issues 1",
				"blocked: ReconciliationFailed",
			},
		},
		{
			// The dead member goes first, and the new one joins those left.
			name: "a dead member's node replaced by a new etcd node",
			build: func(t *testing.T) *scenario {
				sc := etcdAdded(t, "10.0.0.3")
				sc.c = parse(t, strings.Replace(etcdAddedYML, "  - {address: 10.0.0.3, user: u, role: [etcd, controlplane, worker]}\n", "", 1))
				return sc
			},
			asked: func(a *Asked) { a.AllowRemovals = true },
			want: []string{
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.4:2379, ---etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379) ×1",
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379,https://10.0.0.4:2379, ---etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379,https://10.0.0.3:2379) ×1",
				"etcd add-member etcd-member (new etcd node: joins as a learner, votes once it has caught up) ×1",
				"etcd create etcd (container missing) ×1",
				"etcd remove-member etcd-member (member etcd-10.0.0.3 https://10.0.0.3:2380 is of no etcd node of cluster.yml (unhealthy: context deadline exceeded)) ×1",
				"files write-files files (missing: etcd-snapshotter.json, kube-ca.pem, kube-etcd-10-0-0-4-key.pem and 7 more) ×1",
				"files write-files files (missing: kube-etcd-10-0-0-4-key.pem, kube-etcd-10-0-0-4.pem; changed: etcd-snapshotter.json, kube-apiserver-key.pem, kube-apiserver.pem) ×2",
				"removed-nodes remove etcd (node removed from cluster.yml) ×1",
				"removed-nodes remove etcd-rolling-snapshots (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-apiserver (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-controller-manager (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-proxy (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-scheduler (node removed from cluster.yml) ×1",
				"removed-nodes remove kubelet (node removed from cluster.yml) ×1",
				"removed-nodes remove service-sidekick (node removed from cluster.yml) ×1",
				"worker create etcd-rolling-snapshots (container missing) ×1",
				"worker create kube-proxy (container missing) ×1",
				"worker create kubelet (container missing) ×1",
				"worker create nginx-proxy (container missing) ×1",
				"worker create service-sidekick (container missing) ×1",
				"worker restart etcd-rolling-snapshots (reads changed files) ×2",
				"PKI issues 3",
			},
		},
		{
			name:  "an etcd node removed",
			build: func(t *testing.T) *scenario { return removed(t, scenarioYML, "", "10.0.0.3") },
			asked: func(a *Asked) { a.AllowRemovals = true },
			want: []string{
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379, ---etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379) ×1",
				"controlplane replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379, ---etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379,https://10.0.0.3:2379) ×1",
				"etcd remove-member etcd-member (member etcd-10.0.0.3 https://10.0.0.3:2380 is of no etcd node of cluster.yml) ×1",
				"files write-files files (changed: etcd-snapshotter.json, kube-apiserver-key.pem, kube-apiserver.pem) ×2",
				"removed-nodes remove etcd (node removed from cluster.yml) ×1",
				"removed-nodes remove etcd-rolling-snapshots (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-apiserver (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-controller-manager (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-proxy (node removed from cluster.yml) ×1",
				"removed-nodes remove kube-scheduler (node removed from cluster.yml) ×1",
				"removed-nodes remove kubelet (node removed from cluster.yml) ×1",
				"removed-nodes remove service-sidekick (node removed from cluster.yml) ×1",
				"worker restart etcd-rolling-snapshots (reads changed files) ×2",
				"PKI issues 2",
			},
		},
		{
			name:  "a removed node that does not answer",
			build: func(t *testing.T) *scenario { return removed(t, splitYML, "", "10.0.1.5").down("10.0.1.5") },
			want: []string{
				"files write-files files (changed: etcd-snapshotter.json) ×1",
				"worker restart etcd-rolling-snapshots (reads changed files) ×1",
				"removed, not reached: 10.0.1.5",
			},
		},

		// The Kubernetes Nodes.
		{
			name:  "the Nodes as rigger left them",
			build: func(t *testing.T) *scenario { return converged(t).kubernetes(nil) },
			want:  nil,
		},
		{
			name: "a label added in cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil)
				sc.c.Nodes[1].Labels = map[string]string{"tier": "web"}
				return sc
			},
			want: []string{
				"Node 10.0.0.2: sync",
			},
		},
		{
			name: "a taint added in cluster.yml",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil)
				sc.c.Nodes[0].Taints = []spec.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"}}
				return sc
			},
			want: []string{
				"Node 10.0.0.1: sync",
			},
		},
		{
			name: "a Node not Ready",
			build: func(t *testing.T) *scenario {
				return converged(t).kubernetes([]string{"10.0.0.3"})
			},
			want: []string{
				"Node 10.0.0.3: repair",
			},
		},
		{
			name: "a Node not Ready whose machine does not answer",
			build: func(t *testing.T) *scenario {
				return converged(t).down("10.0.0.3").kubernetes([]string{"10.0.0.3"})
			},
			want: []string{
				"unreachable: 10.0.0.3",
				"worker batch 0",
			},
		},
		{
			name: "a Node an earlier apply left cordoned",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil)
				n := sc.node("10.0.0.2")
				n.Spec.Unschedulable = true
				n.Annotations[kubenode.AnnotationCordoned] = "true"
				return sc.relink()
			},
			want: []string{
				"Node 10.0.0.2: uncordon",
			},
		},
		{
			name: "a Node someone else cordoned",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil)
				sc.node("10.0.0.2").Spec.Unschedulable = true
				return sc.relink()
			},
			want: nil,
		},
		{
			name: "a Node deleted by hand",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil)
				sc.o.Kubernetes.Nodes = slices.DeleteFunc(sc.o.Kubernetes.Nodes, func(n corev1.Node) bool { return n.Name == "10.0.0.3" })
				return sc.relink()
			},
			want: []string{
				"worker restart kubelet (its Kubernetes Node is missing (deleted?): the kubelet registers it again when it starts) ×1",
			},
		},
		{
			name:  "a stale Node, stale_nodes: report",
			build: func(t *testing.T) *scenario { return converged(t).kubernetes(nil, staleNode("ghost", "10.0.0.9")) },
			want:  nil,
		},
		{
			name: "a stale Node, stale_nodes: delete",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil, staleNode("ghost", "10.0.0.9"))
				sc.c.Rigger.StaleNodes = spec.StaleNodesDelete
				return sc
			},
			want: []string{
				"Node ghost: delete",
			},
		},
		{
			name: "a duplicate Node of a machine, stale_nodes: delete",
			build: func(t *testing.T) *scenario {
				sc := converged(t).kubernetes(nil, staleNode("old-name", "10.0.0.1"))
				sc.c.Rigger.StaleNodes = spec.StaleNodesDelete
				return sc
			},
			want: []string{
				"Node old-name: delete",
			},
		},
		{
			name: "the API server does not answer",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.o.Kubernetes = &observe.Kubernetes{Err: fmt.Errorf("connection refused")}
				return sc
			},
			want: nil,
		},

		// Refusals: what cluster.yml asks that the nodes cannot go to.
		{
			name: "a Kubernetes downgrade",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.c = parse(t, scenarioYML+"kubernetes_version: v1.31.14-rancher1-1\n")
				return sc
			},
			wantErr: "older", wantReason: stall.InvalidSpec,
		},
		{
			name: "a minor skipped",
			build: func(t *testing.T) *scenario {
				sc := convergedYML(t, scenarioYML+"kubernetes_version: v1.31.14-rancher1-1\n")
				sc.c = parse(t, scenarioYML+"kubernetes_version: v1.33.13-rigger1\ningress: {provider: none}\n")
				return sc
			},
			wantErr: "1.33", wantReason: stall.InvalidSpec,
		},
		{
			name: "a Kubernetes upgrade by one minor",
			build: func(t *testing.T) *scenario {
				sc := convergedYML(t, scenarioYML+"kubernetes_version: v1.31.14-rancher1-1\n")
				sc.c = parse(t, scenarioYML)
				return sc
			},
			want: []string{
				"apiserver replace kube-apiserver (image changed rke-extended-life/hyperkube:v1.31.14-rancher1 → rke-extended-life/hyperkube:v1.32.13-rancher1) ×3",
				"controlplane replace kube-controller-manager (image changed rke-extended-life/hyperkube:v1.31.14-rancher1 → rke-extended-life/hyperkube:v1.32.13-rancher1) ×3",
				"controlplane replace kube-scheduler (image changed rke-extended-life/hyperkube:v1.31.14-rancher1 → rke-extended-life/hyperkube:v1.32.13-rancher1) ×3",
				"etcd replace etcd (image changed rancher/mirrored-coreos-etcd:v3.5.15 → rancher/mirrored-coreos-etcd:v3.5.16) ×3",
				"files write-files files (changed: etcd-snapshotter.json) ×3",
				"worker replace kube-proxy (image changed rke-extended-life/hyperkube:v1.31.14-rancher1 → rke-extended-life/hyperkube:v1.32.13-rancher1) ×3",
				"worker replace kubelet (image changed rke-extended-life/hyperkube:v1.31.14-rancher1 → rke-extended-life/hyperkube:v1.32.13-rancher1) ×3",
				"worker restart etcd-rolling-snapshots (reads changed files) ×3",
			},
		},
		{
			name: "a Docker newer than RKE's list",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.o.Nodes["10.0.0.2"].DockerVersion = "28.5.1"
				return sc
			},
			wantErr: "node 10.0.0.2 runs Docker 28.5.1", wantReason: stall.InvalidSpec,
		},
		{
			name: "a Docker newer than RKE's list, --ignore-docker-version",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.o.Nodes["10.0.0.2"].DockerVersion = "28.5.1"
				return sc
			},
			asked: func(a *Asked) { a.IgnoreDockerVersion = true },
			want:  nil,
		},

		// What drifted on the nodes.
		{
			name: "a component that exited",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				kp := sc.o.Nodes["10.0.0.1"].Containers[desired.KubeProxy]
				kp.State = "exited"
				sc.o.Nodes["10.0.0.1"].Containers[desired.KubeProxy] = kp
				return sc
			},
			want: []string{
				"worker restart kube-proxy (container exited) ×1",
			},
		},
		{
			name: "a file changed on a node by hand",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.o.Nodes["10.0.0.3"].Files[pki.KubeconfigPath(pki.KubeSchedulerCertName)] = observe.FileHash([]byte("edited"))
				return sc
			},
			want: []string{
				"controlplane restart kube-scheduler (reads changed files) ×1",
				"files write-files files (changed: kubecfg-kube-scheduler.yaml) ×1",
			},
		},
		{
			name: "a component missing",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				delete(sc.o.Nodes["10.0.0.2"].Containers, desired.KubeScheduler)
				return sc
			},
			want: []string{
				"controlplane create kube-scheduler (container missing) ×1",
			},
		},
		{
			name: "an extra etcd member of no node",
			build: func(t *testing.T) *scenario {
				sc := converged(t)
				sc.o.Etcd.Members = append(sc.o.Etcd.Members, etcdmember.Member{ID: 9, Name: "etcd-10.0.0.9",
					PeerURLs: []string{desired.EtcdPeerURL("10.0.0.9")}, Error: "connection refused"})
				return sc
			},
			want: []string{
				"etcd remove-member etcd-member (member etcd-10.0.0.9 https://10.0.0.9:2380 is of no etcd node of cluster.yml (unhealthy: connection refused)) ×1",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := tc.build(t)
			if tc.asked != nil {
				tc.asked(&sc.asked)
			}
			pl, err := sc.compute()
			if tc.wantErr != "" {
				reason, _ := stall.Classify(err)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || reason != tc.wantReason {
					t.Fatalf("Compute: %v (%s), want an error with %q (%s)", err, reason, tc.wantErr, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *dump {
				fmt.Printf("%s:\n", tc.name)
				for _, l := range summary(pl) {
					fmt.Printf("\t%q,\n", l)
				}
			}
			if diff := cmp.Diff(tc.want, summary(pl)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 && pl.Changes() {
				t.Errorf("a plan of no changes changes something")
			}
		})
	}
}

// removed is the scenario of the cluster of yml converged, then cluster.yml
// without the nodes of addrs and with the lines extra.
func removed(t *testing.T, yml, extra string, addrs ...string) *scenario {
	sc := convergedYML(t, yml)
	var keep []string
	for _, l := range strings.SplitAfter(yml, "\n") {
		if !slices.ContainsFunc(addrs, func(a string) bool { return strings.Contains(l, "address: "+a+",") }) {
			keep = append(keep, l)
		}
	}
	sc.c = parse(t, strings.Join(keep, "")+extra)
	return sc
}

// etcdAddedYML is scenarioYML with a fourth node, an etcd node.
const etcdAddedYML = `cluster_name: scenario
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.3, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.4, user: u, role: [etcd]}
services:
  kube-api:
    secrets_encryption_config: {enabled: true}
`

// etcdAdded is the converged three-node cluster whose cluster.yml adds an
// etcd node, 10.0.0.4 (reachable, with nothing on it yet), while the
// members of down do not answer.
func etcdAdded(t *testing.T, down ...string) *scenario {
	sc := converged(t)
	sc.c = parse(t, etcdAddedYML)
	sc.o.Nodes["10.0.0.4"] = &observe.Node{Address: "10.0.0.4", Reachable: true, FilesRead: true, DockerVersion: scenarioDocker}
	for i, m := range sc.o.Etcd.Members {
		for _, a := range down {
			if strings.Contains(m.PeerURLs[0], "//"+a+":") {
				sc.o.Etcd.Members[i].Healthy, sc.o.Etcd.Members[i].Error = false, "context deadline exceeded"
			}
		}
	}
	return sc
}

// fresh is the scenario of a new cluster: no state, nothing on the nodes.
func fresh(t *testing.T) *scenario {
	sc := converged(t)
	sc.st = &State{}
	for _, n := range sc.o.Nodes {
		n.Files, n.Containers = nil, nil
	}
	sc.o.Etcd = nil
	return sc
}

// created are the steps, as summary gives them, of the creation of every
// component of the scenario's cluster on n nodes, then lines.
func created(n int, lines ...string) []string {
	out := []string{"files write-files files (missing: admission.yaml, audit-policy.yaml, etcd-snapshotter.json and 31 more) ×%d"}
	for _, c := range []string{"controlplane create kube-apiserver", "controlplane create kube-controller-manager", "controlplane create kube-scheduler",
		"etcd create etcd", "worker create etcd-rolling-snapshots", "worker create kube-proxy", "worker create kubelet", "worker create service-sidekick"} {
		out = append(out, c+" (container missing) ×%d")
	}
	for i := range out {
		out[i] = fmt.Sprintf(out[i], n)
	}
	slices.Sort(out)
	return append(out, lines...)
}

// workersRemoved are the steps, as summary gives them, of the removal of
// n workers of splitYML (their containers, and the snapshots' file of the
// etcd node, which names the nodes), then lines.
func workersRemoved(n int, lines ...string) []string {
	out := []string{"files write-files files (changed: etcd-snapshotter.json) ×1", "worker restart etcd-rolling-snapshots (reads changed files) ×1"}
	for _, c := range []string{"kube-proxy", "kubelet", "nginx-proxy", "service-sidekick"} {
		out = append(out, fmt.Sprintf("removed-nodes remove %s (node removed from cluster.yml) ×%d", c, n))
	}
	slices.Sort(out)
	return append(out, lines...)
}

// staleNode is a Node no machine owns, labelled with address.
func staleNode(name, address string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{desired.NodeAddressLabel: desired.NodeAddressLabelValue(address)}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
}

// TestAskedAfter: the command line's requests are asked of the first plan
// of an apply; the plans after the one that started them go on from the
// records and do not start them again.
func TestAskedAfter(t *testing.T) {
	ca := &pki.Rotation{CA: true}
	both := Asked{Rotate: ca, RotateKey: true}
	sc := converged(t)
	sc.asked = both
	rotating := sc.plan()
	if got := both.After(rotating); got.Rotate != nil || got.RotateKey {
		t.Errorf("after a plan that started both rotations: %+v, want nothing asked", got)
	}
	sc.asked = Asked{}
	if got := both.After(sc.plan()); got.Rotate != ca || !got.RotateKey {
		t.Errorf("after a plan that started neither: %+v, want both still asked", got)
	}
}
