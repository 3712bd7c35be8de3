package rkestate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/memwatch"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

const testCluster = `cluster_name: prod
nodes:
  - {address: 10.0.0.1, user: root, role: [etcd, controlplane, worker], hostname_override: node1}
  - {address: 10.0.0.2, user: root, role: [worker]}
`

func parseCluster(t *testing.T, y string) *spec.Cluster {
	t.Helper()
	c, diags := spec.Parse([]byte(y), "cluster.yml")
	if diags.Err() != nil {
		t.Fatal(diags.Err())
	}
	return c
}

// stateJSON is a cluster.rkestate of testCluster as RKE lays it out, with
// certificates from pki.Ensure; edit changes the current state first.
func stateJSON(t *testing.T, edit func(cur map[string]any)) []byte {
	t.Helper()
	set, _, err := pki.Ensure(nil, pki.RequestFor(parseCluster(t, testCluster)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	bundle := map[string]any{}
	for _, n := range set.Names() {
		c := set.Certs[n]
		bundle[n] = map[string]any{"certificatePEM": string(c.CertPEM), "keyPEM": string(c.KeyPEM), "name": n, "path": "/etc/kubernetes/ssl/" + n + ".pem"}
	}
	bundle["kube-kubelet-10-0-0-1"] = bundle[pki.KubeNodeCertName]
	cur := map[string]any{
		"rkeConfig": map[string]any{
			"clusterName": "prod",
			"sshKeyPath":  "~/.ssh/id_rsa",
			"nodes": []any{
				map[string]any{"address": "10.0.0.1", "role": []string{"controlplane", "worker", "etcd"}, "hostnameOverride": "node1", "sshKey": "SECRET-SSH-KEY"},
				map[string]any{"address": "10.0.0.2", "internalAddress": "10.0.0.2", "role": []string{"worker"}, "hostnameOverride": "10.0.0.2"},
			},
		},
		"certificatesBundle": bundle,
		"encryptionConfig":   "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: k, secret: SECRETKEYMATERIALSECRETKEYMATERIALSECRETKEY=}]}\n",
	}
	if edit != nil {
		edit(cur)
	}
	b, err := json.Marshal(map[string]any{"desiredState": map[string]any{}, "currentState": cur})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseBytes(t *testing.T, b []byte) (*State, error) {
	t.Helper()
	return Parse("cluster.rkestate", strings.NewReader(string(b)))
}

// noSecrets fails when err quotes any key material of the state.
func noSecrets(t *testing.T, err error) {
	t.Helper()
	for _, s := range []string{"PRIVATE KEY", "BEGIN", "SECRET"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error quotes secret material (%s): %v", s, err)
		}
	}
}

func TestParseAndTake(t *testing.T) {
	st, err := parseBytes(t, stateJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := parseCluster(t, testCluster)
	if err := st.Check(c); err != nil {
		t.Fatalf("Check: %v", err)
	}
	taken, err := st.Take(pki.RequestFor(c), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ItemAction{}
	for _, it := range taken.Items {
		got[it.Name] = it.Action
	}
	if got["kube-kubelet-10-0-0-1"] != Unused || got[pki.CACertName] != Imported || got["kube-etcd-10-0-0-1"] != Imported {
		t.Errorf("items %v: want the kubelet's serving certificate unused, kube-ca and the etcd certificate imported", got)
	}
	if _, ok := taken.Set.Certs["kube-kubelet-10-0-0-1"]; ok {
		t.Error("a certificate rigger does not use was imported")
	}

	dir := filepath.Join(t.TempDir(), "state")
	if err := taken.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := taken.Save(dir); err != nil {
		t.Fatalf("adopt run again over its own state directory: %v", err)
	}

	// Another cluster's state directory is refused.
	other, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if err := pki.Save(otherDir, other); err != nil {
		t.Fatal(err)
	}
	var diff *DifferentCAError
	if err := taken.Save(otherDir); !errors.As(err, &diff) {
		t.Fatalf("Save over another CA: %v, want a *DifferentCAError", err)
	}
	if kept, err := pki.Load(otherDir); err != nil || string(kept.Certs[pki.CACertName].CertPEM) != string(other.Certs[pki.CACertName].CertPEM) {
		t.Errorf("the other CA was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(otherDir, EncryptionFile)); err == nil {
		t.Error("encryption.yaml written into another cluster's state directory")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "the file is empty"},
		{"not JSON", []byte("cluster_name: x\n"), "not JSON (at byte 1)"},
		{"cut short", stateJSON(t, nil)[:500], "cut short"},
		{"not RKE's", []byte(`{"a": 1}`), "no certificatesBundle in currentState or desiredState"},
		{"key not a string", stateJSON(t, func(cur map[string]any) {
			cur["certificatesBundle"].(map[string]any)["kube-ca"].(map[string]any)["keyPEM"] = 5
		}), "field currentState.certificatesBundle.keyPEM is a JSON number"},
		{"no rkeConfig", stateJSON(t, func(cur map[string]any) { delete(cur, "rkeConfig") }), "currentState has certificates but no rkeConfig"},
		{"node without address", stateJSON(t, func(cur map[string]any) {
			cur["rkeConfig"].(map[string]any)["nodes"] = []any{map[string]any{"role": []string{"worker"}}}
		}), "currentState.rkeConfig.nodes[0] has no address"},
		{"certificate empty", stateJSON(t, func(cur map[string]any) {
			cur["certificatesBundle"].(map[string]any)["kube-ca"] = map[string]any{"keyPEM": "-----BEGIN RSA PRIVATE KEY-----"}
		}), `certificatesBundle["kube-ca"].certificatePEM is empty`},
		{"name with a slash", stateJSON(t, func(cur map[string]any) {
			cur["certificatesBundle"].(map[string]any)["../x"] = map[string]any{"certificatePEM": "x"}
		}), "a name that is not a file name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBytes(t, tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "cluster.rkestate") {
				t.Fatalf("err = %v, want one naming cluster.rkestate and %q", err, tt.want)
			}
			noSecrets(t, err)
		})
	}
	t.Run("too large", func(t *testing.T) {
		_, err := Parse("big.rkestate", strings.NewReader(strings.Repeat(" ", MaxSize+1)))
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name, cluster string
		want          []string
	}{
		{"another cluster name", strings.Replace(testCluster, "prod", "staging", 1), []string{`cluster_name is "staging" in cluster.yml but "prod"`}},
		{"a node less", strings.Replace(testCluster, "  - {address: 10.0.0.2, user: root, role: [worker]}\n", "", 1), []string{"node 10.0.0.2 is in cluster.rkestate but not in cluster.yml"}},
		{"roles", strings.Replace(testCluster, "role: [worker]}", "role: [worker, controlplane]}", 1), []string{"node 10.0.0.2 has roles controlplane,worker in cluster.yml but worker"}},
		{"hostname", strings.Replace(testCluster, "hostname_override: node1", "hostname_override: other", 1), []string{"node 10.0.0.1 has hostname_override other in cluster.yml but node1"}},
		{"internal address", strings.Replace(testCluster, "{address: 10.0.0.2,", "{address: 10.0.0.2, internal_address: 192.168.0.2,", 1), []string{"node 10.0.0.2 has internal_address 192.168.0.2 in cluster.yml but 10.0.0.2"}},
	}
	st, err := parseBytes(t, stateJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := st.Check(parseCluster(t, tt.cluster))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to say %q", err, w)
				}
			}
			noSecrets(t, err)
		})
	}
}

