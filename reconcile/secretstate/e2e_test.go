package secretstate_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// TestOnAPIServer runs the cases against one real API server (RIGGER_E2E=1),
// each in a namespace of its own.
func TestOnAPIServer(t *testing.T) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	client, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	store := func(t *testing.T) *secretstate.Store {
		t.Helper()
		n++
		ns := fmt.Sprintf("state-%d", n)
		if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return newStore(t, srv, ns)
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, newStore func(t *testing.T) *secretstate.Store)
	}{
		{"TwoWritersConflict", testTwoWritersConflict},
		{"RacingWritersLoseNoUpdate", testRacingWriters},
		{"LargeFile", testLargeFile},
		{"DamagedSecrets", testDamagedSecrets},
		{"WriteThroughRoundTrip", testWriteThrough},
		{"NoSecretsIsAnEmptyDirectory", testNoSecrets},
		{"ExportImportRoundTrip", testExportImport},
		{"AgentRecords", func(t *testing.T, newStore func(t *testing.T) *secretstate.Store) { testAgentRecords(t, newStore) }},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, store) })
	}
}

// newStore is a Store of namespace ns with a client of its own, as another
// replica of serve would have.
func newStore(t *testing.T, srv *apiservertest.Server, ns string) *secretstate.Store {
	t.Helper()
	client, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &secretstate.Store{Secrets: client.CoreV1().Secrets(ns), Namespace: ns}
}

// other is a second writer of s's namespace.
func other(s *secretstate.Store) *secretstate.Store {
	return &secretstate.Store{Secrets: s.Secrets, Namespace: s.Namespace}
}

