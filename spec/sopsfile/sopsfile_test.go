package sopsfile

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/pgp"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/sopsfile/sopsfiletest"
)

// Secret values of plainCluster: none may appear in a diagnostic.
const (
	secretKey      = "s3-secret-Qx7vLm2"
	secretPassword = "registry-pw-9HzT4"
	secretSSHLine  = "b3BlbnNzaC1rZXktdjEAAAAAsecretmaterial"
)

// plainCluster has a secret of each kind, a multi-line one first, and an
// error (port: nope) after it.
var plainCluster = `cluster_name: sops
nodes:
  - address: 10.20.0.11
    user: rke
    role:
      - etcd
      - controlplane
      - worker
    ssh_key: |
      -----BEGIN OPENSSH PRIVATE KEY-----
      ` + secretSSHLine + `
      -----END OPENSSH PRIVATE KEY-----
    port: nope
private_registries:
  - url: registry.internal:5000
    user: puller
    password: ` + secretPassword + `
services:
  etcd:
    backup_config:
      interval_hours: 6
      s3backupconfig:
        endpoint: s3.example.com
        bucket_name: snapshots
        access_key: AKIAEXAMPLE
        secret_key: ` + secretKey + `
`

func identity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// lineOf returns the 1-based line of the first line of data that starts,
// after blanks, with prefix.
func lineOf(t *testing.T, data []byte, prefix string) int {
	t.Helper()
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " -"), prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starts with %q in\n%s", prefix, data)
	return 0
}

// noSecrets fails when a diagnostic shows a secret value.
func noSecrets(t *testing.T, diags spec.Diagnostics) {
	t.Helper()
	for _, d := range diags {
		for _, s := range []string{secretKey, secretPassword, secretSSHLine} {
			if strings.Contains(d.String(), s) {
				t.Errorf("diagnostic shows a secret: %s", d)
			}
		}
	}
}

func TestDecryptKeepsLines(t *testing.T) {
	id := identity(t)
	data := sopsfiletest.Encrypt(t, plainCluster, id.Recipient().String(), spec.SOPSEncryptedRegex)
	if bytes.Contains(data, []byte(secretKey)) || !bytes.Contains(data, []byte("10.20.0.11")) {
		t.Fatalf("the file is not encrypted as asked:\n%s", data)
	}
	wantLine := lineOf(t, data, "port: nope")
	if plainLine := lineOf(t, []byte(plainCluster), "port: nope"); plainLine == wantLine {
		t.Fatalf("port is on line %d in both files: the test shows nothing", wantLine)
	}
	c, diags, err := spec.ParseWith(context.Background(), data, "cluster.yml", Decrypter{AgeIdentities: []age.Identity{id}}.Options())
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, diags)
	var errs []spec.Diagnostic
	for _, d := range diags {
		if d.Severity == spec.SeverityError {
			errs = append(errs, d)
		}
		if strings.Contains(d.Summary, "SOPS") {
			t.Errorf("unexpected SOPS diagnostic with only secrets encrypted: %s", d)
		}
	}
	if len(errs) != 1 || errs[0].Path != "nodes[0].port" || errs[0].Line != wantLine {
		t.Fatalf("errors %v, want nodes[0].port at line %d of the encrypted file", errs, wantLine)
	}
	if c.Services.Etcd.BackupConfig.S3BackupConfig.SecretKey != secretKey || c.PrivateRegistries[0].Password != secretPassword ||
		!strings.Contains(c.Nodes[0].SSHKey, "\n"+secretSSHLine+"\n") || c.Nodes[0].User != "rke" {
		t.Errorf("the values are not decrypted: %+v", c)
	}
}

