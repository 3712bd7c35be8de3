package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/secretsenc"
)

// TestRotateKeyRefuses: as rke encrypt rotate-key, rotate-key refuses a
// cluster without a key rigger generates, before any connection.
func TestRotateKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	node := "ssh_key_path: " + dir + "/id\nnodes: [{address: 192.0.2.10, user: u, role: [etcd, controlplane, worker]}]\n"
	for _, tc := range []struct {
		name, yml, want string
	}{
		{"encryption off", node, "secrets_encryption_config.enabled is not true"},
		{"custom_config", node + "services: {kube-api: {secrets_encryption_config: {enabled: true, custom_config: " +
			"{apiVersion: apiserver.config.k8s.io/v1, kind: EncryptionConfiguration, resources: [{resources: [secrets], providers: [{identity: {}}]}]}}}}\n",
			"only the key it generates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCluster(t, tc.yml)
			_, errOut, code := run(t, "encrypt", "rotate-key", "-f", path, "--state-dir", t.TempDir()+"/state", "--yes")
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr:\n%s", code, errOut)
			}
		})
	}
}

// TestRenderEncryption: the plan names the keys, where they come from and
// the stages of a pending rotation.
func TestRenderEncryption(t *testing.T) {
	var b strings.Builder
	renderEncryption(&b, &decide.Planned{Encryption: &report.Encryption{
		Source: pkisource.Source{Kind: pkisource.StateDir, From: "/state"},
		Keys:   []string{"k-abcde"},
		Op:     &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: secretsenc.StageAddKey},
		Stages: secretsenc.Stages(secretsenc.KindRotate),
	}})
	want := "Secrets encryption: keys k-abcde (state directory /state)\n" +
		"  key rotation pending (rotate_encryption_key); this plan carries out stage add-key, an apply then plans each next one: add-key -> write-new-key -> rewrite-secrets -> drop-old-keys\n\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	renderEncryption(&b, &decide.Planned{})
	if b.Len() != 0 {
		t.Errorf("no generated key: %q", b.String())
	}
}

// TestRenderBlocked: the plan says which rolling phase its budgets stop,
// and why; a blocked phase without steps is not worth a word.
func TestRenderBlocked(t *testing.T) {
	used := errors.New("upgrade_strategy.max_unavailable_worker allows 1 of the 3 worker nodes to be unavailable, and 1 are already (10.0.0.3)")
	pl := &decide.Planned{Plan: &plan.Plan{Steps: []plan.Step{{Node: "10.0.0.1", Component: "kubelet", Action: plan.Replace, Phase: plan.PhaseWorker}}},
		Budgets: plan.Budgets{WorkersBlocked: used, ControlPlaneBlocked: used}}
	var b strings.Builder
	renderBlocked(&b, pl)
	if want := "Phase worker blocked, nothing changes there: " + used.Error() + "\n\n"; b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