// secretsOf reads the cluster's files as the Secrets hold them.
func secretsOf(t *testing.T, s *secretstate.Store, cluster string) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	if _, err := other(s).Export(t.Context(), cluster, dir, false); err != nil {
		if strings.Contains(err.Error(), "holds no state") {
			return map[string][]byte{}
		}
		t.Fatal(err)
	}
	files, err := secretstate.StateFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func load(t *testing.T, s *secretstate.Store, cluster string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), cluster)
	if _, err := s.Load(t.Context(), cluster, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testTwoWritersConflict: a write over a Secret another writer made or
// changed since this one read is refused with a *ConflictError, and the
// other's content is kept, in the Secret and in the refused writer's
// directory; read again, the write goes through.
func testTwoWritersConflict(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	a := newStore(t)
	b := other(a)
	dirA, dirB := load(t, a, "c1"), load(t, b, "c1")

	if err := statedir.WriteFile(dirA, "nodes.json", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	var conflict *secretstate.ConflictError
	err := statedir.WriteFile(dirB, "nodes.json", []byte("b1"))
	if !errors.As(err, &conflict) || !strings.Contains(err.Error(), "another writer") {
		t.Fatalf("a create over a Secret made since: got %v, want a *ConflictError", err)
	}
	if _, err := os.Stat(filepath.Join(dirB, "nodes.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused create left nodes.json in its directory: %v", err)
	}
	if err := statedir.WriteFile(dirA, "nodes.json", []byte("a2")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Load(t.Context(), "c1", dirB); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dirB, "nodes.json")); string(got) != "a2" {
		t.Fatalf("loaded again, nodes.json is %q, want the other writer's a2", got)
	}
	if err := statedir.WriteFile(dirB, "nodes.json", []byte("b2")); err != nil {
		t.Fatal(err)
	}
	err = statedir.WriteFile(dirA, "nodes.json", []byte("a3"))
	if !errors.As(err, &conflict) {
		t.Fatalf("an update over a version changed since: got %v, want a *ConflictError", err)
	}
	if err := statedir.Remove(dirA, "nodes.json"); !errors.As(err, &conflict) {
		t.Fatalf("a remove of a version changed since: got %v, want a *ConflictError", err)
	}
	if got := secretsOf(t, a, "c1"); string(got["nodes.json"]) != "b2" {
		t.Errorf("the Secret holds %q after the refused writes, want b2", got["nodes.json"])
	}
	if got, _ := os.ReadFile(filepath.Join(dirA, "nodes.json")); string(got) != "a2" {
		t.Errorf("the refused writer's nodes.json is %q, want its last written a2 (unchanged by refused writes)", got)
	}
}

// testRacingWriters: writers that read, add one and write, and read again
// when refused, never lose an update: the counter ends at the sum.
func testRacingWriters(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	base := newStore(t)
	const writers, adds = 3, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		s := other(base)
		dir := filepath.Join(t.TempDir(), "c")
		wg.Go(func() {
			for done := 0; done < adds; {
				if _, err := s.Load(context.Background(), "c", dir); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				var n int
				if err := statedir.ReadJSON(dir, "count.json", &n); err != nil {
					errs <- err
					return
				}
				err := statedir.WriteJSON(dir, "count.json", n+1)
				var conflict *secretstate.ConflictError
				switch {
				case errors.As(err, &conflict):
					continue
				case err != nil:
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				done++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int
	if err := json.Unmarshal(secretsOf(t, base, "c")["count.json"], &n); err != nil || n != writers*adds {
		t.Fatalf("the counter is %d (%v), want %d: an update was lost", n, err, writers*adds)
	}
}

// testLargeFile: a file of 1 MiB fits its Secret; one byte more is refused
// before any request with a *TooLargeError that names the file and the
// cluster, and changes nothing.
func testLargeFile(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	s := newStore(t)
	dir := load(t, s, "big")
	full := []byte(strings.Repeat("x", secretstate.MaxFileSize))
	if err := statedir.WriteFile(dir, "nodes.json", full); err != nil {
		t.Fatalf("a file of exactly 1 MiB: %v", err)
	}
	var large *secretstate.TooLargeError
	err := statedir.WriteFile(dir, "nodes.json", append(full, 'y'))
	if !errors.As(err, &large) || !strings.Contains(err.Error(), "nodes.json of cluster big") {
		t.Fatalf("a file of 1 MiB and a byte: got %v, want a *TooLargeError naming it", err)
	}
	if got := secretsOf(t, s, "big")["nodes.json"]; len(got) != len(full) {
		t.Errorf("the Secret holds %d bytes after the refused write, want %d", len(got), len(full))
	}
	if fi, err := os.Stat(filepath.Join(dir, "nodes.json")); err != nil || fi.Size() != int64(len(full)) {
		t.Errorf("the refused write changed the file on disk: %v, %v", fi, err)
	}
}

// testDamagedSecrets: a Secret labelled with the cluster that rigger did
// not write so is a *statedir.DamagedError naming it, and the directory is
// not filled.
func testDamagedSecrets(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	labels := map[string]string{secretstate.ClusterLabel: "d", secretstate.ManagedByLabel: secretstate.ManagedBy}
	for _, tc := range []struct {
		name   string
		secret corev1.Secret
	}{
		{"no annotation", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: labels},
			Type: secretstate.SecretType, Data: map[string][]byte{secretstate.DataKey: nil}}},
		{"path outside", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretstate.SecretName("d", "../x"), Labels: labels,
			Annotations: map[string]string{secretstate.FileAnnotation: "../x"}}, Type: secretstate.SecretType, Data: map[string][]byte{secretstate.DataKey: nil}}},
		{"name not its file's", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretstate.SecretName("d", "a.pem"), Labels: labels,
			Annotations: map[string]string{secretstate.FileAnnotation: "kube-ca.pem"}}, Type: secretstate.SecretType, Data: map[string][]byte{secretstate.DataKey: nil}}},
		{"other type", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretstate.SecretName("d", "a.pem"), Labels: labels,
			Annotations: map[string]string{secretstate.FileAnnotation: "a.pem"}}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{secretstate.DataKey: nil}}},
		{"no content", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretstate.SecretName("d", "a.pem"), Labels: labels,
			Annotations: map[string]string{secretstate.FileAnnotation: "a.pem"}}, Type: secretstate.SecretType, Data: map[string][]byte{"other": nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if _, err := s.Secrets.Create(t.Context(), &tc.secret, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "d")
			_, err := s.Load(t.Context(), "d", dir)
			var damaged *statedir.DamagedError
			if !errors.As(err, &damaged) || !strings.Contains(damaged.Path, s.Namespace+"/"+tc.secret.Name) {
				t.Fatalf("got %v, want a *statedir.DamagedError naming Secret %s/%s", err, s.Namespace, tc.secret.Name)
			}
			if reason, stalls := stall.Classify(err); !stalls || reason != stall.StateDamaged {
				t.Errorf("a damaged Secret: reason %s, stalls %v; want it to stall, %s", reason, stalls, stall.StateDamaged)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the state directory was made though a Secret is damaged: %v", err)
			}
		})
	}
}

