package main

import (
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"filippo.io/age"
	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/internal/sopscli"
	"github.com/rigger/rigger/spec"
)

// sopsSecrets are a cluster.yml's secrets: an inline SSH key (its body's
// lines), a registry password, an S3 secret key.
type sopsSecrets struct {
	sshKey, password, s3Secret string
}

// newSOPSSecrets makes secrets no other test has.
func newSOPSSecrets(t *testing.T) sopsSecrets {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return sopsSecrets{sshKey: string(pem.EncodeToMemory(block)), password: "registry-pw-" + t.Name()[:4] + "Hk27", s3Secret: "s3-secret-Vn41pX"}
}

// leaked returns the secrets of s that text shows.
func (s sopsSecrets) leaked(text string) []string {
	var out []string
	for _, secret := range []string{s.password, s.s3Secret} {
		if strings.Contains(text, secret) {
			out = append(out, secret)
		}
	}
	lines := strings.Split(strings.TrimSpace(s.sshKey), "\n")
	for _, l := range lines[1 : len(lines)-1] { // the key's body, not its armour
		if len(l) > 16 && strings.Contains(text, l) {
			out = append(out, "ssh_key line "+l)
		}
	}
	return out
}

// withSecrets puts the secrets into a cluster.yml whose first node ends
// at "    ssh_key: KEY" and that has "PASSWORD" and "S3SECRET".
func (s sopsSecrets) into(yml string) string {
	indented := "|\n" + "      " + strings.ReplaceAll(strings.TrimSpace(s.sshKey), "\n", "\n      ") + "\n"
	yml = strings.Replace(yml, "KEY\n", indented, 1)
	yml = strings.Replace(yml, "PASSWORD", s.password, 1)
	return strings.Replace(yml, "S3SECRET", s.s3Secret, 1)
}

// sopsClusterYML is a cluster whose node no one answers (port 1).
const sopsClusterYML = `cluster_name: sops-cli
nodes:
  - address: 127.0.0.1
    port: "1"
    user: rke
    role: [etcd, controlplane, worker]
    ssh_key: KEY
private_registries:
  - url: registry.internal:5000
    user: puller
    password: PASSWORD
services:
  etcd:
    backup_config:
      interval_hours: 6
      s3backupconfig:
        endpoint: s3.example.com
        bucket_name: snapshots
        access_key: AKIAEXAMPLE
        secret_key: S3SECRET
`

// lineStarting returns the 1-based line of data that starts, after blanks
// and "- ", with prefix.
func lineStarting(t *testing.T, data, prefix string) int {
	t.Helper()
	for i, l := range strings.Split(data, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " -"), prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starts with %q in\n%s", prefix, data)
	return 0
}

