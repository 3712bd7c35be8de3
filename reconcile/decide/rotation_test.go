package decide

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
)

// rotationCase is a one-node cluster whose state directory is dir, and
// the rotation the command line asks (nil: none).
type rotationCase struct {
	c   *spec.Cluster
	dir string
	cli *pki.Rotation
}

// rotationCluster is the one-node cluster with cluster.yml's
// rotate_certificates rc, whose PKI is in the state directory dir (made
// when it has none).
func rotationCluster(t *testing.T, dir string, rc *spec.RotateCertificates, cli *pki.Rotation) *rotationCase {
	t.Helper()
	c := &spec.Cluster{ClusterName: "c", RotateCertificates: rc, Nodes: []spec.Node{{Address: "10.0.0.1", User: "u",
		Role: []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}}}}
	spec.SetDefaults(c)
	if _, err := pki.Load(dir); err != nil {
		set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.Save(dir, set); err != nil {
			t.Fatal(err)
		}
	}
	return &rotationCase{c: c, dir: dir, cli: cli}
}

// plannedPKI is the PKI side of a plan of s, from its state directory
// (LoadState), the node holding caFile as its kube-ca.pem; no node is
// reached.
func plannedPKI(s *rotationCase, caFile []byte) (*Planned, error) {
	caPath, _ := pki.NodePath(pki.CACertName)
	o := &observe.Cluster{Nodes: map[string]*observe.Node{"10.0.0.1": {Address: "10.0.0.1", Reachable: true, FilesRead: true,
		Files: map[string]string{caPath: observe.FileHash(caFile)}}}}
	st, err := LoadState(s.dir)
	if err != nil {
		return nil, err
	}
	rp, err := Credentials(Input{Spec: s.c, StateDir: s.dir, State: st, Observed: o, Asked: Asked{Rotate: s.cli}, Now: time.Now()})
	if err != nil {
		return nil, err
	}
	return &Planned{Plan: &plan.Plan{}, PKI: rp.Set, PKIChanges: rp.Changes, PKISource: rp.Source, pki: rp, Staged: operations(rp, nil)}, nil
}