// newPKI is a cluster's PKI as rigger apply makes it.
func newPKI(t *testing.T, name string) (*spec.Cluster, *pki.Set) {
	t.Helper()
	c := &spec.Cluster{ClusterName: name, Nodes: []spec.Node{
		{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}},
		{Address: "10.0.0.2", User: "u", Role: []string{spec.RoleWorker}},
	}}
	spec.SetDefaults(c)
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c, set
}

// writeState writes into dir what an apply and a CA rotation write, through
// the packages that write them: the PKI, both generations of a rotation
// and its record, the secrets encryption key and record, the nodes, and a
// restore record (as etcdsnap writes it).
func writeState(t *testing.T, dir string, c *spec.Cluster, set *pki.Set) {
	t.Helper()
	if err := pki.Save(dir, set); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{certrotate.OldDir, certrotate.NewDir} {
		if err := pki.Save(filepath.Join(dir, sub), set); err != nil {
			t.Fatal(err)
		}
	}
	if err := certrotate.Save(dir, certrotate.Record{Requested: &pki.Rotation{CA: true}}); err != nil {
		t.Fatal(err)
	}
	key, err := secretsenc.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := secretsenc.Save(dir, key); err != nil {
		t.Fatal(err)
	}
	if err := secretsenc.SaveRecord(dir, secretsenc.Record{}); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteJSON(dir, "nodes.json", c.Nodes); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteJSON(dir, "restores.json", []etcdsnap.RestoreRecord{{ID: "r1", SnapshotName: "s1"}}); err != nil {
		t.Fatal(err)
	}
}