// badCA replaces the state's kube-ca with a self-signed certificate made
// from a CA template that edit spoils, and drops the certificates it
// signed (the next apply would issue them with it).
func badCA(t *testing.T, edit func(*x509.Certificate)) func(cur map[string]any) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kube-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return func(cur map[string]any) {
		cur["certificatesBundle"] = map[string]any{"kube-ca": map[string]any{
			"certificatePEM": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			"keyPEM":         string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
			"name":           "kube-ca", "path": "/etc/kubernetes/ssl/kube-ca.pem"}}
	}
}

// TestCheckErrorBounded: a state file of 100,000 nodes that are not
// cluster.yml's gives an error that lists a few and counts the rest.
func TestCheckErrorBounded(t *testing.T) {
	c := parseCluster(t, testCluster)
	st := &State{Source: "cluster.rkestate", ClusterName: "prod"}
	for i := range 100000 {
		st.Nodes = append(st.Nodes, Node{Address: fmt.Sprintf("192.0.%d.%d", i/256, i%256)})
	}
	err := st.Check(c)
	if err == nil || len(err.Error()) > 8<<10 || !strings.Contains(err.Error(), "more differences") {
		t.Fatalf("Check of 100,000 foreign nodes: an error of %d bytes; want a few lines ending with the count of the rest", len(fmt.Sprint(err)))
	}
}

