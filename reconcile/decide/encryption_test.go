package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// encNow is the time of the encryption tests' plans.
var encNow = time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)

// encCase is a two-node cluster (10.0.0.1 controlplane, 10.0.0.2 worker)
// whose secrets encryption is set by enc, what its state directory holds
// and what the command line asks.
type encCase struct {
	c         *spec.Cluster
	st        *State
	rotateKey bool
}

// encCluster is the case of enc and cluster.yml's rotate_encryption_key
// (rotate), with an empty state directory.
func encCluster(t *testing.T, enc *spec.SecretsEncryptionConfig, rotate bool) *encCase {
	t.Helper()
	c := &spec.Cluster{ClusterName: "c", Nodes: []spec.Node{
		{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleEtcd, spec.RoleControlPlane}},
		{Address: "10.0.0.2", User: "u", Role: []string{spec.RoleWorker}},
	}}
	c.Services.KubeAPI.SecretsEncryptionConfig = enc
	c.RotateEncryptionKey = rotate
	spec.SetDefaults(c)
	return &encCase{c: c, st: &State{}}
}

// observed are the two nodes, both reachable, with the controlplane node's
// encryption file (its hash; none when file is nil).
func observed(file []byte, reachable bool) *observe.Cluster {
	cp := &observe.Node{Address: "10.0.0.1", Reachable: reachable, FilesRead: reachable, Files: map[string]string{},
		Containers: map[string]observe.Container{desired.KubeAPIServer: {Name: desired.KubeAPIServer, State: "running"}}}
	if file != nil {
		cp.Files[desired.EncryptionConfigFile] = observe.FileHash(file)
	}
	return &observe.Cluster{Nodes: map[string]*observe.Node{
		"10.0.0.1": cp,
		"10.0.0.2": {Address: "10.0.0.2", Reachable: true, FilesRead: true, Files: map[string]string{}},
	}}
}

// resolved is the generated key of a plan (secretsenc.Decide, as Plan
// decides it) with what people are shown of it.
type resolved struct {
	*secretsenc.Plan
	info *report.Encryption
}

// resolveEncryption decides the generated key of a plan of s from its
// state and o (secretsenc.Decide, as Compute decides it); nil when
// cluster.yml asks for none.
func resolveEncryption(t *testing.T, s *encCase, o *observe.Cluster) (*resolved, error) {
	t.Helper()
	p, err := secretsenc.Decide(secretsenc.WantOf(s.c, "/state", s.rotateKey, encNow), s.st.Key, s.st.KeyRecord, o)
	if p == nil {
		return nil, err
	}
	return &resolved{Plan: p, info: report.EncryptionOf(p, "/state")}, err
}

func TestResolveEncryptionNewKey(t *testing.T) {
	s := encCluster(t, &spec.SecretsEncryptionConfig{Enabled: true}, false)
	r, err := resolveEncryption(t, s, observed(nil, true))
	if err != nil {
		t.Fatal(err)
	}
	if r.info.Source.Kind != pkisource.New || len(r.info.Keys) != 1 || !r.SaveConfig || r.NewKeyBlocked != nil {
		t.Fatalf("new key: %+v, save %v, blocked %v", r.info, r.SaveConfig, r.NewKeyBlocked)
	}
	if op := r.Record.Op; op == nil || op.Kind != secretsenc.KindEncrypt || op.Stage != secretsenc.StageRewrite {
		t.Fatalf("a new key rewrites the Secrets: op %+v", op)
	}
	if !strings.Contains(string(r.File), r.Cur.Keys[0].Secret) || !r.Work() {
		t.Fatal("the file holds the new key and there is work")
	}

	// A controlplane node that may hold the key does not answer: the plan
	// shows a new key, apply refuses it.
	r, err = resolveEncryption(t, s, observed(nil, false))
	if err != nil {
		t.Fatal(err)
	}
	pl := &Planned{Plan: &plan.Plan{}, Staged: operations(&pkisource.Resolved{}, r.Plan), encryption: r.Plan}
	var e *stall.Error
	if err := pl.Blocked(); !errors.As(err, &e) || e.Reason != stall.NewKeyBlocked || !strings.Contains(err.Error(), "10.0.0.1") {
		t.Fatalf("Blocked: %v", err)
	}
}

