package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// threeNodes is a cluster of three nodes with every role.
func threeNodes() Request {
	r := Request{ClusterName: "prod", ServiceClusterIPRange: "10.43.0.0/16", ClusterDomain: "cluster.local"}
	for i := 1; i <= 3; i++ {
		a := fmt.Sprintf("10.0.0.%d", i)
		r.Nodes = append(r.Nodes, Node{
			Name: a, Address: a, InternalAddress: fmt.Sprintf("192.168.0.%d", i), Hostname: fmt.Sprintf("node%d", i),
			Etcd: true, ControlPlane: true, Worker: true,
		})
	}
	return r
}

// mustEnsure runs Ensure and fails the test on error.
func mustEnsure(tb testing.TB, s *Set, req Request, now time.Time) (*Set, []Change) {
	tb.Helper()
	out, changes, err := Ensure(s, req, now)
	if err != nil {
		tb.Fatalf("Ensure: %v", err)
	}
	return out, changes
}

func mustCert(tb testing.TB, s *Set, name string) *x509.Certificate {
	tb.Helper()
	c, ok := s.Certs[name]
	if !ok {
		tb.Fatalf("set has no %s", name)
	}
	crt, err := parseCert(c.CertPEM)
	if err != nil {
		tb.Fatalf("parse %s: %v", name, err)
	}
	return crt
}

func TestEnsureFromScratch(t *testing.T) {
	s, changes := mustEnsure(t, nil, threeNodes(), t0)

	wantNames := []string{
		"kube-admin", "kube-apiserver", "kube-apiserver-proxy-client", "kube-apiserver-requestheader-ca",
		"kube-ca", "kube-controller-manager", "kube-etcd-192-168-0-1", "kube-etcd-192-168-0-2", "kube-etcd-192-168-0-3",
		"kube-node", "kube-proxy", "kube-scheduler", "kube-service-account-token",
	}
	if diff := cmp.Diff(wantNames, s.Names()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	var created []string
	for _, c := range changes {
		if c.Action != ActionCreate || c.Reason != "missing" {
			t.Errorf("change %+v, want create: missing", c)
		}
		created = append(created, c.Name)
	}
	if created[0] != CACertName && created[0] != RequestHeaderCACertName {
		t.Errorf("first change is %s, want a CA first", created[0])
	}
	slices.Sort(created)
	if diff := cmp.Diff(wantNames, created); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}

	ca := mustCert(t, s, CACertName)
	if !ca.IsCA || ca.Subject.CommonName != "kube-ca" || !ca.NotAfter.Equal(t0.Add(CAValidity)) {
		t.Errorf("kube-ca: IsCA %v, CN %q, NotAfter %v", ca.IsCA, ca.Subject.CommonName, ca.NotAfter)
	}
	if _, ok := mustCert(t, s, CACertName).PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("kube-ca key is %T, want ECDSA", ca.PublicKey)
	}

	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	tests := []struct {
		name   string
		signer string
		cn     string
		orgs   []string
		usages []x509.ExtKeyUsage
		sans   []string
	}{
		{name: "kube-apiserver", cn: "kube-apiserver", usages: server, sans: []string{
			"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.43.0.1", "127.0.0.1",
			"192.168.0.1", "192.168.0.2", "192.168.0.3",
			"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
			"localhost", "node1", "node2", "node3",
		}},
		{name: "kube-controller-manager", cn: "system:kube-controller-manager", usages: client},
		{name: "kube-scheduler", cn: "system:kube-scheduler", usages: client},
		{name: "kube-proxy", cn: "system:kube-proxy", usages: client},
		{name: "kube-node", cn: "system:node", orgs: []string{"system:nodes"}, usages: client},
		{name: "kube-admin", cn: "kube-admin", orgs: []string{"system:masters"}, usages: client},
		{name: "kube-apiserver-proxy-client", signer: RequestHeaderCACertName, cn: "kube-apiserver-proxy-client", usages: client},
		{name: "kube-etcd-192-168-0-2", cn: "kube-etcd-192-168-0-2", usages: server,
			sans: []string{"10.0.0.2", "127.0.0.1", "192.168.0.2", "localhost", "node2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crt := mustCert(t, s, tt.name)
			signer := tt.signer
			if signer == "" {
				signer = CACertName
			}
			roots := x509.NewCertPool()
			roots.AddCert(mustCert(t, s, signer))
			for _, u := range tt.usages {
				if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
					t.Errorf("verify for usage %v against %s: %v", u, signer, err)
				}
			}
			if signer == RequestHeaderCACertName {
				other := x509.NewCertPool()
				other.AddCert(ca)
				if _, err := crt.Verify(x509.VerifyOptions{Roots: other, CurrentTime: t0, KeyUsages: tt.usages}); err == nil {
					t.Errorf("verifies against kube-ca too; want only %s", signer)
				}
			}
			if diff := cmp.Diff(tt.usages, crt.ExtKeyUsage); diff != "" {
				t.Errorf("ExtKeyUsage (-want +got):\n%s", diff)
			}
			if crt.IsCA {
				t.Error("leaf is a CA")
			}
			if crt.Subject.CommonName != tt.cn || !slices.Equal(crt.Subject.Organization, tt.orgs) {
				t.Errorf("subject %v, want CN=%s O=%v", crt.Subject, tt.cn, tt.orgs)
			}
			if diff := cmp.Diff(tt.sans, certSANs(crt)); diff != "" {
				t.Errorf("SANs (-want +got):\n%s", diff)
			}
			if want := t0.Add(LeafValidity); !crt.NotAfter.Equal(want) {
				t.Errorf("NotAfter %v, want %v", crt.NotAfter, want)
			}
			if _, err := parsePair(s.Certs[tt.name]); err != nil {
				t.Errorf("key pair: %v", err)
			}
		})
	}
	if why := checkKeyPair(s.Certs[ServiceAccountTokenKeyName]); why != "" {
		t.Errorf("service-account key: %s", why)
	}
}