func TestTakeErrors(t *testing.T) {
	c := parseCluster(t, testCluster)
	tests := []struct {
		name string
		edit func(cur map[string]any)
		want string
	}{
		{"no CA", func(cur map[string]any) { delete(cur["certificatesBundle"].(map[string]any), "kube-ca") }, "it has no kube-ca"},
		{"key of another certificate", func(cur map[string]any) {
			b := cur["certificatesBundle"].(map[string]any)
			b["kube-admin"].(map[string]any)["keyPEM"] = b["kube-node"].(map[string]any)["keyPEM"]
		}, "private key does not match the certificate"},
		{"encryption config not one", func(cur map[string]any) {
			cur["encryptionConfig"] = "kind: Secret\napiVersion: v1\ndata: {a: SECRET}\n"
		}, "not an apiserver.config.k8s.io EncryptionConfiguration"},
		{"encryption config not YAML", func(cur map[string]any) { cur["encryptionConfig"] = "SECRET: [" }, "encryptionConfig is not YAML"},
		{"encryption key not base64", func(cur map[string]any) {
			cur["encryptionConfig"] = strings.Replace(cur["encryptionConfig"].(string), "KEY=", "KE!=", 1)
		}, "keys[0] (k): its secret is not base64"},
		{"encryption key of a wrong length", func(cur map[string]any) {
			cur["encryptionConfig"] = strings.Replace(cur["encryptionConfig"].(string), "SECRETKEY=", "SECRET", 1)
		}, "its secret is 30 bytes, and aescbc takes keys of [16 24 32] bytes"},
		{"CA:FALSE", badCA(t, func(c *x509.Certificate) { c.IsCA = false }), "kube-ca is not a CA certificate"},
		{"no keyCertSign", badCA(t, func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }), "kube-ca may not sign certificates"},
		{"CA not yet valid", badCA(t, func(c *x509.Certificate) { c.NotBefore = time.Now().Add(time.Hour) }), "kube-ca is not valid before"},
		{"CA expired", badCA(t, func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Hour) }), "kube-ca expired on"},
		// A CA by its own certificate whose certificates no component
		// accepts: checked by signing and verifying throwaway ones.
		{"CA constrained to other names", badCA(t, func(c *x509.Certificate) {
			c.PermittedDNSDomains = []string{"example.com"}
		}), "kube-ca issues certificates that do not verify: a server certificate like kube-apiserver"},
		{"CA constrained to other addresses", badCA(t, func(c *x509.Certificate) {
			_, other, _ := net.ParseCIDR("192.168.0.0/16")
			c.PermittedIPRanges = []*net.IPNet{other}
		}), "kube-ca issues certificates that do not verify"},
		{"CA for code signing only", badCA(t, func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}
		}), "kube-ca issues certificates that do not verify: a client certificate like kube-admin"},
		{"CA for servers only", badCA(t, func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}), "a client certificate like kube-admin"},
		{"CA without its key", func(cur map[string]any) {
			delete(cur["certificatesBundle"].(map[string]any)["kube-ca"].(map[string]any), "keyPEM")
		}, "kube-ca comes without its key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseBytes(t, stateJSON(t, tt.edit))
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Take(pki.RequestFor(c), time.Now())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			noSecrets(t, err)
		})
	}
}

