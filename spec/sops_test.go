package spec

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// sopsFile is a cluster.yml as SOPS writes it, its values replaced by
// ENC[…] placeholders that fakeDecrypter knows.
const sopsFile = `nodes:
  - address: ENC[addr]
    user: rke
    role: [controlplane, etcd, worker]
    ssh_key: ENC[key]
    port: nope
sops:
  age:
    - recipient: age1example
  lastmodified: "2026-12-02T00:00:00Z"
  mac: ENC[mac]
  version: 3.13.3
`

// fakeDecrypter replaces each ENC[…] scalar by plain[name], as a
// Decrypter does, and returns those nodes.
func fakeDecrypter(plain map[string]string) Decrypter {
	return func(ctx context.Context, data []byte, root *yaml.Node) ([]*yaml.Node, error) {
		var out []*yaml.Node
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			if n.Kind == yaml.ScalarNode && strings.HasPrefix(n.Value, "ENC[") {
				name := strings.TrimSuffix(strings.TrimPrefix(n.Value, "ENC["), "]")
				if v, ok := plain[name]; ok {
					n.Value, n.Tag, n.Style = v, "!!str", 0
					out = append(out, n)
				}
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(root)
		return out, nil
	}
}

func TestSOPSWithoutDecrypter(t *testing.T) {
	_, diags, _ := ParseWith(context.Background(), []byte(sopsFile), "cluster.yml", Options{})
	if len(diags) != 1 {
		t.Fatalf("diagnostics: %v, want the one that says the file is encrypted", diags)
	}
	d := diags[0]
	if d.Severity != SeverityError || d.Line != 7 || d.Path != "sops" || !strings.Contains(d.Summary, "encrypted with SOPS") ||
		!strings.Contains(d.Detail, "SOPS_AGE_KEY_FILE") {
		t.Errorf("diagnostic %q, want an error at line 7 (sops:) that says how to give keys", d.String())
	}
}

func TestSOPSDecrypted(t *testing.T) {
	secret := "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-material\n-----END OPENSSH PRIVATE KEY-----\n"
	c, diags, err := ParseWith(context.Background(), []byte(sopsFile), "cluster.yml",
		Options{Decrypt: fakeDecrypter(map[string]string{"addr": "10.0.0.1", "key": secret})})
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || len(c.Nodes) != 1 || c.Nodes[0].Address != "10.0.0.1" || c.Nodes[0].SSHKey != secret {
		t.Fatalf("cluster: %+v, want the decrypted values", c)
	}
	var errs, warns []Diagnostic
	for _, d := range diags {
		if d.Severity == SeverityError {
			errs = append(errs, d)
		} else {
			warns = append(warns, d)
		}
		if strings.Contains(d.String(), "secret-material") {
			t.Errorf("a diagnostic shows the secret: %s", d)
		}
	}
	// The strict decoder never saw sops:, and the error after the
	// encrypted values keeps its line.
	if len(errs) != 1 || errs[0].Path != "nodes[0].port" || errs[0].Line != 6 {
		t.Errorf("errors %v, want only nodes[0].port at line 6", errs)
	}
	var shown []Diagnostic
	for _, w := range warns {
		if strings.Contains(w.Summary, "encrypted with SOPS") {
			shown = append(shown, w)
		}
	}
	if len(shown) != 1 || !strings.Contains(shown[0].Summary, "nodes[0].address") || strings.Contains(shown[0].Summary, "ssh_key") ||
		!strings.Contains(shown[0].Detail, SOPSEncryptedRegex) {
		t.Errorf("warnings %v, want one naming nodes[0].address only, with the regex", shown)
	}
}

func TestSOPSDecryptFails(t *testing.T) {
	dec := func(ctx context.Context, data []byte, root *yaml.Node) ([]*yaml.Node, error) {
		return nil, errors.New("the MAC does not match")
	}
	c, diags, err := ParseWith(context.Background(), []byte(sopsFile), "cluster.yml", Options{Decrypt: dec})
	if err != nil || c != nil {
		t.Fatalf("ParseWith = %v, %v; want no cluster and a diagnostic", c, err)
	}
	if len(diags) != 1 || diags[0].Line != 7 || !strings.Contains(diags[0].Summary, "the MAC does not match") || diags.Err() == nil {
		t.Errorf("diagnostics %v, want one error at line 7 with the cause", diags)
	}
}

// A file with a sops key that is no SOPS metadata (no mac) is read as
// any file: the strict decoder reports the key.
func TestSOPSKeyWithoutMAC(t *testing.T) {
	_, diags := Parse([]byte("nodes: []\nsops:\n  version: 1\n"), "cluster.yml")
	if !slices.ContainsFunc(diags, func(d Diagnostic) bool { return d.Path == "sops" && d.Line == 2 && d.Severity == SeverityError }) {
		t.Errorf("diagnostics %v, want the unknown key sops at line 2", diags)
	}
}

// TestSOPSEncryptedRegex checks the regex docs/gitops.md gives against the
// schema: it matches every secret field's key (but key, documented) and
// no key of a field rigger shows.
func TestSOPSEncryptedRegex(t *testing.T) {
	re := regexp.MustCompile(SOPSEncryptedRegex)
	secret, shown := secretFieldNames()
	if len(secret) < 5 || len(shown) < 100 {
		t.Fatalf("found %d secret and %d shown keys: is the walk of the schema complete?", len(secret), len(shown))
	}
	for name := range secret {
		if !re.MatchString(name) && name != "key" {
			t.Errorf("the regex does not match %q, a secret field", name)
		}
	}
	for name := range shown {
		if re.MatchString(name) {
			t.Errorf("the regex matches %q, a field rigger shows", name)
		}
	}
	doc, err := os.ReadFile("../docs/gitops.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), SOPSEncryptedRegex) {
		t.Errorf("docs/gitops.md does not give the regex %s", SOPSEncryptedRegex)
	}
}

// An extra_env entry that is not NAME=value is reported without its value,
// which is secret.
func TestExtraEnvErrorsHideValues(t *testing.T) {
	yml := "nodes: [{address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}]\n" +
		"services:\n  kubelet:\n    extra_env: [\"NOEQUALS-s3cr3tA\", \"BAD NAME=s3cr3tB\"]\n"
	_, diags := Parse([]byte(yml), "cluster.yml")
	var errs []string
	for _, d := range diags {
		if strings.Contains(d.Path, "extra_env") {
			errs = append(errs, d.String())
		}
		if strings.Contains(d.String(), "s3cr3t") {
			t.Errorf("a diagnostic shows a value of extra_env: %s", d)
		}
	}
	if len(errs) != 2 || !strings.Contains(errs[1], `"BAD NAME"`) {
		t.Errorf("extra_env diagnostics %q, want two, the second naming the name", errs)
	}
}
