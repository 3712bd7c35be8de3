package spec

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/rigger/rigger/internal/clip"
	yaml "go.yaml.in/yaml/v3"
)

// A Decrypter reads a cluster.yml encrypted with SOPS (a top-level `sops:`
// mapping with its `mac`). Given the file's bytes and the node tree spec
// parsed from them, it checks the file's MAC and puts the plain value of
// every encrypted scalar into that scalar's node, so that each keeps its
// position in the encrypted file, and returns those nodes. spec removes
// the `sops` key itself. An error says what went wrong and what to do; it
// never holds a decrypted value. Package spec/sopsfile provides one, so
// that spec itself never links the SOPS library.
type Decrypter func(ctx context.Context, data []byte, root *yaml.Node) (encrypted []*yaml.Node, err error)

// Options are what Load and Parse may be given besides the file.
type Options struct {
	// Decrypt reads a file encrypted with SOPS; without it such a file is
	// an error that says how to give rigger its keys.
	Decrypt Decrypter
}

// SOPSEncryptedRegex is the value of SOPS's --encrypted-regex (or
// encrypted_regex in .sops.yaml) that encrypts the keys of the fields
// rigger never shows (`rigger:"secret"` and `rigger:"secret-env"`) and
// no other key of the schema. It leaves out `key` (services.etcd.key,
// the client key of an external etcd), a name nodes' taints use too.
const SOPSEncryptedRegex = `^(ssh_key|password|token|aws_secret_access_key|aws_session_token|access_key|secret_key|extra_env|win_extra_env|custom_config|config_file|cloud_config|customCloudProvider|aadClientSecret|aadClientCertPassword|apic_user_key|kafka_client_key)$`

// sopsKey is the top-level key SOPS keeps its metadata under.
const sopsKey = "sops"

// sopsMetadata returns the index in root.Content of the key of a SOPS
// metadata mapping (a top-level `sops:` mapping with a `mac`), or -1.
func sopsMetadata(root *yaml.Node) int {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != sopsKey || v.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			if v.Content[j].Value == "mac" {
				return i
			}
		}
	}
	return -1
}

// decryptSOPS decrypts root in place when it is a SOPS document, and
// removes its `sops` key. It returns the nodes that held encrypted values
// (nil for a plain file), or a diagnostic when the file cannot be read.
func decryptSOPS(ctx context.Context, data []byte, root *yaml.Node, file string, decrypt Decrypter) (map[*yaml.Node]bool, *Diagnostic) {
	i := sopsMetadata(root)
	if i < 0 {
		return nil, nil
	}
	key := root.Content[i]
	diag := func(summary, detail string) *Diagnostic {
		return &Diagnostic{Severity: SeverityError, File: file, Line: key.Line, Column: key.Column, Path: sopsKey, Summary: summary, Detail: detail}
	}
	if decrypt == nil {
		return nil, diag("the file is encrypted with SOPS, and this program reads cluster.yml without SOPS",
			"Run rigger (validate, plan, apply, serve), which decrypts it with the age key in the file SOPS_AGE_KEY_FILE names, or in SOPS_AGE_KEY, or with gpg's keyring for PGP; or decrypt it first with `sops decrypt`.")
	}
	nodes, err := decrypt(ctx, data, root)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, diag(fmt.Sprintf("cannot decrypt the file with SOPS: %v", err),
			"rigger decrypts it as `sops decrypt` does; docs/gitops.md (Secrets in git with SOPS) says where it takes the keys.")
	}
	root.Content = append(root.Content[:i:i], root.Content[i+2:]...)
	encrypted := make(map[*yaml.Node]bool, len(nodes))
	for _, n := range nodes {
		encrypted[n] = true
	}
	return encrypted, nil
}

// maxShownPaths bounds the field paths the warning about encrypted values
// in shown fields names.
const maxShownPaths = 10

// warnShownEncrypted warns, once, of the values that were encrypted in the
// file and sit in fields rigger shows (d.shownEncrypted).
func (d *decoder) warnShownEncrypted(root *yaml.Node) {
	paths := d.shownEncrypted
	if len(paths) == 0 {
		return
	}
	list := strings.Join(paths[:min(len(paths), maxShownPaths)], ", ")
	if len(paths) > maxShownPaths {
		list += fmt.Sprintf(" and %d more", len(paths)-maxShownPaths)
	}
	d.diags.add(Diagnostic{
		Severity: SeverityWarning, File: d.file, Line: root.Line, Column: root.Column,
		Summary: clip.Ellipsis(fmt.Sprintf("%d value(s) encrypted with SOPS are in fields rigger shows in plans, logs and status.yml: %s", len(paths), list), maxText),
		Detail: "Encrypt only the secret fields, which rigger never shows: re-encrypt the file with `sops encrypt --encrypted-regex '" + SOPSEncryptedRegex +
			"' --in-place cluster.yml` after `sops decrypt --in-place cluster.yml`, or set encrypted_regex in .sops.yaml (docs/gitops.md, Secrets in git with SOPS).",
	})
}

// secretFieldNames returns the keys of the fields of the schema tagged
// secret or secret-env, and of the others, for the test of
// SOPSEncryptedRegex.
func secretFieldNames() (secret, shown map[string]bool) {
	secret, shown = map[string]bool{}, map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for _, f := range fieldsOf(t) {
			if f.secretness == tagSecret || f.secretness == tagSecretEnv {
				secret[f.name] = true
			} else {
				shown[f.name] = true
			}
			walk(f.typ)
		}
	}
	walk(reflect.TypeFor[Cluster]())
	return secret, shown
}