func TestEnsureTwiceIsNoOp(t *testing.T) {
	s1, _ := mustEnsure(t, nil, threeNodes(), t0)
	s2, changes := mustEnsure(t, s1, threeNodes(), t0.Add(24*time.Hour))
	if len(changes) != 0 {
		t.Errorf("second Ensure changed %+v", changes)
	}
	if diff := cmp.Diff(s1, s2); diff != "" {
		t.Errorf("second Ensure changed the set (-first +second):\n%s", diff)
	}
}

func TestEnsureChanges(t *testing.T) {
	base, _ := mustEnsure(t, nil, threeNodes(), t0)
	renewAt := t0.Add(LeafValidity - 20*24*time.Hour)
	expires := t0.Add(LeafValidity).Format(time.DateOnly)

	tests := []struct {
		name string
		edit func(r *Request)
		now  time.Time
		want []Change
	}{
		{
			name: "nothing changed",
			want: nil,
		},
		{
			name: "controlplane node added",
			edit: func(r *Request) {
				r.Nodes = append(r.Nodes, Node{Name: "10.0.0.4", Address: "10.0.0.4", InternalAddress: "10.0.0.4", Hostname: "node4", ControlPlane: true})
			},
			want: []Change{{Name: "kube-apiserver", Action: ActionReissue, Reason: "SANs changed: +10.0.0.4, +node4"}},
		},
		{
			name: "worker node added",
			edit: func(r *Request) {
				r.Nodes = append(r.Nodes, Node{Name: "10.0.0.5", Address: "10.0.0.5", InternalAddress: "10.0.0.5", Hostname: "node5", Worker: true})
			},
		},
		{
			name: "authentication.sans added",
			edit: func(r *Request) { r.SANs = []string{"api.example.com", "203.0.113.7"} },
			want: []Change{{Name: "kube-apiserver", Action: ActionReissue, Reason: "SANs changed: +203.0.113.7, +api.example.com"}},
		},
		{
			name: "controlplane role removed",
			edit: func(r *Request) { r.Nodes[2].ControlPlane = false },
			want: []Change{{Name: "kube-apiserver", Action: ActionReissue, Reason: "SANs changed: -10.0.0.3, -192.168.0.3, -node3"}},
		},
		{
			name: "etcd role removed",
			edit: func(r *Request) { r.Nodes[2].Etcd = false },
			want: []Change{{Name: "kube-etcd-192-168-0-3", Action: ActionRemove, Reason: "no etcd node uses it any more"}},
		},
		{
			name: "etcd node added",
			edit: func(r *Request) {
				r.Nodes = append(r.Nodes, Node{Name: "10.0.0.6", Address: "10.0.0.6", InternalAddress: "10.0.0.6", Hostname: "node6", Etcd: true})
			},
			want: []Change{{Name: "kube-etcd-10-0-0-6", Action: ActionCreate, Reason: "missing"}},
		},
		{
			name: "etcd node's internal address changed",
			edit: func(r *Request) { r.Nodes[0].InternalAddress = "192.168.1.1"; r.Nodes[0].ControlPlane = false },
			want: []Change{
				{Name: "kube-apiserver", Action: ActionReissue, Reason: "SANs changed: -10.0.0.1, -192.168.0.1, -node1"},
				{Name: "kube-etcd-192-168-1-1", Action: ActionCreate, Reason: "missing"},
				{Name: "kube-etcd-192-168-0-1", Action: ActionRemove, Reason: "no etcd node uses it any more"},
			},
		},
		{
			name: "etcd node's hostname changed",
			edit: func(r *Request) { r.Nodes[1].Hostname = "etcd2" },
			want: []Change{
				{Name: "kube-apiserver", Action: ActionReissue, Reason: "SANs changed: +etcd2, -node2"},
				{Name: "kube-etcd-192-168-0-2", Action: ActionReissue, Reason: "SANs changed: +etcd2, -node2"},
			},
		},
		{
			name: "service CIDR changed",
			edit: func(r *Request) { r.ServiceClusterIPRange = "10.96.0.0/12" },
			want: []Change{{Name: "kube-apiserver", Action: ActionReissue, Reason: "SANs changed: +10.96.0.1, -10.43.0.1"}},
		},
		{
			name: "certificates near expiry",
			now:  renewAt,
			want: func() []Change {
				var cs []Change
				for _, n := range []string{
					"kube-admin", "kube-apiserver", "kube-apiserver-proxy-client", "kube-controller-manager",
					"kube-etcd-192-168-0-1", "kube-etcd-192-168-0-2", "kube-etcd-192-168-0-3",
					"kube-node", "kube-proxy", "kube-scheduler",
				} {
					cs = append(cs, Change{Name: n, Action: ActionReissue, Reason: "expires " + expires + ", within 30 days"})
				}
				return cs
			}(),
		},
		{
			name: "certificates expired",
			edit: func(r *Request) { r.Nodes = r.Nodes[:1] },
			now:  t0.Add(LeafValidity + time.Hour),
			want: func() []Change {
				var cs []Change
				for _, n := range []string{
					"kube-admin", "kube-apiserver", "kube-apiserver-proxy-client", "kube-controller-manager",
					"kube-etcd-192-168-0-1", "kube-node", "kube-proxy", "kube-scheduler",
				} {
					r := "expired " + expires
					if n == "kube-apiserver" {
						r = "SANs changed: -10.0.0.2, -10.0.0.3, -192.168.0.2, -192.168.0.3, -node2, -node3; " + r
					}
					cs = append(cs, Change{Name: n, Action: ActionReissue, Reason: r})
				}
				return append(cs,
					Change{Name: "kube-etcd-192-168-0-2", Action: ActionRemove, Reason: "no etcd node uses it any more"},
					Change{Name: "kube-etcd-192-168-0-3", Action: ActionRemove, Reason: "no etcd node uses it any more"})
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := threeNodes()
			if tt.edit != nil {
				tt.edit(&req)
			}
			now := tt.now
			if now.IsZero() {
				now = t0.Add(time.Hour)
			}
			got, changes := mustEnsure(t, base, req, now)
			if diff := cmp.Diff(tt.want, changes); diff != "" {
				t.Fatalf("changes (-want +got):\n%s", diff)
			}
			touched := map[string]bool{}
			for _, c := range changes {
				touched[c.Name] = true
			}
			for name, c := range base.Certs {
				if touched[name] {
					continue
				}
				if diff := cmp.Diff(c, got.Certs[name]); diff != "" {
					t.Errorf("%s changed without a Change (-before +after):\n%s", name, diff)
				}
			}
			for _, c := range changes {
				_, ok := got.Certs[c.Name]
				if ok == (c.Action == ActionRemove) {
					t.Errorf("%s after %s: in set = %v", c.Name, c.Action, ok)
				}
				if c.Action == ActionReissue && string(got.Certs[c.Name].CertPEM) == string(base.Certs[c.Name].CertPEM) {
					t.Errorf("%s reissued but unchanged", c.Name)
				}
			}
			if string(got.Certs[CACertName].CertPEM) != string(base.Certs[CACertName].CertPEM) ||
				string(got.Certs[CACertName].KeyPEM) != string(base.Certs[CACertName].KeyPEM) {
				t.Error("kube-ca changed")
			}
			// The result is stable and verifies.
			again, more := mustEnsure(t, got, req, now)
			if len(more) != 0 || cmp.Diff(got, again) != "" {
				t.Errorf("Ensure on the result changed %+v", more)
			}
			if err := verify(got); err != nil {
				t.Errorf("result does not verify: %v", err)
			}
		})
	}
}

