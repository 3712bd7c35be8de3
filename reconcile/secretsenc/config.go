// Package secretsenc keeps the key rigger generates to encrypt Secrets at
// rest (services.kube-api.secrets_encryption_config.enabled without
// custom_config) and the stages of its rotation.
//
// The key lives in the state directory as [File], the API server's
// EncryptionConfiguration exactly as it is written to every controlplane
// node at /etc/kubernetes/ssl/encryption.yaml (during the last stage of a
// rotation it keeps the old keys until every API server runs without them) (RKE's path and layout: one
// aescbc provider with 32-byte keys named like RKE's, k-xxxxx, and the
// identity provider last, so that Secrets written before encryption was
// enabled still read). [Load], [Save], [Parse] and [Config.Marshal] read and
// write it; rigger adopt imports RKE's encryptionConfig into the same file.
//
// A rotation ([Op]) follows the Kubernetes documentation for HA API
// servers: the new key is added as a second, decrypt-only key; then made
// the first (write) key; then every Secret is rewritten; then the other
// keys are dropped. Every API server is restarted after each change of
// the file. The stage reached is recorded in the state directory
// ([Record], [LoadRecord], [SaveRecord]) so that an apply killed half-way
// resumes there: [Desired] derives the configuration of a stage from the
// keys of the saved configuration and the record, wherever the new key
// sits, so a key that may still encrypt data is never dropped before the
// rewrite.
//
// Nothing here ever prints a key's secret: errors name keys by name only.
package secretsenc

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/rigger/rigger/reconcile/statedir"
)

// File is the configuration's name in the state directory.
const File = "encryption.yaml"

// The EncryptionConfiguration's type and the only resource rigger
// encrypts, as RKE.
const (
	apiVersion = "apiserver.config.k8s.io/v1"
	kind       = "EncryptionConfiguration"
	resource   = "secrets"
)

// keyBytes is the length of a generated AES-CBC key: AES-256.
const keyBytes = 32

// maxFile bounds the configuration Parse reads: a few keys are a few
// hundred bytes.
const maxFile = 1 << 20

// Key is one aescbc key. Secret is the base64 of the key; String and
// LogValue show the name only.
type Key struct {
	Name   string
	Secret string
}

// String is the key's name: a Key printed never shows its secret.
func (k Key) String() string { return k.Name }

// GoString is the key's name too, for %#v.
func (k Key) GoString() string { return "secretsenc.Key{Name: " + k.Name + "}" }

// Config is an EncryptionConfiguration of rigger's shape: the aescbc keys
// in order (the first encrypts, all decrypt) and the identity provider,
// last or, while encryption is being turned off, first.
type Config struct {
	Keys []Key
	// IdentityFirst writes Secrets in clear (identity first), the keys
	// still reading those that are encrypted.
	IdentityFirst bool
}

// Names are the keys' names, in order.
func (c *Config) Names() []string {
	out := make([]string, len(c.Keys))
	for i, k := range c.Keys {
		out[i] = k.Name
	}
	return out
}

// Key returns the key called name.
func (c *Config) Key(name string) (Key, bool) {
	i := slices.IndexFunc(c.Keys, func(k Key) bool { return k.Name == name })
	if i < 0 {
		return Key{}, false
	}
	return c.Keys[i], true
}

// Marshal writes c in RKE's layout (its encryption provider templates),
// byte for byte: the same configuration gives the same file as RKE's.
func (c *Config) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString("apiVersion: " + apiVersion + "\nkind: " + kind + "\nresources:\n- resources:\n  - " + resource + "\n  providers:")
	if c.IdentityFirst {
		b.WriteString("\n  - identity: {}")
	}
	b.WriteString("\n  - aescbc:\n      keys:")
	for _, k := range c.Keys {
		b.WriteString("\n      - name: " + k.Name + "\n        secret: " + k.Secret)
	}
	if !c.IdentityFirst {
		b.WriteString("\n  - identity: {}")
	}
	return b.Bytes()
}

// The configuration as Parse reads it.
type (
	fileConfig struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Resources  []fileResource `json:"resources"`
	}
	fileResource struct {
		Resources []string       `json:"resources"`
		Providers []fileProvider `json:"providers"`
	}
	fileProvider struct {
		AESCBC   *fileKeys `json:"aescbc,omitempty"`
		Identity *struct{} `json:"identity,omitempty"`
	}
	fileKeys struct {
		Keys []fileKey `json:"keys"`
	}
	fileKey struct {
		Name   string `json:"name"`
		Secret string `json:"secret"`
	}
)

// FormatError is a configuration that is not of rigger's shape (one with
// other resources or providers is a custom_config's, which rigger does not
// take as its own). It never holds a secret.
type FormatError struct {
	Source string
	Reason string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s is not an EncryptionConfiguration rigger writes: %s", e.Source, e.Reason)
}

