package secretstate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestStateFiles: the state files of a directory, sub-directories
// included, without the lock and hidden files; a file larger than a Secret
// holds is refused without being read whole.
func TestStateFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"kube-ca.pem": "ca", "ca-rotation/old/kube-ca.pem": "old", "lock": "{}", ".nodes.json.tmp-1": "x",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := StateFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"kube-ca.pem": []byte("ca"), "ca-rotation/old/kube-ca.pem": []byte("old")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, err := StateFiles(filepath.Join(dir, "none")); err != nil || len(got) != 0 {
		t.Errorf("a missing directory: %v, %v; want no file and no error", got, err)
	}

	f, err := os.Create(filepath.Join(dir, "nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(16 << 30); err != nil { // sparse: no disk, 16 GiB to read
		t.Fatal(err)
	}
	f.Close()
	if _, err := StateFiles(dir); err == nil || !strings.Contains(err.Error(), "nodes.json is larger than a Secret holds") {
		t.Errorf("a 16 GiB file: got %v, want a refusal naming it", err)
	}
}

// TestSecretName: names are valid Secret names, readable, and differ for
// files whose readable parts are the same.
func TestSecretName(t *testing.T) {
	a, b := SecretName("Prod_1", "ca-rotation/old/kube-ca.pem"), SecretName("Prod_1", "ca-rotation.old.kube-ca.pem")
	if !strings.HasPrefix(a, "rigger-state-prod-1-ca-rotation-old-kube-ca-pem-") || a == b {
		t.Errorf("names %q and %q: want readable and different", a, b)
	}
	for _, name := range []string{a, b, SecretName(strings.Repeat("c", 63), strings.Repeat("d/", 200)+"x"), SecretName("c", "...")} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("name %q is not a valid Secret name: %v", name, errs)
		}
	}
}