func selfSigned(t *testing.T, cn string, rsaKey bool) Cert {
	t.Helper()
	var pub, priv any
	var keyPEM []byte
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub, priv = k.Public(), k
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		pub, priv = k.Public(), k
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(CAValidity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}
}

func TestEnsureKeepsTheCA(t *testing.T) {
	rkeCA := selfSigned(t, "kube-ca", true)
	fresh, _ := mustEnsure(t, nil, threeNodes(), t0)

	t.Run("CA taken over from RKE (RSA, PKCS#1)", func(t *testing.T) {
		s, changes := mustEnsure(t, &Set{Certs: map[string]Cert{CACertName: rkeCA}}, threeNodes(), t0)
		if diff := cmp.Diff(rkeCA, s.Certs[CACertName]); diff != "" {
			t.Errorf("kube-ca changed (-want +got):\n%s", diff)
		}
		if len(changes) != 12 {
			t.Errorf("%d changes, want 12 (everything but kube-ca)", len(changes))
		}
		if err := verify(s); err != nil {
			t.Errorf("leaves do not verify against the RKE CA: %v", err)
		}
	})

	t.Run("leaves of another CA are reissued", func(t *testing.T) {
		mixed := &Set{Certs: map[string]Cert{}}
		for n, c := range fresh.Certs {
			mixed.Certs[n] = c
		}
		mixed.Certs[CACertName] = rkeCA
		s, changes := mustEnsure(t, mixed, threeNodes(), t0)
		if diff := cmp.Diff(rkeCA, s.Certs[CACertName]); diff != "" {
			t.Errorf("kube-ca changed (-want +got):\n%s", diff)
		}
		for _, c := range changes {
			if c.Action != ActionReissue || c.Reason != "not signed by the current kube-ca" {
				t.Errorf("change %+v, want a reissue because of the CA", c)
			}
		}
		if len(changes) != 9 {
			t.Errorf("%d changes, want the 9 leaves of kube-ca", len(changes))
		}
	})

	t.Run("missing requestheader CA is made, kube-ca kept", func(t *testing.T) {
		s := &Set{Certs: map[string]Cert{}}
		for n, c := range fresh.Certs {
			s.Certs[n] = c
		}
		delete(s.Certs, RequestHeaderCACertName)
		got, changes := mustEnsure(t, s, threeNodes(), t0)
		want := []Change{
			{Name: RequestHeaderCACertName, Action: ActionCreate, Reason: "missing"},
			{Name: APIProxyClientCertName, Action: ActionReissue, Reason: "not signed by the current kube-apiserver-requestheader-ca"},
		}
		if diff := cmp.Diff(want, changes); diff != "" {
			t.Errorf("changes (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(fresh.Certs[CACertName], got.Certs[CACertName]); diff != "" {
			t.Errorf("kube-ca changed:\n%s", diff)
		}
	})

	errTests := []struct {
		name    string
		edit    func(s *Set)
		now     time.Time
		wantErr string
	}{
		{"no kube-ca but other certificates", func(s *Set) { delete(s.Certs, CACertName) }, time.Time{}, "but no kube-ca"},
		{"kube-ca key missing", func(s *Set) {
			c := s.Certs[CACertName]
			c.KeyPEM = nil
			s.Certs[CACertName] = c
		}, time.Time{}, "read kube-ca: no private key"},
		{"kube-ca key of another CA", func(s *Set) {
			c := s.Certs[CACertName]
			c.KeyPEM = rkeCA.KeyPEM
			s.Certs[CACertName] = c
		}, time.Time{}, "read kube-ca: private key does not match the certificate"},
		{"kube-ca expired", func(s *Set) {}, t0.Add(CAValidity), "check kube-ca: it expired on " + t0.Add(CAValidity).Format(time.DateOnly)},
		{"kube-ca garbled", func(s *Set) {
			c := s.Certs[CACertName]
			c.CertPEM = []byte("garbage")
			s.Certs[CACertName] = c
		}, time.Time{}, "read kube-ca: no PEM certificate"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{Certs: map[string]Cert{}}
			for n, c := range fresh.Certs {
				s.Certs[n] = c
			}
			tt.edit(s)
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			out, _, err := Ensure(s, threeNodes(), now)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if out != nil {
				t.Error("a set came back with the error")
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error holds PEM material: %v", err)
			}
		})
	}
}

