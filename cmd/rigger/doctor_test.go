package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/doctor"
)

// doctorCluster writes a cluster.yml of one node at 127.0.0.1 on a port
// where nothing listens, with a key of its own.
func doctorCluster(t *testing.T, moreNodes ...string) (file, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Skipf("ssh-keygen: %v %s", err, out)
	}
	file = filepath.Join(dir, "cluster.yml")
	yml := "cluster_name: doctortest\nssh_key_path: " + key + "\nnodes:\n" +
		"  - {address: 127.0.0.1, port: \"1\", user: root, role: [etcd, controlplane, worker], hostname_override: n1}\n" +
		strings.Join(moreNodes, "") + "services:\n  etcd: {snapshot: false}\n"
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, filepath.Join(dir, "state")
}

// TestDoctorNodeUnreachable: a node whose SSH port refuses stops at
// ssh-port, with the fix, the rest of its walk not run; exit 1.
func TestDoctorNodeUnreachable(t *testing.T) {
	file, state := doctorCluster(t)
	out, errOut, code := run(t, "doctor", "-f", file, "--state-dir", state)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"Node 127.0.0.1 (n1)",
		"FAIL    ssh-port         node 127.0.0.1: 127.0.0.1:1 refused the connection",
		"fix: check the node is up",
		"not run: ssh-handshake, ssh-host-key,",
		"127.0.0.1 (n1): stops at ssh-port",
		"WARN    pki",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(state); err == nil {
		t.Error("doctor made the state directory: it changes nothing")
	}

	out, _, code = run(t, "doctor", "-f", file, "--state-dir", state, "-o", "json", "--skip", "ssh-port")
	var doc struct{ Findings []doctor.Finding }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	levels := map[string]doctor.Level{}
	for _, f := range doc.Findings {
		if f.Node == "127.0.0.1" {
			levels[f.Check] = f.Level
		}
	}
	// ssh-port skipped by name: the connection gets no further, and the
	// next check of it fails.
	if code != 1 || levels[doctor.CheckSSHPort] != doctor.Skip || levels[doctor.CheckAddress] != doctor.Pass ||
		levels[doctor.CheckSSHHandshake] != doctor.Fail || levels[doctor.CheckNodeReady] != doctor.NotRun {
		t.Errorf("exit %d, levels %v", code, levels)
	}
}

// TestDoctorKeyMissing: a node whose ssh_key_path file is missing stops
// at ssh-auth, naming the file, with the connection's checks before it
// not tried; the other nodes are walked.
func TestDoctorKeyMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone_ed25519")
	file, state := doctorCluster(t, "  - {address: 127.0.0.2, port: \"1\", user: root, role: [worker], hostname_override: n2, ssh_key_path: "+missing+"}\n")
	out, errOut, code := run(t, "doctor", "-f", file, "--state-dir", state)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"FAIL    ssh-port         node 127.0.0.1: 127.0.0.1:1 refused the connection",
		"FAIL    ssh-auth         node 127.0.0.2: cannot use ssh_key_path " + missing + ":",
		"no such file or directory",
		"fix: fix ssh_key_path",
		"skip    ssh-port         not tried: ssh-auth failed before rigger connected",
		"127.0.0.2 (n2): stops at ssh-auth",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDoctorRefusesUnknownNames(t *testing.T) {
	file, state := doctorCluster(t)
	_, errOut, code := run(t, "doctor", "-f", file, "--state-dir", state, "--skip", "swap,nope")
	if code != 1 || !strings.Contains(errOut, "--skip nope: no such check; the checks are cluster-yml, pki,") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, "doctor", "-f", file, "--state-dir", state, "--node", "10.9.9.9")
	if code != 1 || !strings.Contains(errOut, "node 10.9.9.9 is not in cluster.yml") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// TestDoctorHelpNamesEveryCheck: the help's list of the walk is the walk.
func TestDoctorHelpNamesEveryCheck(t *testing.T) {
	out, _, code := run(t, "doctor", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, name := range doctor.CheckNames() {
		if !strings.Contains(out, name) {
			t.Errorf("the help does not name the check %s", name)
		}
	}
}
