package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// TestCLIRestoreSandbox restores a snapshot through the CLI on a one-node
// sandbox: declined, nothing changes; with --yes, the cluster runs on the
// snapshot. It has a subnet of its own (12), so that it can run with
// -run while TestCLISandbox's sandbox (7) is up.
func TestCLIRestoreSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 12, Nodes: 1, Images: true})
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.yml")
	yml := sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, s, map[int][]string{0: {"etcd", "controlplane", "worker"}}))
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	args := func(a ...string) []string { return append(a, "-f", file, "--state-dir", filepath.Join(dir, "state")) }
	node := s.Nodes[0].Address

	if out, errOut, code := run(t, args("apply", "--yes")...); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, args("snapshot", "save", "--name", "cli-restore")...); code != 0 {
		t.Fatalf("snapshot save: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code := runWithInput(t, "no\n", args("snapshot", "restore", "cli-restore")...)
	if code != 1 || !strings.Contains(out, "==> Check snapshot cli-restore (nothing is changed)") ||
		!strings.Contains(out, "verified on 1 etcd node(s)") || !strings.Contains(out, "Only 'yes' will be accepted") ||
		!strings.Contains(errOut, "cancelled: nothing was changed") || strings.Contains(out, "stopped and removed") {
		t.Fatalf("declined restore: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = run(t, args("snapshot", "restore", "--yes", "cli-restore")...)
	if code != 0 || !strings.Contains(out, node+": kube-apiserver stopped and removed") ||
		!strings.Contains(out, node+": /var/lib/etcd/member moved to /var/lib/etcd/member.before-restore-") ||
		!strings.Contains(out, "Snapshot cli-restore restored in") || !strings.Contains(out, "etcd and the API servers are healthy") {
		t.Fatalf("restore --yes: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = run(t, args("plan")...)
	if code != 0 || !strings.Contains(out, "No changes") {
		t.Errorf("plan after the restore: exit %d\n%s", code, out)
	}
}
