// Package sopsfile decrypts a cluster.yml encrypted with SOPS, as `sops
// decrypt` does and with the SOPS library: the YAML store reads the file,
// the data key comes from the file's key groups through SOPS's local key
// service, the values are decrypted and the MAC is checked. Only keys that
// need no network are used: age identities (SOPS_AGE_KEY_FILE,
// SOPS_AGE_KEY, SOPS_AGE_KEY_CMD, ~/.config/sops/age/keys.txt) and PGP
// keys (gpg's keyring); a file's cloud KMS and Vault keys are skipped.
//
// Each plain value goes into the yaml.v3 node of the encrypted file that
// held it, so that spec's diagnostics name the lines of the file the user
// edits. The package sits beside spec, which never imports it, so that
// only the commands and serve link the SOPS library and its cloud SDKs.
package sopsfile

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/pgp"
	yamlstore "github.com/getsops/sops/v3/stores/yaml"
	yaml "go.yaml.in/yaml/v3"

	"github.com/rigger/rigger/spec"
)

// maxValues bounds the values of a file once its aliases are expanded:
// SOPS's YAML store copies the value of every alias.
const maxValues = 1 << 18

// ErrMAC is the error of a file whose values do not match its MAC: it was
// changed without sops, or not all of it was encrypted with the same key.
var ErrMAC = errors.New("the file's MAC does not match its values: it was changed without sops (edit it with `sops cluster.yml`), " +
	"or parts of it come from another encryption; restore it from git history or encrypt it again with sops")

// Decrypter decrypts SOPS files. Its zero value takes keys where the sops
// CLI does.
type Decrypter struct {
	// AgeIdentities, when set, are the only age identities used, in place
	// of SOPS's (its environment variables and keys.txt).
	AgeIdentities []age.Identity
}

var _ spec.Decrypter = Decrypter{}.Decrypt

// Options are spec's options that read SOPS files with d.
func (d Decrypter) Options() spec.Options { return spec.Options{Decrypt: d.Decrypt} }