// FuzzParse feeds Parse what a cluster.rkestate, or the full-cluster-state
// Secret, may hold: no panic, and what parses has a CA and nodes.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"currentState":{"rkeConfig":{"nodes":[{"address":"a"}]},"certificatesBundle":{"kube-ca":{"certificatePEM":"x"}}}}`))
	f.Add([]byte(`{"desiredState":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Parse("f", strings.NewReader(string(b)))
		if err != nil {
			return
		}
		if len(st.Nodes) == 0 || len(st.Certs) == 0 {
			t.Fatalf("parsed a state without nodes or certificates")
		}
	})
}

// TestParseBounded: a state of 29 MB listing 600,000 tiny nodes, or as
// many certificates, is refused without decoding them all (it took 350 MB
// before Check refused it); a list of the wrong kind is named.
func TestParseBounded(t *testing.T) {
	cert := `{"kube-ca":{"certificatePEM":"x"}}`
	for name, tc := range map[string]struct{ head, item, tail, want string }{
		"nodes": {`{"currentState":{"rkeConfig":{"nodes":[`, `{"address":"a"},`, `{"address":"a"}]},"certificatesBundle":` + cert + `}}`,
			"more than 5000 nodes in rkeConfig.nodes"},
		"certificates": {`{"currentState":{"rkeConfig":{"nodes":[{"address":"a"}]},"certificatesBundle":{`, `"c%d":{},`, `"kube-ca":{"certificatePEM":"x"}}}}`,
			"more than 10100 certificates in certificatesBundle"},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString(tc.head)
			for i := 0; b.Len() < 29<<20; i++ {
				if strings.Contains(tc.item, "%d") {
					fmt.Fprintf(&b, tc.item, i)
				} else {
					b.WriteString(tc.item)
				}
			}
			b.WriteString(tc.tail)
			in := b.String()
			peak := memwatch.Peak()
			_, err := Parse("cluster.rkestate", strings.NewReader(in))
			grew := peak()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want %q", err, tc.want)
			}
			// The file's bytes (read into one buffer of its size) and
			// what decoding keeps.
			t.Logf("Parse of %d MiB grew the heap's objects by %d MiB", len(in)>>20, grew>>20)
			if grew > 2*uint64(len(in)) {
				t.Errorf("Parse of %d MiB took %d MiB of the heap", len(in)>>20, grew>>20)
			}
		})
	}
	_, err := parseBytes(t, []byte(`{"currentState":{"rkeConfig":{"nodes":{"a":1}},"certificatesBundle":{"kube-ca":{"certificatePEM":"x"}}}}`))
	if err == nil || !strings.Contains(err.Error(), "field rkeConfig.nodes is a JSON object, RKE writes an array there") {
		t.Errorf("nodes as an object: %v", err)
	}
}

// TestNodesToAdd: a node of cluster.yml that RKE's state lacks (rke up
// drops a node it cannot reach, with a warning) is no difference: rigger
// adds it. A node of the state that cluster.yml lacks still is one.
func TestNodesToAdd(t *testing.T) {
	st, err := parseBytes(t, stateJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	node3 := testCluster + "  - {address: 10.0.0.3, user: root, role: [worker]}\n"
	withNode3 := parseCluster(t, node3)
	if err := st.Check(withNode3); err != nil {
		t.Errorf("Check of cluster.yml with a node RKE did not provision: %v", err)
	}
	if got := st.ToAdd(withNode3); len(got) != 1 || got[0] != "10.0.0.3" {
		t.Errorf("ToAdd = %v, want [10.0.0.3]", got)
	}
	if got := st.ToAdd(parseCluster(t, testCluster)); len(got) != 0 {
		t.Errorf("ToAdd of the cluster.yml RKE deployed = %v, want none", got)
	}
	err = st.Check(parseCluster(t, strings.Replace(node3, "  - {address: 10.0.0.2, user: root, role: [worker]}\n", "", 1)))
	if err == nil || !strings.Contains(err.Error(), "node 10.0.0.2 is in cluster.rkestate but not in cluster.yml") {
		t.Errorf("Check of a cluster.yml without a node RKE provisioned: %v", err)
	}
}
