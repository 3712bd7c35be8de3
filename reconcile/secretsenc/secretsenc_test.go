package secretsenc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/statedir"
)

func key(name string, b byte) Key {
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = b
	}
	return Key{Name: name, Secret: base64.StdEncoding.EncodeToString(raw)}
}

// rkeFile is RKE v1.8.14's MultiKeyEncryptionProviderFile template filled
// with two keys, as RKE writes it to the nodes and to cluster.rkestate.
const rkeFile = `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources:
  - secrets
  providers:
  - aescbc:
      keys:
      - name: k-abcde
        secret: QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=
      - name: k-fghjk
        secret: QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=
  - identity: {}`

func TestMarshalIsRKEs(t *testing.T) {
	c := &Config{Keys: []Key{key("k-abcde", 'A'), key("k-fghjk", 'B')}}
	if diff := cmp.Diff(rkeFile, string(c.Marshal())); diff != "" {
		t.Fatalf("Marshal differs from RKE's file (-rke +rigger):\n%s", diff)
	}
	back, err := Parse("test", []byte(rkeFile))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, back); diff != "" {
		t.Fatalf("Parse(RKE's file) (-want +got):\n%s", diff)
	}
	off := &Config{Keys: []Key{key("k-abcde", 'A')}, IdentityFirst: true}
	back, err = Parse("test", off.Marshal())
	if err != nil || !back.IdentityFirst || len(back.Keys) != 1 {
		t.Fatalf("identity first: %+v, %v", back, err)
	}
}