func TestResolveEncryptionFromState(t *testing.T) {
	s := encCluster(t, &spec.SecretsEncryptionConfig{Enabled: true}, false)
	cur, err := secretsenc.New()
	if err != nil {
		t.Fatal(err)
	}
	s.st.Key = cur
	// The node has it, or has none yet: the state's key.
	for _, file := range [][]byte{cur.Marshal(), nil} {
		r, err := resolveEncryption(t, s, observed(file, true))
		if err != nil {
			t.Fatal(err)
		}
		if r.info.Source.Kind != pkisource.StateDir || r.SaveConfig || r.Work() || string(r.File) != string(cur.Marshal()) {
			t.Fatalf("state key: %+v save %v work %v", r.info, r.SaveConfig, r.Work())
		}
	}
	// The node holds another key: refused, naming the node, never a key.
	other, _ := secretsenc.New()
	_, err = resolveEncryption(t, s, observed(other.Marshal(), true))
	var e *stall.Error
	if !errors.As(err, &e) || e.Reason != stall.StateDamaged || !strings.Contains(err.Error(), "10.0.0.1") ||
		strings.Contains(err.Error(), other.Keys[0].Secret) || strings.Contains(err.Error(), cur.Keys[0].Secret) {
		t.Fatalf("another key on the node: %v", err)
	}

	// During a rotation the node may hold the configuration before it.
	n, _ := secretsenc.NewKey(cur.Names())
	rot := &secretsenc.Config{Keys: []secretsenc.Key{n, cur.Keys[0]}}
	s.st.Key = rot
	s.st.KeyRecord = secretsenc.Record{RotateHandled: true, Op: &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: secretsenc.StageWriteKey, NewKey: n.Name}}
	r, err := resolveEncryption(t, s, observed(cur.Marshal(), true))
	if err != nil {
		t.Fatalf("a node at the stage before: %v", err)
	}
	if strings.Join(r.info.Keys, ",") != n.Name+","+cur.Keys[0].Name || r.info.Op == nil || !r.Work() {
		t.Fatalf("rotation at write-new-key: keys %v, op %+v", r.info.Keys, r.info.Op)
	}
	if len(r.info.Stages) != 3 || r.info.Stages[0] != secretsenc.StageWriteKey {
		t.Fatalf("stages left: %v", r.info.Stages)
	}
}

// TestResolveEncryptionRotateRequest: rotate_encryption_key is a one-shot
// request: pending until handled, nothing while it stays, and cleared
// when cluster.yml drops it.
func TestResolveEncryptionRotateRequest(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rotate        bool
		handled       bool
		wantPending   bool
		wantSaveClear bool
	}{
		{"requested", true, false, true, false},
		{"requested, done already", true, true, false, false},
		{"request removed", false, true, false, true},
		{"never requested", false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := encCluster(t, &spec.SecretsEncryptionConfig{Enabled: true}, tc.rotate)
			cur, _ := secretsenc.New()
			s.st.Key = cur
			s.st.KeyRecord = secretsenc.Record{RotateHandled: tc.handled}
			r, err := resolveEncryption(t, s, observed(cur.Marshal(), true))
			if err != nil {
				t.Fatal(err)
			}
			if pending := r.info.Op != nil; pending != tc.wantPending {
				t.Fatalf("rotation pending %v, want %v", pending, tc.wantPending)
			}
			if pending := r.info.Op != nil; pending && (len(r.info.Stages) != 4 || !r.info.Op.StartedAt.IsZero()) {
				t.Fatalf("pending rotation: %+v, stages %v", r.info.Op, r.info.Stages)
			}
			if r.SaveRecord != tc.wantSaveClear || tc.wantSaveClear && r.Record.RotateHandled {
				t.Fatalf("save record %v (handled %v), want the request cleared: %v", r.SaveRecord, r.Record.RotateHandled, tc.wantSaveClear)
			}
			if r.Work() != (tc.wantPending || tc.wantSaveClear) {
				t.Fatalf("work %v", r.Work())
			}
		})
	}
}

