package main

import (
	"strings"
	"testing"
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
