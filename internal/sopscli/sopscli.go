// Package sopscli runs the real sops CLI in tests: the one `make sops`
// builds from hack/sops and names in RIGGER_SOPS.
package sopscli

import (
	"os"
	"os/exec"
	"testing"
)

// Env names the sops binary the tests run (`make sops` builds it).
const Env = "RIGGER_SOPS"

// Binary returns the path of the sops CLI. Without RIGGER_SOPS it skips t,
// or fails it when RIGGER_E2E=1 (make test, which builds it, says so).
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(Env)
	if bin == "" {
		if os.Getenv("RIGGER_E2E") == "1" {
			t.Fatalf("%s is not set: run `make sops` and set %s to the path it builds (make test does both)", Env, Env)
		}
		t.Skipf("%s is not set: `make sops` builds the sops CLI (make test sets it)", Env)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	return bin
}

// Run runs sops with args in dir, its environment the test's, and returns
// its standard output; it fails t when sops fails.
func Run(t testing.TB, bin, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stderr []byte
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("sops %v: %v\n%s", args, err, stderr)
	}
	return out
}