func TestEnsureRepairsLeaves(t *testing.T) {
	fresh, _ := mustEnsure(t, nil, threeNodes(), t0)
	other, _ := mustEnsure(t, nil, threeNodes(), t0)
	tests := []struct {
		name   string
		target string
		edit   func(c *Cert)
		want   string
	}{
		{"key lost", KubeAdminCertName, func(c *Cert) { c.KeyPEM = nil }, "unreadable: no private key"},
		{"key of another certificate", KubeAdminCertName, func(c *Cert) { c.KeyPEM = fresh.Certs[KubeNodeCertName].KeyPEM }, "unreadable: private key does not match the certificate"},
		{"subject changed", KubeNodeCertName, func(c *Cert) { *c = fresh.Certs[KubeProxyCertName] }, "subject changed: CN=system:node,O=system:nodes, was CN=system:kube-proxy"},
		{"usages changed", "kube-etcd-192-168-0-1", func(c *Cert) { *c = fresh.Certs[KubeAdminCertName] }, "subject changed: CN=kube-etcd-192-168-0-1, was CN=kube-admin,O=system:masters; usages changed: client,server, was client; SANs changed: +10.0.0.1, +127.0.0.1, +192.168.0.1, +localhost, +node1"},
		{"service-account key lost", ServiceAccountTokenKeyName, func(c *Cert) { c.KeyPEM = nil }, "no private key"},
		{"service-account key mismatched", ServiceAccountTokenKeyName, func(c *Cert) { c.CertPEM = other.Certs[ServiceAccountTokenKeyName].CertPEM }, "public key does not match the private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{Certs: map[string]Cert{}}
			for n, c := range fresh.Certs {
				s.Certs[n] = c
			}
			c := s.Certs[tt.target]
			tt.edit(&c)
			s.Certs[tt.target] = c
			_, changes := mustEnsure(t, s, threeNodes(), t0)
			want := []Change{{Name: tt.target, Action: ActionReissue, Reason: tt.want}}
			if diff := cmp.Diff(want, changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnsureServiceAccountKeyFromRKE(t *testing.T) {
	// RKE stores the service-account key as a certificate signed by kube-ca;
	// it must be kept, never replaced by a fresh key (every token would die).
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	s.Certs[ServiceAccountTokenKeyName] = s.Certs[KubeAdminCertName]
	_, changes := mustEnsure(t, s, threeNodes(), t0)
	if len(changes) != 0 {
		t.Errorf("changes %+v, want none", changes)
	}
}

func TestEnsureBadRequest(t *testing.T) {
	req := threeNodes()
	req.ServiceClusterIPRange = "10.43.0.0"
	if _, _, err := Ensure(nil, req, t0); err == nil || !strings.Contains(err.Error(), "parse service cluster IP range") {
		t.Errorf("err = %v, want a service range error", err)
	}
}

func TestEnsureDualStack(t *testing.T) {
	req := threeNodes()
	req.ServiceClusterIPRange = "10.43.0.0/16,fd98::/108"
	s, _ := mustEnsure(t, nil, req, t0)
	sans := certSANs(mustCert(t, s, KubeAPICertName))
	for _, want := range []string{"10.43.0.1", "fd98::1"} {
		if !slices.Contains(sans, want) {
			t.Errorf("API server SANs %v lack %s", sans, want)
		}
	}
}

func TestExpiry(t *testing.T) {
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	got := Expiry(s)
	if _, ok := got[ServiceAccountTokenKeyName]; ok {
		t.Error("the service-account key has an expiry")
	}
	if len(got) != len(s.Certs)-1 {
		t.Errorf("%d expiry dates for %d certificates", len(got), len(s.Certs)-1)
	}
	for name, when := range got {
		want := t0.Add(LeafValidity)
		if name == CACertName || name == RequestHeaderCACertName {
			want = t0.Add(CAValidity)
		}
		if !when.Equal(want) {
			t.Errorf("%s expires %v, want %v", name, when, want)
		}
	}
	if n := len(Expiry(nil)); n != 0 {
		t.Errorf("Expiry(nil) has %d entries", n)
	}
}

func TestEtcdCertName(t *testing.T) {
	tests := []struct {
		address, internal, want string
	}{
		{"10.0.0.1", "", "kube-etcd-10-0-0-1"},
		{"10.0.0.1", "10.0.0.1", "kube-etcd-10-0-0-1"},
		{"203.0.113.1", "10.0.0.1", "kube-etcd-10-0-0-1"},
		{"fd00::1", "", "kube-etcd-fd00--1"},
		{"Etcd.A.test", "", "kube-etcd-etcd-a-test"},
	}
	for _, tt := range tests {
		if got := EtcdCertName(Node{Address: tt.address, InternalAddress: tt.internal}); got != tt.want {
			t.Errorf("EtcdCertName(%s, %s) = %q, want %q", tt.address, tt.internal, got, tt.want)
		}
	}
	req := threeNodes()
	req.Nodes[1].InternalAddress = req.Nodes[0].InternalAddress
	if _, _, err := Ensure(nil, req, t0); err == nil || !strings.Contains(err.Error(), "named kube-etcd-192-168-0-1 too") {
		t.Errorf("two etcd nodes with one internal address: err = %v", err)
	}
}

func BenchmarkEnsureFromScratch(b *testing.B) {
	req := threeNodes()
	for b.Loop() {
		if _, _, err := Ensure(nil, req, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnsureNoOp(b *testing.B) {
	req := threeNodes()
	s, _ := mustEnsure(b, nil, req, t0)
	for b.Loop() {
		if _, _, err := Ensure(s, req, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// rkeLeaf is a certificate as RKE issues them: an RSA key, signed by ca.
func rkeLeaf(t *testing.T, ca Cert, cn string, usages []x509.ExtKeyUsage, sans []string, rsaKey bool) Cert {
	t.Helper()
	caPair, err := parsePair(ca)
	if err != nil {
		t.Fatal(err)
	}
	var pub any
	var keyPEM []byte
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub, keyPEM = k.Public(), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	} else {
		k, err := newKey()
		if err != nil {
			t.Fatal(err)
		}
		if keyPEM, err = encodeKey(k); err != nil {
			t.Fatal(err)
		}
		pub = k.Public()
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(CAValidity / 2), ExtKeyUsage: usages,
	}
	tmpl.DNSNames, _ = splitSANs(sans)
	_, ips := splitSANs(sans)
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caPair.cert, pub, caPair.key)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}
}

// TestEnsureKeepsRKECertificates: a certificate RKE issued (RSA) that does
// all rigger needs is kept though it says more (RKE's etcd certificates
// share the CN kube-etcd and name every etcd node; its proxy client is a
// server too); one that lacks something rigger needs, and one rigger made,
// are reissued as always.
func TestEnsureKeepsRKECertificates(t *testing.T) {
	ca := selfSigned(t, "kube-ca", true)
	base, _ := mustEnsure(t, &Set{Certs: map[string]Cert{CACertName: ca}}, threeNodes(), t0)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	rkeSANs := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "192.168.0.1", "192.168.0.2", "192.168.0.3", "node1", "node2", "node3",
		"127.0.0.1", "10.43.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	const name = "kube-etcd-192-168-0-1"
	tests := []struct {
		name string
		cert Cert
		want []Change
	}{
		{"RKE's etcd certificate", rkeLeaf(t, ca, "kube-etcd", both, rkeSANs, true), nil},
		{"RKE's, without the node's internal address", rkeLeaf(t, ca, "kube-etcd", both, slices.DeleteFunc(slices.Clone(rkeSANs), func(s string) bool { return s == "192.168.0.1" }), true),
			[]Change{{Name: name, Action: ActionReissue, Reason: "subject changed: CN=kube-etcd-192-168-0-1, was CN=kube-etcd; SANs changed: +192.168.0.1, -10.0.0.2, -10.0.0.3, -10.43.0.1, -192.168.0.2, -192.168.0.3, -kubernetes, -kubernetes.default, -kubernetes.default.svc, -kubernetes.default.svc.cluster.local, -node2, -node3"}}},
		{"RKE's, client usage only", rkeLeaf(t, ca, "kube-etcd", both[:1], rkeSANs, true),
			[]Change{{Name: name, Action: ActionReissue, Reason: "subject changed: CN=kube-etcd-192-168-0-1, was CN=kube-etcd; usages changed: client,server, was client; SANs changed: -10.0.0.2, -10.0.0.3, -10.43.0.1, -192.168.0.2, -192.168.0.3, -kubernetes, -kubernetes.default, -kubernetes.default.svc, -kubernetes.default.svc.cluster.local, -node2, -node3"}}},
		{"the same made with an ECDSA key", rkeLeaf(t, ca, "kube-etcd", both, rkeSANs, false),
			[]Change{{Name: name, Action: ActionReissue, Reason: "subject changed: CN=kube-etcd-192-168-0-1, was CN=kube-etcd; SANs changed: -10.0.0.2, -10.0.0.3, -10.43.0.1, -192.168.0.2, -192.168.0.3, -kubernetes, -kubernetes.default, -kubernetes.default.svc, -kubernetes.default.svc.cluster.local, -node2, -node3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{Certs: maps.Clone(base.Certs)}
			s.Certs[name] = tt.cert
			_, changes := mustEnsure(t, s, threeNodes(), t0)
			if diff := cmp.Diff(tt.want, changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("RKE's proxy client, a server too", func(t *testing.T) {
		s := &Set{Certs: maps.Clone(base.Certs)}
		s.Certs[APIProxyClientCertName] = rkeLeaf(t, s.Certs[RequestHeaderCACertName], APIProxyClientCertName, both, nil, true)
		if _, changes := mustEnsure(t, s, threeNodes(), t0); len(changes) != 0 {
			t.Errorf("changes %+v, want none", changes)
		}
	})
}
