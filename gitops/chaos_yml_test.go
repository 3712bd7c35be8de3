package gitops_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdsnap/s3test"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/spec"
)

// TestChaosClusterYML: every cluster.yml the chaos suite applies is valid.
// The suite runs only with make chaos; this runs with every go test, so
// that a change of the example cluster the suite edits (a second
// services.etcd, say) shows at once.
func TestChaosClusterYML(t *testing.T) {
	sb := &sandbox.Sandbox{Name: "test22", KeyPath: "/var/lib/rigger-sandbox/test22/ssh/id_ed25519",
		KnownHostsPath: "/var/lib/rigger-sandbox/test22/ssh/known_hosts"}
	for i := 1; i <= 3; i++ {
		sb.Nodes = append(sb.Nodes, sandbox.Node{Name: fmt.Sprintf("node%d", i), Address: fmt.Sprintf("10.231.22.%d", 10+i),
			User: sandbox.User, Hostname: fmt.Sprintf("test22-node%d", i)})
	}
	c := &chaos{sb: sb, gw: &s3test.Gateway{Endpoint: "10.231.22.1:9000", Bucket: "chaos", Access: "access", Secret: "secret", CAPEM: selfSignedPEM(t)}}
	for _, k := range []knobs{{}, {etcd: 1}, {etcd: 1, node3NoEtcd: true}, {etcd: 1, api: 1}, {etcd: 1, api: 2},
		{etcd: 2, api: 2}, {etcd: 2, api: 2, proxy: 1}, {etcd: 2, api: 2, proxy: 2}, {etcd: 2, api: 2, proxy: 2, s3: true}, {s3: true}} {
		y := c.yml(t, k)
		if _, diags := spec.Parse([]byte(y), "cluster.yml"); diags.HasErrors() {
			t.Errorf("knobs %+v: %v\n%s", k, diags.Err(), y)
		}
	}
}

func selfSignedPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chaos-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