// The default of `sops encrypt` encrypts every value: one warning names
// the fields rigger shows.
func TestDecryptEverythingWarns(t *testing.T) {
	id := identity(t)
	data := sopsfiletest.Encrypt(t, strings.Replace(plainCluster, "port: nope", "port: 22", 1), id.Recipient().String(), "")
	c, diags, err := spec.ParseWith(context.Background(), data, "cluster.yml", Decrypter{AgeIdentities: []age.Identity{id}}.Options())
	if err != nil || diags.Err() != nil {
		t.Fatalf("ParseWith: %v %v", err, diags)
	}
	if c.Nodes[0].Port != "22" && fmt.Sprint(c.Nodes[0].Port) != "22" {
		t.Errorf("port %v, want 22 (an int decrypted)", c.Nodes[0].Port)
	}
	noSecrets(t, diags)
	var warned []spec.Diagnostic
	for _, d := range diags {
		if strings.Contains(d.Summary, "encrypted with SOPS") {
			warned = append(warned, d)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0].Summary, "nodes[0].address") || strings.Contains(warned[0].Summary, "ssh_key") ||
		strings.Contains(warned[0].Summary, "secret_key") || !strings.Contains(warned[0].Detail, "--encrypted-regex") {
		t.Errorf("warnings %v, want one naming the shown fields only", warned)
	}
}

