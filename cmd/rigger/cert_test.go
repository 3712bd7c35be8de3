package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/pki"
)

// TestCertRotateRefusesUnknownService: --service takes RKE's services only,
// refused before cluster.yml is read or a node is reached.
func TestCertRotateRefusesUnknownService(t *testing.T) {
	_, errOut, code := run(t, "cert", "rotate", "-f", "does-not-exist.yml", "--service", "kubelet", "--service", "nginx-proxy")
	if code != 1 || !strings.Contains(errOut, `--service: cannot rotate the certificates of service "nginx-proxy"`) ||
		!strings.Contains(errOut, "kube-controller-manager") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}

// TestCertRotateHelp: the command says what it does and mirrors rke's flags.
func TestCertRotateHelp(t *testing.T) {
	out, _, code := run(t, "cert", "rotate", "--help")
	for _, want := range []string{"--service", "--rotate-ca", "--yes", "service-account token key is kept", "docs/certificates.md"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("help (exit %d) does not say %q:\n%s", code, want, out)
		}
	}
}

// TestCertList: the state directory's certificates, soonest to expire
// first, read without reaching a node.
func TestCertList(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	path := writeCluster(t, "cluster_name: c\nssh_key_path: "+dir+"/id\nnodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n")
	set, _, err := pki.Ensure(nil, pki.Request{ClusterName: "c", ServiceClusterIPRange: "10.43.0.0/16",
		Nodes: []pki.Node{{Name: "10.0.0.1", Address: "10.0.0.1", InternalAddress: "10.0.0.1", Etcd: true, ControlPlane: true, Worker: true}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir = dir + "/state"
	if err := pki.Save(dir, set); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "cert", "list", "-f", path, "--state-dir", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 1+len(pki.Expiry(set)) || !strings.HasPrefix(lines[0], "CERTIFICATE") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.HasPrefix(lines[len(lines)-1], pki.CACertName+" ") && !strings.HasPrefix(lines[len(lines)-1], pki.RequestHeaderCACertName+" ") {
		t.Errorf("the CAs, which expire last, are not last:\n%s", out)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Error("a key in the listing")
	}
}
