package certrotate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

func TestFromSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   *spec.RotateCertificates
		want *pki.Rotation
	}{
		{"none", nil, nil},
		{"every service", &spec.RotateCertificates{}, &pki.Rotation{}},
		{"services sorted and unique", &spec.RotateCertificates{Services: []string{"kubelet", "etcd", "kubelet"}},
			&pki.Rotation{Services: []string{"etcd", "kubelet"}}},
		{"the CA: services ignored, as RKE ignores them", &spec.RotateCertificates{CACertificates: true, Services: []string{"etcd"}},
			&pki.Rotation{CA: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, FromSpec(tc.rc)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	all := &pki.Rotation{}
	etcd := &pki.Rotation{Services: []string{"etcd"}}
	ca := &pki.Rotation{CA: true}
	active := &Active{Rotation: *etcd, From: FromClusterYML, Names: []string{"kube-etcd-10-0-0-1"}}
	for _, tc := range []struct {
		name     string
		rec      Record
		yml, cli *pki.Rotation
		want     Decision
	}{
		{"nothing asked, nothing recorded", Record{}, nil, nil, Decision{}},
		{"cluster.yml asks the first time", Record{}, all, nil, Decision{Issue: all, From: FromClusterYML}},
		{"cluster.yml asks what was done: nothing more", Record{Requested: all}, &pki.Rotation{}, nil, Decision{}},
		{"cluster.yml asks something else", Record{Requested: all}, etcd, nil, Decision{Issue: etcd, From: FromClusterYML}},
		{"cluster.yml no longer asks: the record goes", Record{Requested: all}, nil, nil, Decision{ClearRequested: true}},
		{"the command line always rotates", Record{Requested: all}, all, ca, Decision{Issue: ca, From: FromCommandLine}},
		{"a rotation under way goes on", Record{Requested: etcd, Active: active}, etcd, nil, Decision{Resume: active}},
		{"a new request waits for the one under way", Record{Requested: etcd, Active: active}, all, nil,
			Decision{Resume: active, Ignored: all}},
		{"so does the command line's", Record{Active: active}, nil, ca, Decision{Resume: active, Ignored: ca}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Decide(tc.rec, tc.yml, tc.cli)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestStartedAdvanced(t *testing.T) {
	now := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	etcd := &pki.Rotation{Services: []string{"etcd"}}

	rec := Decision{Issue: etcd, From: FromClusterYML}.Started(Record{}, []string{"kube-etcd-1"}, now)
	if !Same(rec.Requested, etcd) || rec.Active == nil || rec.Active.Stage != "" {
		t.Fatalf("started leaf rotation: %+v", rec)
	}
	rec, done := Advanced(rec)
	if !done || rec.Active != nil || !Same(rec.Requested, etcd) {
		t.Errorf("a leaf rotation is done after one apply, its request kept: %+v done=%v", rec, done)
	}

	cli := Decision{Issue: &pki.Rotation{CA: true}, From: FromCommandLine}.Started(Record{Requested: etcd}, nil, now)
	if !Same(cli.Requested, etcd) {
		t.Error("a command line rotation replaced the record of cluster.yml's")
	}
	var stages []pki.CAStage
	for !done || len(stages) == 0 {
		stages = append(stages, cli.Active.Stage)
		cli, done = Advanced(cli)
		if len(stages) > 5 {
			t.Fatal("the CA rotation never ends")
		}
	}
	if diff := cmp.Diff(pki.CAStages, stages); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
}

func TestLoadSave(t *testing.T) {
	dir := t.TempDir()
	if r, err := Load(dir); err != nil || r.Active != nil || r.Requested != nil {
		t.Fatalf("Load of an empty directory: %+v, %v", r, err)
	}
	want := Record{Requested: &pki.Rotation{CA: true}, Active: &Active{Rotation: pki.Rotation{CA: true}, From: FromClusterYML,
		Stage: pki.StageIssue, IssuedAt: time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)}}
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Join(dir, File)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record file mode: %v %v", fi.Mode(), err)
	}
	for name, content := range map[string]string{
		"damaged":       "{",
		"unknown stage": `{"active": {"rotation": {"ca": true}, "stage": "halfway"}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, File), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil {
			t.Errorf("%s: Load accepted %q", name, content)
		}
	}
}