// testWriteThrough: what the engine writes in a loaded directory, and
// removes from it, is in the Secrets, byte for byte, and nothing else is;
// loaded elsewhere, the directory is the same again.
func testWriteThrough(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	s := newStore(t)
	dir := load(t, s, "wt")
	c, set := newPKI(t, "wt")
	writeState(t, dir, c, set)
	// A rotation's end, and a PKI reissued with one certificate fewer.
	if err := statedir.RemoveAll(dir, filepath.Dir(certrotate.OldDir)); err != nil {
		t.Fatal(err)
	}
	smaller := &pki.Set{Certs: map[string]pki.Cert{}}
	for name, crt := range set.Certs {
		if !strings.HasPrefix(name, "kube-node") {
			smaller.Certs[name] = crt
		}
	}
	if len(smaller.Certs) == len(set.Certs) {
		t.Fatal("the test's PKI has no kube-node certificate to drop")
	}
	if err := pki.Save(dir, smaller); err != nil {
		t.Fatal(err)
	}

	local, err := secretstate.StateFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(digests(local), digests(secretsOf(t, s, "wt"))); diff != "" {
		t.Fatalf("the directory and the Secrets differ (-directory +Secrets): a write or remove went behind the backend:\n%s", diff)
	}
	for _, want := range []string{"kube-ca.pem", "kube-ca-key.pem", certrotate.File, secretsenc.File, "nodes.json"} {
		if _, ok := local[want]; !ok {
			t.Errorf("%s is not in the state (the test writes it)", want)
		}
	}
	elsewhere := load(t, other(s), "wt")
	again, err := secretstate.StateFiles(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(digests(local), digests(again)); diff != "" {
		t.Fatalf("loaded elsewhere, the directory differs (-first +elsewhere):\n%s", diff)
	}
	if _, err := pki.Load(elsewhere); err != nil {
		t.Errorf("the PKI does not load from the directory filled from the Secrets: %v", err)
	}
}

// testNoSecrets: a cluster without Secrets is an empty state directory,
// whose PKI pki.Load reports not found (recovered from the nodes, never
// made anew); a directory with state but no Secrets is refused.
func testNoSecrets(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	s := newStore(t)
	dir := load(t, s, "empty")
	var notFound *pki.NotFoundError
	if _, err := pki.Load(dir); !errors.As(err, &notFound) {
		t.Fatalf("pki.Load of a cluster without Secrets: got %v, want a *pki.NotFoundError (recover from the nodes)", err)
	}

	laptop := filepath.Join(t.TempDir(), "laptop")
	c, set := newPKI(t, "laptop")
	writeState(t, laptop, c, set)
	_, err := s.Load(t.Context(), "laptop", laptop)
	if err == nil || !strings.Contains(err.Error(), "rigger state import") {
		t.Fatalf("a directory with state and no Secrets: got %v, want a refusal that says to import it", err)
	}
	if _, stalls := stall.Classify(err); !stalls {
		t.Errorf("a directory with state and no Secrets is retried, want it to stall: only a person can import it")
	}
	if _, err := pki.Load(laptop); err != nil {
		t.Errorf("the refused directory's PKI was changed: %v", err)
	}
}

// testExportImport: a state directory made by the pki package and the
// records' packages, imported into Secrets and exported elsewhere, is the
// same byte for byte with the modes of a state directory; neither
// overwrites state without force, and with force the destination becomes
// the source.
func testExportImport(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	s := newStore(t)
	src := filepath.Join(t.TempDir(), "src")
	c, set := newPKI(t, "mv")
	writeState(t, src, c, set)
	want, err := secretstate.StateFiles(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Import(t.Context(), "mv", src, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != len(want) || !strings.Contains(m.String(), "kube-ca-key.pem (") {
		t.Errorf("Import says it moved:\n%s\nwant the %d files", m, len(want))
	}
	if strings.Contains(m.String(), "PRIVATE KEY") {
		t.Error("what Import says it moved holds a private key")
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if _, err := s.Export(t.Context(), "mv", dst, false); err != nil {
		t.Fatal(err)
	}
	got, err := secretstate.StateFiles(dst)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(digests(want), digests(got)); diff != "" {
		t.Fatalf("exported, the state differs from the imported (-imported +exported):\n%s", diff)
	}
	for f := range got {
		p := filepath.Join(dst, filepath.FromSlash(f))
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", p, err)
		}
		if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, want mode 0700", filepath.Dir(p), err)
		}
	}

	if _, err := s.Import(t.Context(), "mv", src, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("an import over existing Secrets without force: got %v, want a refusal that names --force", err)
	}
	if _, err := s.Export(t.Context(), "mv", dst, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("an export over a directory with state without force: got %v, want a refusal that names --force", err)
	}

	// With force: a file the source lacks is removed from the destination.
	if err := statedir.Remove(src, certrotate.File); err != nil {
		t.Fatal(err)
	}
	m, err = s.Import(t.Context(), "mv", src, true)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(m.Removed, []string{certrotate.File}) {
		t.Errorf("forced import removed %v, want [%s]", m.Removed, certrotate.File)
	}
	if _, err := s.Export(t.Context(), "mv", dst, true); err != nil {
		t.Fatal(err)
	}
	want, _ = secretstate.StateFiles(src)
	got, _ = secretstate.StateFiles(dst)
	if diff := cmp.Diff(digests(want), digests(got)); diff != "" {
		t.Fatalf("after the forced moves, the state differs (-source +exported):\n%s", diff)
	}

	if _, err := s.Import(t.Context(), "empty", t.TempDir(), false); err == nil {
		t.Error("an import of a directory without state is not refused")
	}
	if _, err := s.Export(t.Context(), "nothing", t.TempDir(), false); err == nil || !strings.Contains(err.Error(), "holds no state") {
		t.Errorf("an export of a cluster without Secrets: got %v, want a refusal", err)
	}
}

// digests are the SHA-256 of files, so that a difference shows no key.
func digests(files map[string][]byte) map[string]string {
	out := map[string]string{}
	for f, b := range files {
		out[f] = fmt.Sprintf("%x (%d bytes)", sha256.Sum256(b), len(b))
	}
	return out
}
