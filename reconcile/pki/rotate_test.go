package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRotationCovers(t *testing.T) {
	names := []string{
		CACertName, RequestHeaderCACertName, ServiceAccountTokenKeyName,
		KubeAPICertName, APIProxyClientCertName, KubeAdminCertName, KubeControllerCertName,
		KubeSchedulerCertName, KubeProxyCertName, KubeNodeCertName, "kube-etcd-10-0-0-1", "kube-etcd-10-0-0-2",
	}
	for _, tc := range []struct {
		name string
		r    Rotation
		want []string
	}{
		{"all services: every leaf, no CA, no service-account key", Rotation{}, []string{
			KubeAPICertName, APIProxyClientCertName, KubeAdminCertName, KubeControllerCertName,
			KubeSchedulerCertName, KubeProxyCertName, KubeNodeCertName, "kube-etcd-10-0-0-1", "kube-etcd-10-0-0-2",
		}},
		{"etcd: every etcd node's", Rotation{Services: []string{"etcd"}}, []string{"kube-etcd-10-0-0-1", "kube-etcd-10-0-0-2"}},
		{"kubelet is kube-node", Rotation{Services: []string{"kubelet"}}, []string{KubeNodeCertName}},
		{"two services", Rotation{Services: []string{"kube-apiserver", "kube-scheduler"}}, []string{KubeAPICertName, KubeSchedulerCertName}},
		{"CA: everything but the service-account key, services ignored", Rotation{CA: true, Services: []string{"etcd"}},
			slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == ServiceAccountTokenKeyName })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, n := range names {
				if tc.r.Covers(n) {
					got = append(got, n)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("covered (-want +got):\n%s", diff)
			}
		})
	}
	if err := (Rotation{Services: []string{"kubelet", "nginx-proxy"}}).Check(); err == nil {
		t.Error("Check accepted nginx-proxy")
	}
	if err := (Rotation{Services: RotatableServices()}).Check(); err != nil {
		t.Errorf("Check refused RKE's services: %v", err)
	}
}

// serials are the serial numbers of the set's certificates, by name (the
// service-account key, which has none, by its public key).
func serials(t *testing.T, s *Set) map[string]string {
	t.Helper()
	out := map[string]string{}
	for n, c := range s.Certs {
		if n == ServiceAccountTokenKeyName {
			out[n] = string(c.CertPEM)
			continue
		}
		out[n] = mustCert(t, s, n).SerialNumber.String()
	}
	return out
}

func TestEnsureRotate(t *testing.T) {
	req := threeNodes()
	old, _ := mustEnsure(t, nil, req, t0)
	before := serials(t, old)

	for _, tc := range []struct {
		name string
		r    Rotation
	}{
		{"every service", Rotation{}},
		{"etcd and kubelet", Rotation{Services: []string{"etcd", "kubelet"}}},
		{"the CA", Rotation{CA: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := req
			rr.Rotate = &tc.r
			got, changes := mustEnsure(t, old, rr, t0.Add(time.Hour))
			after := serials(t, got)
			var want, changed []string
			for _, n := range old.Names() {
				if tc.r.Covers(n) {
					want = append(want, n)
				}
				if before[n] != after[n] {
					changed = append(changed, n)
				}
			}
			if diff := cmp.Diff(want, changed); diff != "" {
				t.Errorf("certificates changed (-want +got):\n%s", diff)
			}
			var reissued []string
			for _, c := range changes {
				if c.Action != ActionReissue || c.Reason != ReasonRotation {
					t.Errorf("change %+v, want a reissue with reason %q", c, ReasonRotation)
				}
				reissued = append(reissued, c.Name)
			}
			slices.Sort(reissued)
			if diff := cmp.Diff(want, reissued); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if !bytes.Equal(got.Certs[ServiceAccountTokenKeyName].KeyPEM, old.Certs[ServiceAccountTokenKeyName].KeyPEM) {
				t.Error("the service-account token key changed: tokens issued before would no longer validate")
			}
			if err := verify(got); err != nil {
				t.Errorf("rotated set does not verify: %v", err)
			}
			// Without Rotate the result is kept as it is.
			if _, again := mustEnsure(t, got, req, t0.Add(2*time.Hour)); len(again) != 0 {
				t.Errorf("Ensure without Rotate after a rotation changed %v", again)
			}
		})
	}
}

// pemCerts are the certificates of a PEM bundle.
func pemCerts(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func TestStaged(t *testing.T) {
	req := threeNodes()
	old, _ := mustEnsure(t, nil, req, t0)
	rr := req
	rr.Rotate = &Rotation{CA: true}
	rotated, _ := mustEnsure(t, old, rr, t0)
	oldCA, newCA := mustCert(t, old, CACertName), mustCert(t, rotated, CACertName)

	for _, tc := range []struct {
		stage    CAStage
		leavesOf *Set
		trusted  []*x509.Certificate
	}{
		{StageTrust, old, []*x509.Certificate{oldCA, newCA}},
		{StageIssue, rotated, []*x509.Certificate{newCA, oldCA}},
		{StageFinish, rotated, []*x509.Certificate{newCA}},
	} {
		t.Run(string(tc.stage), func(t *testing.T) {
			s, err := Staged(old, rotated, tc.stage)
			if err != nil {
				t.Fatal(err)
			}
			files, err := NodeFiles(s, req, req.Nodes[0])
			if err != nil {
				t.Fatal(err)
			}
			cp, _ := NodePath(CACertName)
			got := pemCerts(t, files[cp])
			if len(got) != len(tc.trusted) {
				t.Fatalf("%s holds %d certificates, want %d", cp, len(got), len(tc.trusted))
			}
			for i := range got {
				if !got[i].Equal(tc.trusted[i]) {
					t.Errorf("%s certificate %d is not the expected CA", cp, i)
				}
			}
			rh, _ := NodePath(RequestHeaderCACertName)
			if n := len(pemCerts(t, files[rh])); n != len(tc.trusted) {
				t.Errorf("%s holds %d certificates, want %d", rh, n, len(tc.trusted))
			}
			np, _ := NodePath(KubeNodeCertName)
			if !bytes.Equal(files[np], tc.leavesOf.Certs[KubeNodeCertName].CertPEM) {
				t.Errorf("%s is not the expected generation's", np)
			}
			if !bytes.Contains(files[KubeconfigPath(KubeNodeCertName)], []byte(base64.StdEncoding.EncodeToString(files[cp]))) {
				t.Error("the kubelet's kubeconfig does not trust what kube-ca.pem holds")
			}
			// A controlplane node at any stage is a PKI rigger can recover.
			rec, err := FromFiles(files)
			if err != nil {
				t.Fatalf("FromFiles at stage %s: %v", tc.stage, err)
			}
			if !mustCert(t, rec, CACertName).Equal(tc.trusted[0]) {
				t.Error("the recovered CA is not the one the node's leaves chain to")
			}
			cfg, err := s.ClientTLS()
			if err != nil {
				t.Fatal(err)
			}
			for _, ca := range tc.trusted {
				if _, err := ca.Verify(x509.VerifyOptions{Roots: cfg.RootCAs}); err != nil {
					t.Errorf("rigger's client does not trust CA %s: %v", ca.SerialNumber, err)
				}
			}
		})
	}
	if _, err := Staged(old, rotated, "sideways"); err == nil {
		t.Error("Staged accepted an unknown stage")
	}
}