func TestDecryptFails(t *testing.T) {
	id := identity(t)
	data := sopsfiletest.Encrypt(t, plainCluster, id.Recipient().String(), spec.SOPSEncryptedRegex)
	tampered := bytes.Replace(data, []byte("user: puller"), []byte("user: pullex"), 1)
	if bytes.Equal(tampered, data) {
		t.Fatal("nothing tampered")
	}
	sopsLine := lineOf(t, data, "sops:")
	// No key of the machine's user or environment.
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, env := range []string{"SOPS_AGE_KEY", "SOPS_AGE_KEY_FILE", "SOPS_AGE_KEY_CMD", "SOPS_AGE_SSH_PRIVATE_KEY_FILE"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	for _, tc := range []struct {
		name string
		data []byte
		ids  []age.Identity
		want []string
	}{
		{"wrong key", data, []age.Identity{identity(t)}, []string{"no key rigger has decrypts", "SOPS_AGE_KEY_FILE"}},
		{"no key", data, nil, []string{"no key rigger has decrypts", "Did not find keys"}},
		{"changed without sops", tampered, []age.Identity{id}, []string{"MAC does not match", "sops cluster.yml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, diags, err := spec.ParseWith(context.Background(), tc.data, "cluster.yml", Decrypter{AgeIdentities: tc.ids}.Options())
			if err != nil || c != nil {
				t.Fatalf("ParseWith = %v, %v; want a diagnostic", c, err)
			}
			noSecrets(t, diags)
			if len(diags) != 1 || diags[0].Line != sopsLine || diags[0].File != "cluster.yml" {
				t.Fatalf("diagnostics %v, want one at the sops: line %d", diags, sopsLine)
			}
			for _, w := range tc.want {
				if !strings.Contains(diags[0].String(), w) {
					t.Errorf("diagnostic %q does not say %q", diags[0], w)
				}
			}
		})
	}
}

// The zero Decrypter takes the age identity from SOPS_AGE_KEY_FILE, or
// SOPS_AGE_KEY, as sops does.
func TestDecryptKeysFromEnvironment(t *testing.T) {
	id := identity(t)
	data := sopsfiletest.Encrypt(t, plainCluster, id.Recipient().String(), spec.SOPSEncryptedRegex)
	keyFile := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(keyFile, []byte("# test\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no keys.txt of the machine's user
	t.Setenv("HOME", t.TempDir())
	for _, tc := range []struct{ name, env, value string }{
		{"SOPS_AGE_KEY_FILE", "SOPS_AGE_KEY_FILE", keyFile},
		{"SOPS_AGE_KEY", "SOPS_AGE_KEY", id.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			c, diags, err := spec.ParseWith(context.Background(), data, "cluster.yml", Decrypter{}.Options())
			if err != nil || c == nil || c.PrivateRegistries[0].Password != secretPassword {
				t.Fatalf("ParseWith: %v %v", err, diags)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		os.Unsetenv("SOPS_AGE_KEY_FILE")
		os.Unsetenv("SOPS_AGE_KEY")
		_, diags, _ := spec.ParseWith(context.Background(), data, "cluster.yml", Decrypter{}.Options())
		if diags.Err() == nil {
			t.Fatal("decrypted without a key")
		}
	})
}

// A file with aliases that expand past maxValues, or an alias inside the
// value it names, is refused before SOPS's store copies them.
func TestDecryptAliasBomb(t *testing.T) {
	t.Run("inside itself", func(t *testing.T) {
		yml := "cluster_name: x\nservices:\n  kube-api:\n    admission_configuration: &a {apiVersion: v1, kind: X, x: *a}\nsops:\n  mac: x\n"
		_, diags, _ := spec.ParseWith(context.Background(), []byte(yml), "cluster.yml", Decrypter{}.Options())
		if diags.Err() == nil || !strings.Contains(diags.Err().Error(), "an alias inside the value it names") {
			t.Errorf("diagnostics %v, want the alias refused", diags)
		}
	})
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 8; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("sops:\n  mac: x\n")
	done := make(chan spec.Diagnostics, 1)
	go func() {
		_, diags, _ := spec.ParseWith(context.Background(), []byte(b.String()), "cluster.yml", Decrypter{}.Options())
		done <- diags
	}()
	select {
	case diags := <-done:
		if diags.Err() == nil || !strings.Contains(diags.Err().Error(), "aliases") {
			t.Errorf("diagnostics %v, want the aliases refused", diags)
		}
	case <-time.After(time.Minute):
		t.Fatal("the alias bomb was not refused within a minute")
	}
}

// TestSOPSOutOfSpec: spec, reconcile and transport never link the SOPS
// library and its cloud SDKs; this package and its importers do.
func TestSOPSOutOfSpec(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	out, err := exec.Command(gocmd, "list", "-deps", "../../spec", "../../reconcile", "../../transport/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("github.com/rigger/rigger/spec\n")) {
		t.Fatalf("go list does not list spec:\n%s", out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "github.com/getsops/") || strings.HasPrefix(l, "github.com/rigger/rigger/spec/sopsfile") {
			t.Errorf("spec, reconcile or transport depends on %s", l)
		}
	}
}

// TestDecryptPGP: a PGP key group is decrypted as sops does, here from
// GnuPG's legacy keyrings in GNUPGHOME (no gpg binary needed).
func TestDecryptPGP(t *testing.T) {
	entity, err := openpgp.NewEntity("rigger test", "", "rigger@example.test", nil)
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(t.TempDir(), "gnupg")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	var pub, sec bytes.Buffer
	if err := entity.Serialize(&pub); err != nil {
		t.Fatal(err)
	}
	if err := entity.SerializePrivate(&sec, nil); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"pubring.gpg": pub.Bytes(), "secring.gpg": sec.Bytes()} {
		if err := os.WriteFile(filepath.Join(home, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GNUPGHOME", home)
	fingerprint := strings.ToUpper(hex.EncodeToString(entity.PrimaryKey.Fingerprint))
	data := sopsfiletest.EncryptFor(t, plainCluster, sops.KeyGroup{pgp.NewMasterKeyFromFingerprint(fingerprint)}, spec.SOPSEncryptedRegex)
	if !bytes.Contains(data, []byte("fp: "+fingerprint)) {
		t.Fatalf("the file has no PGP key group:\n%s", data)
	}
	c, diags, err := spec.ParseWith(context.Background(), data, "cluster.yml", Decrypter{}.Options())
	if err != nil || c == nil || c.PrivateRegistries[0].Password != secretPassword {
		t.Fatalf("ParseWith: %v %v", err, diags)
	}
	// Another GnuPG home, without the key: refused.
	other := filepath.Join(t.TempDir(), "gnupg")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GNUPGHOME", other)
	t.Setenv("PATH", "") // no gpg binary to fall back to
	if _, diags, _ := spec.ParseWith(context.Background(), data, "cluster.yml", Decrypter{}.Options()); diags.Err() == nil {
		t.Error("decrypted without the PGP key")
	}
}