// TestEncryptionNotTurnedOff: a cluster whose Secrets are encrypted with
// the generated key is not applied without it.
func TestEncryptionNotTurnedOff(t *testing.T) {
	cur, _ := secretsenc.New()
	for _, tc := range []struct {
		name    string
		enc     *spec.SecretsEncryptionConfig
		inState bool
		onNode  []byte
		want    string
	}{
		{"disabled, key in state", &spec.SecretsEncryptionConfig{}, true, nil, "state directory"},
		{"removed, key on a node", nil, false, cur.Marshal(), "node 10.0.0.1"},
		{"never enabled", nil, false, nil, ""},
		{"RKE's empty file after disabling", nil, false, []byte{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := encCluster(t, tc.enc, false)
			if tc.inState {
				s.st.Key = cur
			}
			r, err := resolveEncryption(t, s, observed(tc.onNode, true))
			if r != nil {
				t.Fatalf("a generated key without encryption enabled: %+v", r.info)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *stall.Error
			if !errors.As(err, &e) || e.Reason != stall.InvalidSpec || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "enabled: true") || strings.Contains(err.Error(), cur.Keys[0].Secret) {
				t.Fatalf("got %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// TestCustomConfigKeepsGeneratedKey: a custom_config that takes the place
// of the key rigger generated must hold that key's secret, or the Secrets
// it encrypted could no longer be read; one that holds it is the user's.
func TestCustomConfigKeepsGeneratedKey(t *testing.T) {
	cur, _ := secretsenc.New()
	custom := func(secrets ...string) spec.Object {
		var keys []any
		for i, sec := range secrets {
			keys = append(keys, map[string]any{"name": fmt.Sprintf("k%d", i), "secret": sec})
		}
		return spec.Object{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
			"resources": []any{map[string]any{"resources": []any{"secrets"}, "providers": []any{
				map[string]any{"aescbc": map[string]any{"keys": keys}}, map[string]any{"identity": map[string]any{}}}}}}
	}
	mine := "c2VjcmV0LW9mLXRoZS11c2VyLTMyLWJ5dGVzLWxvbmchIQ=="
	for _, tc := range []struct {
		name    string
		config  spec.Object
		inState bool
		refused bool
	}{
		{"without the generated key", custom(mine), true, true},
		{"with it, after the user's", custom(mine, cur.Keys[0].Secret), true, false},
		{"no generated key in the state directory", custom(mine), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := encCluster(t, &spec.SecretsEncryptionConfig{Enabled: true, CustomConfig: tc.config}, false)
			if tc.inState {
				s.st.Key = cur
			}
			r, err := resolveEncryption(t, s, observed(cur.Marshal(), true))
			if r != nil {
				t.Fatalf("a generated key with custom_config: %+v", r.info)
			}
			var e *stall.Error
			switch {
			case !tc.refused && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused && (!errors.As(err, &e) || e.Reason != stall.InvalidSpec || !strings.Contains(err.Error(), cur.Keys[0].Name) ||
				strings.Contains(err.Error(), cur.Keys[0].Secret)):
				t.Fatalf("got %v, want a refusal naming key %s, not its secret", err, cur.Keys[0].Name)
			}
		})
	}
}

// TestRotateKeyOption: rigger encrypt rotate-key's request
// (Asked.RotateKey) shows a pending rotation whatever the record of
// rotate_encryption_key says (reconcile.Open refuses it without a
// generated key: TestOpenRefusesRotateKey).
func TestRotateKeyOption(t *testing.T) {
	s := encCluster(t, &spec.SecretsEncryptionConfig{Enabled: true}, true)
	cur, _ := secretsenc.New()
	s.st.Key = cur
	s.st.KeyRecord = secretsenc.Record{RotateHandled: true}
	r, err := resolveEncryption(t, s, observed(cur.Marshal(), true))
	if err != nil || r.info.Op != nil {
		t.Fatalf("before the request: op %+v, %v", r.info.Op, err)
	}
	s.rotateKey = true
	r, err = resolveEncryption(t, s, observed(cur.Marshal(), true))
	if err != nil || r.info.Op == nil || r.info.Op.Kind != secretsenc.KindRotate {
		t.Fatalf("after the request: op %+v, %v", r.info.Op, err)
	}
}

// TestEncryptionStatusHasNoKey: status.yml and the plan's JSON name the
// keys, never their secrets.
func TestEncryptionStatusHasNoKey(t *testing.T) {
	s := encCluster(t, &spec.SecretsEncryptionConfig{Enabled: true}, true)
	r, err := resolveEncryption(t, s, observed(nil, true))
	if err != nil {
		t.Fatal(err)
	}
	pl := &Planned{Plan: &plan.Plan{}, Desired: &desired.Cluster{}, Observed: &observe.Cluster{}, Encryption: r.info}
	b, err := json.Marshal([]any{pl.Status(), pl.Report()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), r.Cur.Keys[0].Name) || strings.Contains(string(b), r.Cur.Keys[0].Secret) {
		t.Fatalf("status %s: want the key's name and not its secret", b)
	}
}