// Decrypt is a spec.Decrypter: it decrypts data, puts each plain value into
// its node of root (spec's parse of data) and returns those nodes. Its
// errors never hold a decrypted value.
func (d Decrypter) Decrypt(ctx context.Context, data []byte, root *yaml.Node) (encrypted []*yaml.Node, err error) {
	defer func() {
		// The SOPS library is third-party code fed untrusted input: a panic
		// there becomes an error, never a crash.
		if r := recover(); r != nil {
			encrypted, err = nil, fmt.Errorf("the SOPS library failed on the file (%v)", r)
		}
	}()
	left := maxValues
	if count(root, &left); left < 0 {
		return nil, fmt.Errorf("the file has more than %d values once its aliases are expanded, or an alias inside the value it names; "+
			"reduce the use of YAML anchors and aliases", maxValues)
	}
	store := yamlstore.NewStore(&config.YAMLStoreConfig{})
	tree, err := store.LoadEncryptedFile(data)
	if err != nil {
		return nil, fmt.Errorf("read the SOPS metadata: %w", err)
	}
	if len(tree.Branches) != 1 {
		return nil, fmt.Errorf("the file holds %d YAML documents, want one", len(tree.Branches))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key, err := tree.Metadata.GetDataKeyWithKeyServices([]keyservice.KeyServiceClient{
		keyservice.NewCustomLocalClient(localKeys{ctx: ctx, age: d.AgeIdentities}),
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("no key rigger has decrypts the file's data key; give rigger the age identity of one of the file's recipients (%s) "+
			"in the file SOPS_AGE_KEY_FILE names or in SOPS_AGE_KEY, or one of its PGP keys in gpg's keyring (what SOPS says: %s)",
			recipients(tree.Metadata), userError(err))
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(key, cipher)
	if err != nil {
		return nil, fmt.Errorf("decrypt the values (%w): the file was changed without sops; restore it from git history, or edit it with `sops cluster.yml`", err)
	}
	want, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, key, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil || want != mac {
		return nil, ErrMAC
	}
	if err := fill(root, tree.Branches[0], "", true, &encrypted); err != nil {
		return nil, err
	}
	return encrypted, nil
}

// count takes one from *left for each value of n, aliases expanded, and
// stops when *left is below zero: an alias inside the value it names
// ends there too.
func count(n *yaml.Node, left *int) {
	*left--
	if n == nil || *left < 0 {
		return
	}
	if n.Kind == yaml.AliasNode {
		count(n.Alias, left)
		return
	}
	for _, c := range n.Content {
		if count(c, left); *left < 0 {
			return
		}
	}
}

// fill puts the plain values of v (SOPS's decrypted tree) into the
// encrypted scalars of n, the same value in the file, and appends each
// scalar it changed to out. top skips the `sops` keys, which SOPS's store
// removed from v.
func fill(n *yaml.Node, v any, path string, top bool, out *[]*yaml.Node) error {
	mismatch := func() error {
		return fmt.Errorf("the file's YAML at %s differs from what SOPS read of it; encrypt the file again with sops", pathOr(path))
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nil // its anchor's node is filled where it is defined
	case yaml.MappingNode:
		b, ok := v.(sops.TreeBranch)
		if !ok {
			return mismatch()
		}
		var items []sops.TreeItem
		for _, it := range b {
			if _, comment := it.Key.(sops.Comment); !comment {
				items = append(items, it)
			}
		}
		j := 0
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if top && k.Value == "sops" {
				continue
			}
			if j >= len(items) || fmt.Sprint(items[j].Key) != k.Value && k.Tag == "!!str" {
				return mismatch()
			}
			if err := fill(n.Content[i+1], items[j].Value, join(path, k.Value), false, out); err != nil {
				return err
			}
			j++
		}
		if j != len(items) {
			return mismatch()
		}
	case yaml.SequenceNode:
		l, ok := v.([]any)
		if !ok {
			return mismatch()
		}
		var items []any
		for _, it := range l {
			if _, comment := it.(sops.Comment); !comment {
				items = append(items, it)
			}
		}
		if len(items) != len(n.Content) {
			return mismatch()
		}
		for i, c := range n.Content {
			if err := fill(c, items[i], fmt.Sprintf("%s[%d]", path, i), false, out); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if !strings.HasPrefix(n.Value, "ENC[") {
			return nil
		}
		switch p := v.(type) {
		case string:
			if p == n.Value {
				return nil // left unencrypted (unencrypted_suffix and the like)
			}
			n.Tag, n.Value = "!!str", p
		case int:
			n.Tag, n.Value = "!!int", strconv.Itoa(p)
		case float64:
			n.Tag, n.Value = "!!float", strconv.FormatFloat(p, 'g', -1, 64)
		case bool:
			n.Tag, n.Value = "!!bool", strconv.FormatBool(p)
		default:
			return fmt.Errorf("the value at %s decrypts to a %T, which rigger does not read", pathOr(path), v)
		}
		n.Style = 0
		*out = append(*out, n)
	}
	return nil
}

// recipients lists the master keys of the file's key groups (public: age
// recipients, PGP fingerprints, KMS key names).
func recipients(m sops.Metadata) string {
	var out []string
	for _, g := range m.KeyGroups {
		for _, k := range g {
			out = append(out, k.TypeToIdentifier()+" "+k.ToString())
		}
	}
	if len(out) == 0 {
		return "none listed"
	}
	return strings.Join(out, ", ")
}

// ansiEscape matches the colours SOPS puts in its messages.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// userError is SOPS's own explanation of err, on one line.
func userError(err error) string {
	msg := err.Error()
	var ue sops.UserError
	if errors.As(err, &ue) {
		msg = ue.UserError()
	}
	return strings.Join(strings.Fields(ansiEscape.ReplaceAllString(msg, "")), " ")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func pathOr(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

// localKeys is SOPS's local key service restricted to the keys that need
// no network, with age identities of its own when given. It lives for one
// Decrypt and holds its ctx: SOPS calls the key service with
// context.Background(), and a gpg that waits (for a passphrase) must end
// when the caller gives up.
type localKeys struct {
	ctx context.Context
	age []age.Identity
}

func (k localKeys) Decrypt(ctx context.Context, req *keyservice.DecryptRequest) (*keyservice.DecryptResponse, error) {
	switch key := req.Key.GetKeyType().(type) {
	case *keyservice.Key_AgeKey:
		if k.age == nil {
			return keyservice.Server{}.Decrypt(ctx, req)
		}
		mk := &sopsage.MasterKey{Recipient: key.AgeKey.Recipient, EncryptedKey: string(req.Ciphertext)}
		sopsage.ParsedIdentities(k.age).ApplyToMasterKey(mk)
		plain, err := mk.Decrypt()
		if err != nil {
			return nil, err
		}
		return &keyservice.DecryptResponse{Plaintext: plain}, nil
	case *keyservice.Key_PgpKey:
		mk := pgp.NewMasterKeyFromFingerprint(key.PgpKey.Fingerprint)
		mk.EncryptedKey = string(req.Ciphertext)
		plain, err := mk.DecryptContext(k.ctx)
		if err != nil {
			return nil, err
		}
		return &keyservice.DecryptResponse{Plaintext: plain}, nil
	default:
		return nil, fmt.Errorf("rigger uses only age and PGP keys, which need no network: a %T key is skipped", key)
	}
}

func (localKeys) Encrypt(context.Context, *keyservice.EncryptRequest) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("rigger does not encrypt with SOPS")
}