func TestParseRefuses(t *testing.T) {
	good := key("k-abcde", 'A')
	short := Key{Name: "k-short", Secret: base64.StdEncoding.EncodeToString([]byte("0123456789"))}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"not yaml", "{", "not YAML"},
		{"wrong kind", strings.Replace(rkeFile, "EncryptionConfiguration", "Config", 1), "kind"},
		{"configmaps too", strings.Replace(rkeFile, "  - secrets\n", "  - secrets\n  - configmaps\n", 1), "want [secrets]"},
		{"other provider", strings.Replace(rkeFile, "identity: {}", "secretbox: {keys: []}", 1), "not YAML"},
		{"no identity", strings.Replace(rkeFile, "\n  - identity: {}", "", 1), "providers"},
		{"short key", string((&Config{Keys: []Key{good, short}}).Marshal()), "10 bytes"},
		{"not base64", strings.Replace(rkeFile, "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=", "not-base64!!", 1), "not base64"},
		{"same name", strings.Replace(rkeFile, "k-fghjk", "k-abcde", 1), "two aescbc keys"},
		{"no key", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: []}\n  - identity: {}\n", "no key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("node 10.0.0.1", []byte(tc.file))
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "node 10.0.0.1") {
				t.Fatalf("got %v, want a FormatError naming the source and saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), good.Secret) || strings.Contains(err.Error(), "QkJC") || strings.Contains(err.Error(), short.Secret) {
				t.Fatalf("error shows a secret: %v", err)
			}
		})
	}
}

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		k, err := NewKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^k-[bcdfghjklmnpqrstvwxz2456789]{5}$`).MatchString(k.Name) {
			t.Fatalf("name %q is not RKE's k-xxxxx", k.Name)
		}
		raw, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil || len(raw) != 32 {
			t.Fatalf("secret of %s: %d bytes, %v", k.Name, len(raw), err)
		}
		if seen[k.Secret] {
			t.Fatal("the same secret twice")
		}
		seen[k.Secret] = true
		if s := fmt.Sprintf("%v %+v %#v %s", k, k, k, k); strings.Contains(s, k.Secret) {
			t.Fatalf("a printed Key shows its secret: %s", s)
		}
	}
	k, err := NewKey([]string{"k-bbbbb"})
	if err != nil || k.Name == "k-bbbbb" {
		t.Fatalf("NewKey avoiding a taken name: %v, %v", k, err)
	}
}

func TestSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if c, err := Load(dir); c != nil || err != nil {
		t.Fatalf("Load of an empty state: %v, %v", c, err)
	}
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, File))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v, %v", fi, err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, back); diff != "" {
		t.Fatalf("Load after Save (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte("kind: Nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	var de *statedir.DamagedError
	if _, err := Load(dir); !errors.As(err, &de) {
		t.Fatalf("Load of a damaged file: %v, want a DamagedError", err)
	}
}

func TestDesiredStages(t *testing.T) {
	a, b, n := key("k-aaaaa", 'A'), key("k-bbbbb", 'B'), key("k-nnnnn", 'N')
	cur := &Config{Keys: []Key{a, b, n}}
	// Where the new key sits in the saved file must not matter: a stop
	// may leave any stage's.
	shuffled := &Config{Keys: []Key{n, a, b}}
	for _, tc := range []struct {
		stage Stage
		want  []Key
	}{
		{StageAddKey, []Key{a, b, n}},
		{StageWriteKey, []Key{n, a, b}},
		{StageRewrite, []Key{n, a, b}},
		{StageDropOld, []Key{n}},
	} {
		t.Run(string(tc.stage), func(t *testing.T) {
			op := &Op{Kind: KindRotate, Stage: tc.stage, NewKey: n.Name}
			got, err := Desired(cur, op)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Keys); diff != "" {
				t.Fatalf("keys (-want +got):\n%s", diff)
			}
			if got2, _ := Desired(shuffled, op); tc.stage != StageAddKey && !cmp.Equal(got.Keys, got2.Keys) {
				t.Fatalf("another saved order gives %v, want %v", got2.Names(), got.Names())
			}
		})
	}
	// The new key not saved yet: the first stage keeps cur, later ones refuse.
	old := &Config{Keys: []Key{a}}
	if got, err := Desired(old, &Op{Kind: KindRotate, Stage: StageAddKey, NewKey: n.Name}); err != nil || !cmp.Equal(got, old) {
		t.Fatalf("add-key without the key saved: %v, %v", got, err)
	}
	_, err := Desired(old, &Op{Kind: KindRotate, Stage: StageRewrite, NewKey: n.Name})
	if err == nil || !strings.Contains(err.Error(), "k-nnnnn") || strings.Contains(err.Error(), a.Secret) {
		t.Fatalf("rewrite without the new key: %v", err)
	}
	if got, err := Desired(cur, &Op{Kind: KindEncrypt, Stage: StageRewrite}); err != nil || got != cur {
		t.Fatalf("encrypt: %v, %v", got, err)
	}
}

func TestOpNext(t *testing.T) {
	op := &Op{Kind: KindRotate, Stage: StageAddKey, NewKey: "k-nnnnn", Restarted: true}
	var got []Stage
	for o := op; o != nil; o = o.Next() {
		got = append(got, o.Stage)
		if o != op && o.Restarted {
			t.Fatalf("stage %s starts restarted", o.Stage)
		}
	}
	if diff := cmp.Diff(Stages(KindRotate), got); diff != "" {
		t.Fatalf("stages (-want +got):\n%s", diff)
	}
	if (&Op{Kind: KindEncrypt, Stage: StageRewrite}).Next() != nil {
		t.Fatal("encrypt has one stage")
	}
}

func TestAccepted(t *testing.T) {
	a, n, x := key("k-aaaaa", 'A'), key("k-nnnnn", 'N'), key("k-xxxxx", 'X')
	cur := &Config{Keys: []Key{n, a}}
	op := &Op{Kind: KindRotate, Stage: StageWriteKey, NewKey: n.Name}
	hashes := map[string]bool{}
	for _, c := range Accepted(cur, op) {
		hashes[string(c.Marshal())] = true
	}
	for _, ok := range []*Config{{Keys: []Key{a}}, {Keys: []Key{a, n}}, {Keys: []Key{n, a}}, {Keys: []Key{n}}} {
		if !hashes[string(ok.Marshal())] {
			t.Errorf("a node with %v is refused during the rotation", ok.Names())
		}
	}
	for _, bad := range []*Config{{Keys: []Key{x}}, {Keys: []Key{a, x}}, {Keys: []Key{key("k-aaaaa", 'Z')}}} {
		if hashes[string(bad.Marshal())] {
			t.Errorf("a node with another key %v is accepted", bad.Names())
		}
	}
	// At the last stage the saved configuration still has the old key
	// (it is dropped from the state once every API server runs without
	// it): a node with either stage's file is accepted.
	drop := map[string]bool{}
	for _, c := range Accepted(cur, &Op{Kind: KindRotate, Stage: StageDropOld, NewKey: n.Name}) {
		drop[string(c.Marshal())] = true
	}
	for _, ok := range []*Config{{Keys: []Key{n, a}}, {Keys: []Key{n}}} {
		if !drop[string(ok.Marshal())] {
			t.Errorf("a node with %v is refused at %s", ok.Names(), StageDropOld)
		}
	}
	if got := Accepted(cur, nil); len(got) != 1 {
		t.Fatalf("no op: %d configurations accepted, want cur only", len(got))
	}
	if !cur.Covers(&Config{Keys: []Key{a}}) || cur.Covers(&Config{Keys: []Key{key("k-aaaaa", 'Z')}}) {
		t.Fatal("Covers compares names and secrets")
	}
}

func TestRecord(t *testing.T) {
	dir := t.TempDir()
	r, err := LoadRecord(dir)
	if err != nil || r.Op != nil || r.RotateHandled {
		t.Fatalf("empty record: %+v, %v", r, err)
	}
	want := Record{RotateHandled: true, Op: &Op{Kind: KindRotate, Stage: StageRewrite, NewKey: "k-nnnnn"}}
	if err := SaveRecord(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("record (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(filepath.Join(dir, recordFile), []byte(`{"op":{"kind":"rotate","stage":"later"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var de *statedir.DamagedError
	if _, err := LoadRecord(dir); !errors.As(err, &de) {
		t.Fatalf("unknown stage: %v, want a DamagedError", err)
	}
}

func TestRewriteSecrets(t *testing.T) {
	var objs []runtime.Object
	for i := range 7 {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%3), Name: fmt.Sprintf("s%d", i)},
			Data: map[string][]byte{"k": []byte("v")}})
	}
	cs := fake.NewClientset(objs...)
	updates := map[string]int{}
	conflicted, gone := false, false
	cs.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.UpdateAction).GetObject().(*corev1.Secret)
		id := s.Namespace + "/" + s.Name
		switch {
		case id == "ns1/s1" && !conflicted:
			conflicted = true
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, s.Name, errors.New("changed"))
		case id == "ns2/s2" && !gone:
			gone = true
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, s.Name)
		}
		if len(s.Data) != 1 || string(s.Data["k"]) != "v" {
			t.Errorf("%s updated with a change: %v", id, s.Data)
		}
		updates[id]++
		return false, nil, nil
	})
	var seen []int
	n, err := RewriteSecrets(context.Background(), cs, func(c int) { seen = append(seen, c) })
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 || len(seen) == 0 || seen[len(seen)-1] != 7 {
		t.Fatalf("rewrote %d, progress %v; want 7", n, seen)
	}
	if !conflicted || updates["ns1/s1"] != 1 {
		t.Fatalf("conflict: retried %d times (conflicted %v), want once", updates["ns1/s1"], conflicted)
	}
	for id, c := range updates {
		if c != 1 {
			t.Errorf("%s updated %d times", id, c)
		}
	}
	if len(updates) != 6 { // ns2/s2 was "deleted" meanwhile
		t.Fatalf("updated %d Secrets, want 6: %v", len(updates), updates)
	}

	failing := fake.NewClientset(objs...)
	failing.PrependReactor("list", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
	})
	if _, err := RewriteSecrets(context.Background(), failing, nil); err == nil || !strings.Contains(err.Error(), "list Secrets") {
		t.Fatalf("list failing: %v", err)
	}
}
