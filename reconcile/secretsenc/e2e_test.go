package secretsenc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// TestEncryptionSandbox: on a one-node sandbox cluster, turning
// secrets_encryption_config on makes rigger generate a key, keep it in
// the state directory (0600) and write it to the node; the Secret created
// before and one created after are stored in etcd with the key's
// k8s:enc:aescbc:v1:<name>: prefix (read with etcdctl in the etcd
// container). rotate_encryption_key: true shows the rotation's stages in
// the plan; an apply stopped at its second stage resumes there, without a
// second restart of the API server for it; once done
// both Secrets are stored with the new key, the old key is gone from the
// node, the Secrets read back, and the request is not carried out again.
// rigger encrypt rotate-key's request (Options.RotateKey) rotates
// once more through the same stages. A state directory with another key is refused; a lost state directory
// gets the key back from the node, not a new one.
func TestEncryptionSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 24, Nodes: 1, Images: true})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	n := s.Nodes[0]
	cli := sandboxtest.DockerClient(t, n)
	nodeFile := filepath.Join(n.Dir, "etc-kubernetes", strings.TrimPrefix(desired.EncryptionConfigFile, "/etc/kubernetes/"))
	a := rt.New(t)
	cluster := func(enabled, rotate bool) *spec.Cluster {
		return rt.Cluster(t, s, rt.Roles(1), func(c *spec.Cluster) {
			rt.NetworkOnly(c)
			if enabled {
				c.Services.KubeAPI.SecretsEncryptionConfig = &spec.SecretsEncryptionConfig{Enabled: true}
			}
			c.RotateEncryptionKey = rotate
		})
	}
	const secretValue = "s3cret-value-in-clear"
	secrets := []string{"before-encryption", "after-encryption"}
	createSecret := func(t *testing.T, c *spec.Cluster, name string) {
		cs := a.Client(ctx, t, c)
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, StringData: map[string]string{"v": secretValue}}
		if _, err := cs.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// stored checks that every Secret of secrets is stored in etcd
	// encrypted with key, and reads back through the API server.
	stored := func(t *testing.T, c *spec.Cluster, key string) {
		t.Helper()
		for _, name := range secrets {
			raw := rt.EtcdGet(ctx, t, cli, "/registry/secrets/default/"+name)
			if want := "k8s:enc:aescbc:v1:" + key + ":"; !bytes.HasPrefix(raw, []byte(want)) {
				t.Errorf("Secret %s is stored as %.40q…, want the prefix %s", name, raw, want)
			}
			if bytes.Contains(raw, []byte(secretValue)) {
				t.Errorf("Secret %s is stored in clear", name)
			}
			got, err := a.Client(ctx, t, c).CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("read Secret %s back: %v", name, err)
			}
			if string(got.Data["v"]) != secretValue {
				t.Errorf("Secret %s reads back as %q", name, got.Data["v"])
			}
		}
	}
	stateKey := func(t *testing.T) *secretsenc.Config {
		t.Helper()
		cfg, err := secretsenc.Load(a.StateDir)
		if err != nil || cfg == nil {
			t.Fatalf("the state's key: %v, %v", cfg, err)
		}
		onNode, err := os.ReadFile(nodeFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(onNode, cfg.Marshal()) {
			t.Errorf("the node's %s is not the state's %s (keys %v)", nodeFile, secretsenc.File, cfg.Names())
		}
		return cfg
	}

	if !t.Run("converge without encryption", func(t *testing.T) {
		a.Apply(ctx, t, cluster(false, false))
		createSecret(t, cluster(false, false), secrets[0])
		if raw := rt.EtcdGet(ctx, t, cli, "/registry/secrets/default/"+secrets[0]); !bytes.Contains(raw, []byte(secretValue)) {
			t.Fatalf("without encryption the Secret is stored as %.40q…, want it in clear", raw)
		}
	}) {
		return
	}

	c := cluster(true, false)
	var first string
	if !t.Run("enable", func(t *testing.T) {
		pl := a.Apply(ctx, t, c)
		if e := pl.Encryption; e == nil || e.Source.Kind != pkisource.New || e.Op == nil || e.Op.Kind != secretsenc.KindEncrypt {
			t.Fatalf("plan's encryption: %+v, want a new key and the Secrets rewritten", e)
		}
		cfg := stateKey(t)
		if len(cfg.Keys) != 1 {
			t.Fatalf("keys %v, want one", cfg.Names())
		}
		first = cfg.Keys[0].Name
		if fi, err := os.Stat(filepath.Join(a.StateDir, secretsenc.File)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s in the state directory: %v, mode %v; want 0600", secretsenc.File, err, fi.Mode().Perm())
		}
		createSecret(t, c, secrets[1])
		stored(t, c, first)
		a.InSync(ctx, t, c)
	}) {
		return
	}

	rotate := cluster(true, true)
	if !t.Run("rotate", func(t *testing.T) {
		pl := a.Plan(ctx, t, rotate)
		e := pl.Encryption
		if e == nil || e.Op == nil || e.Op.Kind != secretsenc.KindRotate || len(e.Stages) != 4 || !pl.Changes() {
			t.Fatalf("plan with rotate_encryption_key: %+v, want a pending rotation of 4 stages", e)
		}
		// Stopped when the new key becomes the write key: the state says
		// so, the node still has the first stage's file.
		sess := a.Session(t, rotate)
		lk := a.Lock(ctx, t, sess)
		stopCtx, stop := context.WithCancel(ctx)
		defer stop()
		pl, err := sess.Plan(stopCtx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sess.Apply(stopCtx, lk, pl, reconcile.ApplyOptions{Hooks: plan.Hooks{
			Phase: func(_ plan.Phase, title string) {
				t.Logf("==> %s", title)
				if strings.Contains(title, string(secretsenc.StageWriteKey)) {
					stop()
				}
			},
			Step: func(node, msg string, err error) { t.Logf("    %s: %s %v", node, msg, err) },
		}})
		lk.Release()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("apply stopped at %s: %v", secretsenc.StageWriteKey, err)
		}
		rec, err := secretsenc.LoadRecord(a.StateDir)
		if err != nil || rec.Op == nil || rec.Op.Stage != secretsenc.StageWriteKey || !rec.RotateHandled {
			t.Fatalf("record after the stop: %+v, %v", rec, err)
		}
		if pl := a.Plan(ctx, t, rotate); pl.Encryption.Op == nil || pl.Encryption.Stages[0] != secretsenc.StageWriteKey {
			t.Fatalf("plan after the stop: %+v, want the rotation at %s", pl.Encryption, secretsenc.StageWriteKey)
		}

		// The resumed apply's plan writes the stage's file and restarts
		// the API server: the stage does not restart it again.
		a.Apply(ctx, t, rotate)
		var restarts []string
		for _, e := range a.Events() {
			if strings.Contains(e, "restarted "+desired.KubeAPIServer) {
				restarts = append(restarts, e)
			}
		}
		if len(restarts) != 2 {
			t.Errorf("API server restarts of the resumed rotation:\n%s\nwant two: the plan's, for stage %s's file, and stage %s's",
				strings.Join(restarts, "\n"), secretsenc.StageWriteKey, secretsenc.StageDropOld)
		}
		cfg := stateKey(t)
		if len(cfg.Keys) != 1 || cfg.Keys[0].Name == first {
			t.Fatalf("keys after the rotation %v, want one new key (the old one was %s)", cfg.Names(), first)
		}
		if b, _ := os.ReadFile(nodeFile); bytes.Contains(b, []byte(first)) {
			t.Errorf("the old key %s is still in the node's %s", first, nodeFile)
		}
		stored(t, c, cfg.Keys[0].Name)
		// The request is carried out once while it stays in cluster.yml.
		inSyncOnceReady(ctx, t, a, rotate)
		if pl := a.Plan(ctx, t, rotate); pl.Encryption.LastRotatedKey != cfg.Keys[0].Name {
			t.Errorf("last rotation %q, want %s", pl.Encryption.LastRotatedKey, cfg.Keys[0].Name)
		}
	}) {
		return
	}

	t.Run("rotate-key", func(t *testing.T) {
		// rigger encrypt rotate-key: the same rotation, asked of a session
		// rather than by cluster.yml (which still says true, handled).
		before := stateKey(t)
		a.Open = func(c *spec.Cluster, o reconcile.Options) (*reconcile.Session, error) {
			o.RotateKey = true
			return reconcile.Open(c, o)
		}
		sess := a.Session(t, rotate)
		a.Open = nil
		pl, err := sess.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e := pl.Encryption; e.Op == nil || e.Op.Kind != secretsenc.KindRotate || !pl.Changes() {
			t.Fatalf("plan with Options.RotateKey: %+v, want a pending rotation", e)
		}
		if _, err := a.ApplyPlanned(ctx, t, sess, pl); err != nil {
			t.Fatal(err)
		}
		after := stateKey(t)
		if len(after.Keys) != 1 || after.Covers(before) {
			t.Fatalf("keys %v after rotate-key, want one other than %v", after.Names(), before.Names())
		}
		stored(t, c, after.Keys[0].Name)
		inSyncOnceReady(ctx, t, a, rotate)
	})

	t.Run("state", func(t *testing.T) {
		// The request leaves cluster.yml: only the record changes.
		pl := a.Apply(ctx, t, c)
		if !pl.Plan.Empty() {
			t.Errorf("dropping rotate_encryption_key changes the nodes: %v", rt.StepLines(pl.Plan))
		}
		want := stateKey(t)

		// Another key in the state directory is refused.
		keep, err := os.ReadFile(filepath.Join(a.StateDir, secretsenc.File))
		if err != nil {
			t.Fatal(err)
		}
		other, _ := secretsenc.New()
		if err := secretsenc.Save(a.StateDir, other); err != nil {
			t.Fatal(err)
		}
		_, err = a.Session(t, c).Plan(ctx)
		if reason, stalled := stall.Classify(err); reason != stall.StateDamaged || !stalled || !strings.Contains(err.Error(), n.Address) {
			t.Errorf("plan with another key in the state directory: %v (%s)", err, reason)
		}
		if strings.Contains(err.Error(), other.Keys[0].Secret) || strings.Contains(err.Error(), want.Keys[0].Secret) {
			t.Errorf("the error shows a key: %v", err)
		}
		if err := os.WriteFile(filepath.Join(a.StateDir, secretsenc.File), keep, 0o600); err != nil {
			t.Fatal(err)
		}

		// The state directory lost: the key comes back from the node.
		if err := os.RemoveAll(a.StateDir); err != nil {
			t.Fatal(err)
		}
		pl = a.Apply(ctx, t, c)
		if e := pl.Encryption; e == nil || e.Source.Kind != pkisource.Recovered || e.Source.From != n.Address {
			t.Fatalf("encryption after losing the state directory: %+v, want recovered from %s", e, n.Address)
		}
		if !pl.Plan.Empty() {
			t.Errorf("a recovered key changes the nodes: %v", rt.StepLines(pl.Plan))
		}
		if got := stateKey(t); !got.Covers(want) || !want.Covers(got) {
			t.Errorf("recovered keys %v, want %v", got.Names(), want.Names())
		}
		stored(t, c, want.Keys[0].Name)
	})
}

// inSyncOnceReady is a.InSync, waiting up to two minutes while the only
// change left is a Node not Ready: after the only API server restarts
// several times in a row, the controller manager's lagging view of the
// kubelet's heartbeats can mark its Node Unknown for up to a minute after
// the apply (docs/nodes.md), and the next apply would wait for it.
func inSyncOnceReady(ctx context.Context, t *testing.T, a *rt.Applier, c *spec.Cluster) {
	t.Helper()
	rt.Eventually(ctx, t, 2*time.Minute, "the plan empty", func(ctx context.Context) (bool, error) {
		pl := a.Plan(ctx, t, c)
		if !pl.Changes() {
			return true, nil
		}
		other := !pl.Plan.Empty() || len(pl.NodeChanges) == 0 || pl.Addons != nil && !pl.Addons.Empty()
		for _, nc := range pl.NodeChanges {
			other = other || !strings.HasPrefix(nc.Change, "repair: not Ready")
		}
		if other {
			t.Fatalf("not in sync: steps %v, Node changes %+v", rt.StepLines(pl.Plan), pl.NodeChanges)
		}
		return false, fmt.Errorf("Node changes %+v", pl.NodeChanges)
	})
}