// started does what an apply does before the nodes change; it returns
// the rotation record as saved.
func started(t *testing.T, s *rotationCase, pl *Planned) certrotate.Record {
	t.Helper()
	if pl.pki.Save {
		if err := pki.Save(s.dir, pl.pki.State); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := pl.rotation().Start(s.dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func mustPlanned(t *testing.T, s *rotationCase, caFile []byte) *Planned {
	t.Helper()
	pl, err := plannedPKI(s, caFile)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func caOf(t *testing.T, dir string) []byte {
	t.Helper()
	set, err := pki.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return set.Certs[pki.CACertName].CertPEM
}

// TestCARotationResumes: a CA rotation stopped at any point before it is
// done resumes with the certificates it issued, whatever the node trusts
// of the two generations, and the state directory's PKI stays the old one
// (the nodes' until the end) until the last stage is done; the
// service-account key never changes.
func TestCARotationResumes(t *testing.T) {
	dir := t.TempDir()
	s := rotationCluster(t, dir, nil, &pki.Rotation{CA: true})
	oldCA := caOf(t, dir)
	oldSet, _ := pki.Load(dir)

	pl := mustPlanned(t, s, oldCA)
	if r := pl.Rotation(); r == nil || !r.CA || r.Stage != pki.StageTrust || r.Resumed {
		t.Fatalf("rotation: %+v, want a CA rotation starting at %s", r, pki.StageTrust)
	}
	trust := pl.PKI.Trusted(pki.CACertName)
	if !bytes.HasPrefix(trust, oldCA) || bytes.Equal(trust, oldCA) {
		t.Fatal("the first stage's kube-ca.pem is not the old CA and another")
	}
	started(t, s, pl)
	if !bytes.Equal(caOf(t, dir), oldCA) {
		t.Error("the state directory's CA changed before any node has the new one")
	}
	newCA := caOf(t, filepath.Join(dir, certrotate.NewDir))
	if !bytes.Equal(caOf(t, filepath.Join(dir, certrotate.OldDir)), oldCA) || bytes.Equal(newCA, oldCA) {
		t.Fatal("the two generations are not kept beside each other")
	}

	// rigger stops; serve (no command line rotation) plans next.
	serve := rotationCluster(t, dir, nil, nil)
	for name, onNode := range map[string][]byte{"nothing written yet": oldCA, "first stage written": trust} {
		pl := mustPlanned(t, serve, onNode)
		r := pl.Rotation()
		if r == nil || !r.Resumed || r.Stage != pki.StageTrust {
			t.Fatalf("%s: rotation %+v, want the one under way resumed", name, r)
		}
		if !bytes.Equal(pl.PKI.Trusted(pki.CACertName), trust) {
			t.Errorf("%s: a CA other than the one issued", name)
		}
	}
	if _, err := plannedPKI(serve, []byte("another cluster's CA")); err == nil {
		t.Error("a node trusting a CA of neither generation was accepted")
	}

	// The stages done but the last, which stops after its files were
	// written.
	rec, _ := certrotate.Load(dir)
	rec, _ = certrotate.Advanced(rec)
	rec, _ = certrotate.Advanced(rec)
	if err := certrotate.Save(dir, rec); err != nil {
		t.Fatal(err)
	}
	pl = mustPlanned(t, serve, newCA)
	if r := pl.Rotation(); r == nil || r.Stage != pki.StageFinish || !bytes.Equal(pl.PKI.Trusted(pki.CACertName), newCA) {
		t.Fatalf("last stage: %+v", r)
	}
	if err := pl.rotation().Finish(context.Background(), certrotate.End{Dir: serve.dir, Record: started(t, serve, pl)}); err != nil {
		t.Fatal(err)
	}
	if next := pl.Next(); next != "" {
		t.Errorf("the last stage has a next one: %s", next)
	}
	if !bytes.Equal(caOf(t, dir), newCA) {
		t.Error("the state directory's CA is not the new one once the rotation is done")
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-rotation")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the generations are left in the state directory: %v", err)
	}
	done, _ := pki.Load(dir)
	if !bytes.Equal(done.Certs[pki.ServiceAccountTokenKeyName].KeyPEM, oldSet.Certs[pki.ServiceAccountTokenKeyName].KeyPEM) {
		t.Error("the service-account key changed")
	}
	if pl := mustPlanned(t, rotationCluster(t, dir, nil, nil), newCA); pl.Rotation() != nil || len(pl.PKIChanges) > 0 {
		t.Errorf("after the rotation: %+v, changes %v", pl.Rotation(), pl.PKIChanges)
	}
}

// TestLeafRotationOnce: cluster.yml's request rotates once, resumes
// without reissuing after a stop, stays done while cluster.yml asks the
// same, and rotates again once removed and added back.
func TestLeafRotationOnce(t *testing.T) {
	dir := t.TempDir()
	kubelet := &spec.RotateCertificates{Services: []string{"kubelet"}}
	s := rotationCluster(t, dir, kubelet, nil)
	ca := caOf(t, dir)
	before, _ := pki.Load(dir)

	pl := mustPlanned(t, s, ca)
	if r := pl.Rotation(); r == nil || r.From != certrotate.FromClusterYML || len(r.Names) != 1 || r.Names[0] != pki.KubeNodeCertName {
		t.Fatalf("rotation: %+v, want kube-node, from cluster.yml", r)
	}
	started(t, s, pl)
	issued, _ := pki.Load(dir)
	if bytes.Equal(issued.Certs[pki.KubeNodeCertName].CertPEM, before.Certs[pki.KubeNodeCertName].CertPEM) ||
		!bytes.Equal(issued.Certs[pki.KubeAPICertName].CertPEM, before.Certs[pki.KubeAPICertName].CertPEM) {
		t.Fatal("not kube-node alone reissued and saved before the nodes change")
	}

	// Stopped before done: resumed, nothing issued again.
	pl = mustPlanned(t, rotationCluster(t, dir, kubelet, nil), ca)
	if r := pl.Rotation(); r == nil || !r.Resumed || len(pl.PKIChanges) > 0 ||
		!bytes.Equal(pl.PKI.Certs[pki.KubeNodeCertName].CertPEM, issued.Certs[pki.KubeNodeCertName].CertPEM) {
		t.Fatalf("resumed: %+v, changes %v", r, pl.PKIChanges)
	}
	if err := pl.rotation().Finish(context.Background(), certrotate.End{Dir: s.dir, Record: pl.rotation().Record}); err != nil {
		t.Fatal(err)
	}
	if pl := mustPlanned(t, rotationCluster(t, dir, kubelet, nil), ca); pl.Rotation() != nil || pl.RotationRecordCleared() {
		t.Fatalf("same request again: rotation %+v", pl.Rotation())
	}

	// Removed: the record goes; added back: a new rotation.
	pl = mustPlanned(t, rotationCluster(t, dir, nil, nil), ca)
	if !pl.RotationRecordCleared() || !pl.Changes() {
		t.Fatal("request removed: the record is not cleared")
	}
	started(t, s, pl)
	if pl := mustPlanned(t, rotationCluster(t, dir, kubelet, nil), ca); pl.Rotation() == nil || pl.Rotation().Resumed {
		t.Fatal("request added back: no new rotation")
	}
}

// TestPlanReport: the JSON of a plan (rigger plan -o json, --out) says
// what the text plan says besides the steps, here a CA rotation under way
// and where the PKI comes from, and apply --plan still reads it.
func TestPlanReport(t *testing.T) {
	dir := t.TempDir()
	s := rotationCluster(t, dir, nil, &pki.Rotation{CA: true})
	pl := mustPlanned(t, s, caOf(t, dir))
	started(t, s, pl)
	pl = mustPlanned(t, rotationCluster(t, dir, nil, nil), caOf(t, dir))

	b, err := json.Marshal(pl.Report())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Steps        []plan.Step `json:"steps"`
		Changes      bool        `json:"changes"`
		Certificates struct {
			Source string `json:"source"`
			From   string `json:"from"`
		} `json:"certificates"`
		Rotation *struct {
			CA           bool     `json:"ca"`
			From         string   `json:"from"`
			Resumed      bool     `json:"resumed"`
			Stage        string   `json:"stage"`
			Certificates []string `json:"certificates"`
		} `json:"certificate_rotation"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	r := got.Rotation
	if r == nil || !r.CA || r.From != certrotate.FromCommandLine || !r.Resumed || r.Stage != string(pki.StageTrust) ||
		!slices.Contains(r.Certificates, pki.CACertName) {
		t.Errorf("certificate_rotation %+v, want the CA rotation from the command line, resumed at %s:\n%s", r, pki.StageTrust, b)
	}
	if !got.Changes || got.Certificates.Source != string(pkisource.StateDir) || got.Certificates.From != dir {
		t.Errorf("changes %v, certificates %+v:\n%s", got.Changes, got.Certificates, b)
	}
	if _, err := plan.ReadSaved(bytes.NewReader(b)); err != nil {
		t.Errorf("apply --plan cannot read the report: %v", err)
	}
}
