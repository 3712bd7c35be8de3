package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/sopscli"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// TestCLISandbox drives the commands a user runs on a one-node sandbox:
// plan, a saved plan applied, status, kubeconfig, etcd snapshots, a refused
// stale plan, a declined apply, apply --watch, a snapshot restored, and
// remove.
func TestCLISandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 7, Nodes: 1, Images: true})
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.yml")
	yml := sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, s, map[int][]string{0: {"etcd", "controlplane", "worker"}}))
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	planFile := filepath.Join(dir, "plan.json")
	cluster := []string{"-f", file, "--state-dir", state}
	args := func(a ...string) []string { return append(a, cluster...) }
	node := s.Nodes[0].Address

	out, errOut, code := run(t, args("plan", "--out", planFile)...)
	if code != 2 || !strings.Contains(out, "Plan: 7 to create") || !strings.Contains(out, "Certificates: new") {
		t.Fatalf("plan of a fresh node: exit %d\n%s%s", code, out, errOut)
	}
	// The saved plan says what the text says besides the steps.
	var saved struct {
		Steps        []json.RawMessage `json:"steps"`
		Changes      bool              `json:"changes"`
		Certificates struct {
			Source string            `json:"source"`
			Issue  []json.RawMessage `json:"issue"`
		} `json:"certificates"`
	}
	if b, err := os.ReadFile(planFile); err != nil || json.Unmarshal(b, &saved) != nil ||
		len(saved.Steps) == 0 || !saved.Changes || saved.Certificates.Source != "new" || len(saved.Certificates.Issue) == 0 {
		t.Errorf("saved plan: %v, %+v", err, saved)
	}

	// Nothing is applied without an answer.
	out, errOut, code = run(t, args("apply")...)
	if code != 1 || !strings.Contains(errOut+out, "pass --yes") {
		t.Fatalf("apply without an answer: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runWithInput(t, "no\n", args("apply")...)
	if code != 1 || !strings.Contains(out, "Only 'yes' will be accepted") {
		t.Fatalf("declined apply: exit %d\n%s", code, out)
	}

	out, errOut, code = run(t, args("apply", "--plan", planFile)...)
	if code != 0 || !strings.Contains(out, "Apply complete") || !strings.Contains(out, "==> Control plane, one node at a time (new ones at once)") {
		t.Fatalf("apply of the saved plan: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = run(t, args("status", "-o", "json")...)
	var st struct {
		PendingSteps int `json:"pending_steps"`
		Nodes        []struct {
			Reachable      bool
			KubernetesNode *struct{ Ready string } `json:"kubernetes_node"`
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status: %v\n%s%s", err, out, errOut)
	}
	if st.PendingSteps != 0 || len(st.Nodes) != 1 || !st.Nodes[0].Reachable {
		t.Errorf("status -o json: %s", out)
	}
	// The kubelet registers a moment after it answers its healthz.
	testwait.For(t, time.Minute, "status exiting 0 after apply", func() error {
		if out, errOut, code = run(t, args("status")...); code != 0 {
			return fmt.Errorf("exit %d\n%s%s", code, out, errOut)
		}
		return nil
	})
	if !strings.Contains(out, "Ready "+sandbox.KubernetesVersion) || !strings.Contains(out, "In sync with cluster.yml") {
		t.Fatalf("status after apply: exit %d\n%s%s", code, out, errOut)
	}

	out, _, code = run(t, args("kubeconfig")...)
	if code != 0 || !strings.Contains(out, "https://"+node+":6443") || !strings.Contains(out, "client-key-data:") {
		t.Fatalf("kubeconfig: exit %d\n%s", code, out)
	}

	// A snapshot of the one-member etcd: saved, listed, deleted.
	out, errOut, code = run(t, args("snapshot", "save", "--name", "cli-snap")...)
	if code != 0 || !strings.Contains(out, "Snapshot cli-snap saved") || !strings.Contains(out, "on 1 of 1 etcd node(s)") {
		t.Fatalf("snapshot save: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(s.Nodes[0].Dir, "opt-rke", "etcd-snapshots", "cli-snap.json")); err != nil {
		t.Errorf("snapshot save left no sidecar on the node: %v", err)
	}
	out, errOut, code = run(t, args("snapshot", "list")...)
	if code != 0 || !strings.Contains(out, "cli-snap") || !strings.Contains(out, node) {
		t.Errorf("snapshot list: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, args("snapshot", "delete", "cli-snap")...)
	if code != 0 || !strings.Contains(out, node+": deleted cli-snap") {
		t.Errorf("snapshot delete: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, args("snapshot", "list", "-o", "json")...)
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("snapshot list after delete: exit %d\n%s%s", code, out, errOut)
	}

	// The saved plan was made for a node without containers: refused now.
	out, errOut, code = run(t, args("apply", "--plan", planFile)...)
	if code != 1 || !strings.Contains(errOut, "the nodes changed since") {
		t.Fatalf("apply of a stale saved plan: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = run(t, args("plan")...)
	if code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("plan after apply: exit %d\n%s", code, out)
	}

	// The same cluster.yml with the node's SSH key inline, encrypted by the
	// real sops CLI: plan and apply decrypt it, change nothing, and never
	// print the key.
	t.Run("sops", func(t *testing.T) {
		sops := sopscli.Binary(t)
		encrypted, keyBody := encryptWithInlineKey(t, sops, yml)
		for _, cmd := range [][]string{{"plan"}, {"apply", "--yes"}} {
			out, errOut, code := run(t, append(cmd, "-f", encrypted, "--state-dir", state)...)
			if code != 0 || !strings.Contains(out, "No changes") {
				t.Errorf("%s of the encrypted cluster.yml: exit %d\n%s%s", cmd[0], code, out, errOut)
			}
			for _, l := range keyBody {
				if strings.Contains(out+errOut, l) {
					t.Errorf("%s of the encrypted cluster.yml prints the SSH key:\n%s%s", cmd[0], out, errOut)
					break
				}
			}
		}
	})

	// apply --watch: a saved change is applied, an invalid save is
	// reported and changes nothing, Ctrl-C ends it.
	t.Run("watch", func(t *testing.T) {
		if _, _, code := run(t, args("apply", "--watch")...); code != 1 {
			t.Errorf("--watch without --yes: exit %d", code)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wout, werr syncBuffer
		done := make(chan int, 1)
		go func() {
			_, _, code := runTo(t, ctx, "", &wout, &werr, args("apply", "--watch", "--yes")...)
			done <- code
		}()
		waitFor := func(what, text string) {
			t.Helper()
			testwait.For(t, 2*time.Minute, what, func() error {
				if out := wout.String() + werr.String(); !strings.Contains(out, text) {
					return fmt.Errorf("no %q in:\n%s", text, out)
				}
				return nil
			})
		}
		waitFor("first round", "Watching ")
		changed := strings.Replace(yml, `conntrack-max-per-core: "0"`, "conntrack-max-per-core: \"0\"\n      v: \"3\"", 1)
		if changed == yml {
			t.Fatal("the example cluster.yml has no kube-proxy extra_args to extend")
		}
		if err := os.WriteFile(file, []byte(changed), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor("apply of the saved change", "replaced kube-proxy (args changed: +--v=3")
		if err := os.WriteFile(file, []byte(changed+"\nkubernetes_verison: v1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor("diagnostics of an invalid save", `unknown key "kubernetes_verison"`)
		cancel()
		if code := testwait.Recv(t, done, time.Minute, "--watch's end after cancel", nil); code != 0 {
			t.Errorf("--watch ended with exit %d", code)
		}
		if err := os.WriteFile(file, []byte(changed), 0o600); err != nil {
			t.Fatal(err)
		}
	})

	// A snapshot restored through the CLI: declined, nothing changes; with
	// --yes, the cluster runs on the snapshot.
	t.Run("snapshot restore", func(t *testing.T) {
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
	})

	out, errOut, code = run(t, args("remove", "--yes")...)
	if code != 0 || !strings.Contains(out, "Remove complete") || !strings.Contains(out, "7 removed") {
		t.Fatalf("remove: exit %d\n%s%s", code, out, errOut)
	}
	left, _ := os.ReadDir(filepath.Join(s.Nodes[0].Dir, "etc-kubernetes"))
	if len(left) > 0 {
		t.Errorf("remove left files in /etc/kubernetes: %v", left)
	}
	out, _, code = run(t, args("plan")...)
	if code != 2 || !strings.Contains(out, "Plan: 7 to create") || !strings.Contains(out, "Certificates: state directory") {
		t.Errorf("plan after remove: exit %d\n%s", code, out)
	}
}