// TestSOPSCLI: files encrypted by the real sops CLI, as docs/gitops.md
// says (an age key, .sops.yaml with rigger's encrypted_regex, sops -e -i),
// are read by validate, config defaults and plan with their secrets
// decrypted and shown nowhere; an error names the line of the encrypted
// file; sops's default (every value encrypted) gets a warning; a file
// changed without sops fails its MAC.
func TestSOPSCLI(t *testing.T) {
	sops := sopscli.Binary(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(keys, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOPS_AGE_KEY_FILE", keys) // for sops and for rigger, in-process
	t.Setenv("SOPS_AGE_KEY", "")
	os.Unsetenv("SOPS_AGE_KEY")
	repo := filepath.Join(dir, "repo")
	if err := os.Mkdir(repo, 0o700); err != nil {
		t.Fatal(err)
	}
	sopsYAML := fmt.Sprintf("creation_rules:\n  - path_regex: cluster.*\\.yml$\n    encrypted_regex: '%s'\n    age: %s\n", spec.SOPSEncryptedRegex, id.Recipient())
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(filepath.Join(repo, ".sops.yaml"), sopsYAML)
	secrets := newSOPSSecrets(t)
	file := filepath.Join(repo, "cluster.yml")
	write(file, secrets.into(sopsClusterYML))
	sopscli.Run(t, sops, repo, "-e", "-i", "cluster.yml")
	encrypted := read(file)
	if l := secrets.leaked(encrypted); len(l) > 0 || !strings.Contains(encrypted, "ENC[AES256_GCM") || !strings.Contains(encrypted, "127.0.0.1") {
		t.Fatalf("sops did not encrypt the secrets alone (%v):\n%s", l, encrypted)
	}

	// validate, config defaults, plan: decrypted, no secret shown.
	out, errOut, code := run(t, "validate", "-f", file)
	if code != 0 || strings.Contains(out+errOut, "encrypted with SOPS") {
		t.Errorf("validate: exit %d\n%s%s", code, out, errOut)
	}
	check := func(what, text string) {
		t.Helper()
		if l := secrets.leaked(text); len(l) > 0 {
			t.Errorf("%s shows secrets %v:\n%s", what, l, text)
		}
	}
	check("validate", out+errOut)
	out, errOut, code = run(t, "config", "defaults", "-f", file)
	if code != 0 || !strings.Contains(out, "password: (redacted)") || !strings.Contains(out, "secret_key: (redacted)") ||
		!strings.Contains(out, "ssh_key: (redacted)") || !strings.Contains(out, "url: registry.internal:5000") {
		t.Errorf("config defaults: exit %d\n%s%s", code, out, errOut)
	}
	check("config defaults", out+errOut)
	out, errOut, code = run(t, "plan", "-f", file, "--state-dir", filepath.Join(dir, "state"), "--known-hosts", filepath.Join(dir, "known_hosts"))
	if !strings.Contains(out+errOut, "127.0.0.1") {
		t.Errorf("plan: exit %d, says nothing of the node:\n%s%s", code, out, errOut)
	}
	check("plan", out+errOut)

	// An error after the multi-line ssh_key names the encrypted file's line.
	bad := filepath.Join(repo, "cluster-bad.yml")
	plainBad := strings.Replace(secrets.into(sopsClusterYML), "private_registries:", "nodez: []\nprivate_registries:", 1)
	write(bad, plainBad)
	sopscli.Run(t, sops, repo, "-e", "-i", "cluster-bad.yml")
	encBad := read(bad)
	line := lineStarting(t, encBad, "nodez:")
	if line == lineStarting(t, plainBad, "nodez:") {
		t.Fatalf("nodez is on line %d before and after sops: the test shows nothing", line)
	}
	out, errOut, code = run(t, "validate", "-f", bad)
	if want := fmt.Sprintf("cluster-bad.yml:%d:1: error: nodez: unknown key", line); code != 1 || !strings.Contains(out, want) {
		t.Errorf("validate of a mistake: exit %d, want %q in\n%s%s", code, want, out, errOut)
	}
	check("validate of a mistake", out+errOut)

	// sops's default encrypts every value: a warning names the fields
	// rigger shows and gives the regex.
	all := filepath.Join(dir, "all.yml")
	write(all, secrets.into(sopsClusterYML))
	sopscli.Run(t, sops, dir, "-e", "-i", "--age", id.Recipient().String(), "all.yml")
	out, errOut, code = run(t, "validate", "-f", all)
	if code != 0 || !strings.Contains(out+errOut, "encrypted with SOPS are in fields rigger shows") ||
		!strings.Contains(out+errOut, "nodes[0].address") || !strings.Contains(out+errOut, spec.SOPSEncryptedRegex) {
		t.Errorf("validate of a file sops encrypted whole: exit %d\n%s%s", code, out, errOut)
	}
	check("validate of a file sops encrypted whole", out+errOut)

	// Changed without sops: the MAC fails, naming the file.
	write(file, strings.Replace(encrypted, "user: puller", "user: pullex", 1))
	out, errOut, code = run(t, "validate", "-f", file)
	if code != 1 || !strings.Contains(out, "cluster.yml:") || !strings.Contains(out, "MAC does not match") {
		t.Errorf("validate of a file changed without sops: exit %d\n%s%s", code, out, errOut)
	}

	// Without the key: an error that says how to give it.
	t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join(dir, "missing.txt"))
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	out, errOut, code = run(t, "validate", "-f", bad)
	if code != 1 || !strings.Contains(out, "cannot decrypt the file with SOPS") || !strings.Contains(out, "SOPS_AGE_KEY_FILE") {
		t.Errorf("validate without the key: exit %d\n%s%s", code, out, errOut)
	}
}

// encryptWithInlineKey writes yml with the private key of its ssh_key_path
// inline in each node's ssh_key (ssh_key_path gone), encrypted by the sops
// CLI at sops for a new age identity with rigger's encrypted_regex, and
// sets SOPS_AGE_KEY_FILE for t. It returns the file and the key's body
// lines, which no output may show.
func encryptWithInlineKey(t *testing.T, sops, yml string) (string, []string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(keys, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOPS_AGE_KEY_FILE", keys)
	var keyPath string
	var lines []string
	for _, l := range strings.Split(yml, "\n") {
		if p, ok := strings.CutPrefix(l, "ssh_key_path: "); ok {
			keyPath = strings.TrimSpace(p)
			continue
		}
		lines = append(lines, l)
	}
	key, err := os.ReadFile(keyPath)
	if keyPath == "" || err != nil {
		t.Fatalf("the cluster.yml has no ssh_key_path to inline (%v):\n%s", err, yml)
	}
	inline := strings.Join(lines, "\n")
	inline = regexp.MustCompile(`(hostname_override: [^,}]+)}`).ReplaceAllString(inline, "$1, ssh_key: "+strconv.Quote(string(key))+"}")
	if !strings.Contains(inline, "ssh_key: ") {
		t.Fatalf("no node to give the key to:\n%s", yml)
	}
	file := filepath.Join(dir, "cluster.yml")
	if err := os.WriteFile(file, []byte(inline), 0o600); err != nil {
		t.Fatal(err)
	}
	sopscli.Run(t, sops, dir, "-e", "-i", "--age", id.Recipient().String(), "--encrypted-regex", spec.SOPSEncryptedRegex, "cluster.yml")
	var body []string
	armoured := strings.Split(strings.TrimSpace(string(key)), "\n")
	for _, l := range armoured[1 : len(armoured)-1] {
		if len(l) > 16 {
			body = append(body, l)
		}
	}
	enc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range body {
		if strings.Contains(string(enc), l) {
			t.Fatalf("sops left the key in the file:\n%s", enc)
		}
	}
	return file, body
}