// Parse reads a configuration of rigger's (and RKE's) shape: apiVersion
// apiserver.config.k8s.io/v1, one resource entry for secrets, an aescbc
// provider with at least one key and the identity provider, first or
// last. Every key must be the base64 of 16, 24 or 32 bytes, and names
// must be unique. source names the file in errors.
func Parse(source string, b []byte) (*Config, error) {
	bad := func(format string, a ...any) error {
		return &FormatError{Source: source, Reason: fmt.Sprintf(format, a...)}
	}
	if len(b) > maxFile {
		return nil, bad("larger than %d bytes", maxFile)
	}
	var f fileConfig
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		// The decoder's message may quote the file: say where only.
		return nil, bad("not YAML of an EncryptionConfiguration with only secrets, aescbc and identity")
	}
	switch {
	case f.APIVersion != apiVersion || f.Kind != kind:
		return nil, bad("apiVersion %q, kind %q: want %s, %s", f.APIVersion, f.Kind, apiVersion, kind)
	case len(f.Resources) != 1:
		return nil, bad("%d resources entries: want one, for secrets", len(f.Resources))
	case !slices.Equal(f.Resources[0].Resources, []string{resource}):
		return nil, bad("resources %v: want [secrets]", f.Resources[0].Resources)
	}
	ps := f.Resources[0].Providers
	if len(ps) != 2 {
		return nil, bad("%d providers: want aescbc and identity", len(ps))
	}
	c := &Config{}
	var keys *fileKeys
	switch {
	case ps[0].AESCBC != nil && ps[0].Identity == nil && ps[1].Identity != nil && ps[1].AESCBC == nil:
		keys = ps[0].AESCBC
	case ps[0].Identity != nil && ps[0].AESCBC == nil && ps[1].AESCBC != nil && ps[1].Identity == nil:
		keys, c.IdentityFirst = ps[1].AESCBC, true
	default:
		return nil, bad("providers must be aescbc and identity, one of each")
	}
	if len(keys.Keys) == 0 {
		return nil, bad("the aescbc provider has no key")
	}
	for i, k := range keys.Keys {
		if err := checkKey(k.Name, k.Secret); err != nil {
			return nil, bad("aescbc key %d: %v", i+1, err)
		}
		if _, dup := c.Key(k.Name); dup {
			return nil, bad("two aescbc keys are named %s", k.Name)
		}
		c.Keys = append(c.Keys, Key(k))
	}
	return c, nil
}

// checkKey checks a key's name and secret without ever quoting the secret.
func checkKey(name, secret string) error {
	if name == "" || strings.ContainsAny(name, " \t\n\r:#") {
		return fmt.Errorf("name %q: want a non-empty name without spaces, ':' or '#'", name)
	}
	raw, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		return fmt.Errorf("%s: the secret is not base64", name)
	}
	if n := len(raw); n != 16 && n != 24 && n != 32 {
		return fmt.Errorf("%s: the secret is %d bytes: AES-CBC takes 16, 24 or 32", name, n)
	}
	return nil
}

// nameAlphabet and nameLength make RKE's key names (norman's
// GenerateName("key"): "k-" and five characters of apimachinery's
// random string alphabet).
const (
	nameAlphabet = "bcdfghjklmnpqrstvwxz2456789"
	nameLength   = 5
)

// NewKey generates an AES-256 key from crypto/rand, named as RKE names
// them and unlike any of taken.
func NewKey(taken []string) (Key, error) {
	secret := make([]byte, keyBytes)
	if _, err := rand.Read(secret); err != nil {
		return Key{}, fmt.Errorf("generate an encryption key: %w", err)
	}
	for {
		idx := make([]byte, nameLength)
		if _, err := rand.Read(idx); err != nil {
			return Key{}, fmt.Errorf("generate an encryption key name: %w", err)
		}
		name := []byte("k-")
		for _, b := range idx {
			name = append(name, nameAlphabet[int(b)%len(nameAlphabet)])
		}
		if !slices.Contains(taken, string(name)) {
			return Key{Name: string(name), Secret: base64.StdEncoding.EncodeToString(secret)}, nil
		}
	}
}

// New is the configuration of a cluster that turns encryption on: one new
// key, identity last.
func New() (*Config, error) {
	k, err := NewKey(nil)
	if err != nil {
		return nil, err
	}
	return &Config{Keys: []Key{k}}, nil
}

// Load reads the configuration of the state directory dir; nil, nil when
// it has none. A file that does not parse is a *statedir.DamagedError.
func Load(dir string) (*Config, error) {
	p := filepath.Join(dir, File)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the secrets encryption key: %w", err)
	}
	c, err := Parse(p, b)
	if err != nil {
		return nil, &statedir.DamagedError{Path: p, Err: err}
	}
	return c, nil
}

// Save replaces the configuration of the state directory dir, mode 0600,
// atomically (statedir.WriteFile).
func Save(dir string, c *Config) error {
	if err := statedir.WriteFile(dir, File, c.Marshal()); err != nil {
		return fmt.Errorf("save the secrets encryption key: %w", err)
	}
	return nil
}
