package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// run executes rigger with args and returns its output and exit code.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runWithInput(t, "", args...)
}

// runWithInput is run with stdin.
func runWithInput(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	return runTo(t, context.Background(), stdin, &out, &errOut, args...)
}

// runTo runs rigger with ctx, writing its output to out and errOut as it
// comes (a syncBuffer when read while it runs).
func runTo(t *testing.T, ctx context.Context, stdin string, out, errOut interface {
	io.Writer
	String() string
	WriteString(string) (int, error)
}, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := newRootCommand(out, errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		code = printError(errOut, err) // as main prints it
	}
	return out.String(), errOut.String(), code
}

func TestValidateThreeMistakes(t *testing.T) {
	out, _, code := run(t, "validate", "-f", "../../spec/testdata/invalid/three-mistakes.yml")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	for _, want := range []string{
		"three-mistakes.yml:8:12: error: nodes[1].role[0]: Role [master] for host (2) is not recognized",
		"three-mistakes.yml:9:5: error: nodes[2].address: Cluster can't have duplicate node: 10.0.0.1",
		`three-mistakes.yml:14:5: error: services.kube-api.extra-args: unknown key "extra-args" in services.kube-api`,
		`Did you mean "extra_args"?`,
		"3 errors, 0 warnings",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestValidateJSON(t *testing.T) {
	out, _, code := run(t, "validate", "-o", "json", "-f", "../../spec/testdata/invalid/roles.yml")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	var got struct {
		Valid       bool
		Errors      int
		Warnings    int
		Diagnostics []struct{ Severity, Path, Summary string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if got.Valid || got.Errors != 1 || got.Warnings != 2 || len(got.Diagnostics) != 3 {
		t.Errorf("got %+v", got)
	}
}

func TestValidateValidExampleAndEnvOverride(t *testing.T) {
	t.Setenv("RIGGER_FILE", "../../examples/clusters/ha/cluster.yml")
	out, _, code := run(t, "validate")
	if code != 0 || !strings.Contains(out, "ha/cluster.yml: valid") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// TestValidateInterrupted: validate stops when its context ends (main's
// on SIGINT or SIGTERM), says so with the signal, and exits non-zero.
func TestValidateInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("terminated signal received"))
	var out, errOut bytes.Buffer
	stdout, stderr, code := runTo(t, ctx, "", &out, &errOut, "validate", "-f", "../../examples/clusters/ha/cluster.yml")
	if code == 0 || strings.Contains(stdout, "valid") ||
		!strings.Contains(stderr, "validation of ../../examples/clusters/ha/cluster.yml stopped before the end: terminated signal received") {
		t.Errorf("exit %d, stdout %q, stderr %q: want a non-zero exit that names the signal", code, stdout, stderr)
	}
}

// TestValidateCountsLeftOut: the closing count is of every problem, those
// not shown included.
func TestValidateCountsLeftOut(t *testing.T) {
	var y strings.Builder
	y.WriteString("nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n")
	for i := range 150 {
		fmt.Fprintf(&y, "key%d: x\n", i)
	}
	file := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(file, []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := run(t, "validate", "-f", file)
	if code != 1 || strings.Count(out, "unknown key") != 100 || !strings.Contains(out, "error: and 50 more errors") ||
		!strings.HasSuffix(out, "cluster.yml: 150 errors, 0 warnings\n") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

func TestValidateMissingFile(t *testing.T) {
	_, errOut, code := run(t, "validate", "-f", "does-not-exist.yml")
	if code != 1 || !strings.Contains(errOut, "does-not-exist.yml") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// writeCluster writes yml to a cluster.yml in a temporary directory of t
// and returns its path.
func writeCluster(t *testing.T, yml string) string {
	t.Helper()
	path := t.TempDir() + "/cluster.yml"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestValidateRefusesWhatPlanWould: what the plan would refuse of
// cluster.yml alone is refused by validate, and by every command that
// loads cluster.yml, before any connection.
func TestValidateRefusesWhatPlanWould(t *testing.T) {
	path := writeCluster(t, "nodes: [{address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}]\nnetwork: {plugin: aci}\n")
	out, _, code := run(t, "validate", "-f", path)
	if code != 1 || !strings.Contains(out, "error: network.plugin: rigger does not deploy the Cisco ACI CNI yet") || !strings.Contains(out, "1 error, ") {
		t.Errorf("validate: exit %d, output:\n%s", code, out)
	}
	_, errOut, code := run(t, "config", "defaults", "-f", path)
	if code != 1 || !strings.Contains(errOut, "rigger does not deploy the Cisco ACI CNI yet") {
		t.Errorf("config defaults: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestConfigDefaults(t *testing.T) {
	out, _, code := run(t, "config", "defaults", "-f", "../../examples/clusters/s3-backups/cluster.yml")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"cluster_name: backed-up", "interval_hours: 6", "hostname_override: 10.20.0.11", "secret_key: (redacted)", "host_key_policy: strict"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "example-secret-key-change-me") {
		t.Error("a secret is printed without --show-secrets")
	}
	_, errOut, code := run(t, "config", "defaults", "-f", "../../spec/testdata/invalid/three-mistakes.yml")
	if code != 1 || !strings.Contains(errOut, "3 errors") {
		t.Errorf("an invalid file: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestPlanRefusesAnInvalidFile(t *testing.T) {
	_, errOut, code := run(t, "plan", "-f", "../../spec/testdata/invalid/three-mistakes.yml")
	if code != 1 || !strings.Contains(errOut, "3 errors") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}

func TestCommandsShowWarnings(t *testing.T) {
	path := writeCluster(t, "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n  - {address: 10.0.0.2, user: u, role: [etcd, worker]}\n")
	out, errOut, code := run(t, "config", "defaults", "-f", path)
	if code != 0 || !strings.Contains(errOut, "even number of etcd nodes (2)") || !strings.Contains(out, "address: 10.0.0.2") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}

// TestKnownHostsFlag: --known-hosts replaces rigger.ssh.known_hosts_file.
// Opening a session connects to nothing.
// writeKey writes a new SSH private key to dir/id.
func writeKey(t *testing.T, dir string) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/id", pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestKnownHostsFlag(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	yml := "ssh_key_path: " + dir + "/id\nnodes:\n  - {address: 192.0.2.10, user: u, role: [etcd, controlplane, worker]}\n"
	if err := os.WriteFile(dir+"/cluster.yml", []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	f := clusterFlags{file: dir + "/cluster.yml", stateDir: dir + "/state", knownHosts: dir + "/known_hosts"}
	cmd := newRootCommand(io.Discard, io.Discard)
	s, err := f.open(cmd)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if c := s.c; c.Rigger.SSH.KnownHostsFile != dir+"/known_hosts" {
		t.Errorf("known_hosts_file %q, want the flag's", c.Rigger.SSH.KnownHostsFile)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) WriteString(p string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.WriteString(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
