// Package sopsfiletest encrypts files for tests as the sops CLI does,
// with the SOPS library, where the sops binary is not needed.
package sopsfiletest

import (
	"testing"
	"time"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	yamlstore "github.com/getsops/sops/v3/stores/yaml"
)

// Encrypt encrypts plain for the age recipient as `sops encrypt` does
// (the SOPS library's YAML store, tree encryption and MAC), with
// encryptedRegex when it is not empty.
func Encrypt(t testing.TB, plain, recipient, encryptedRegex string) []byte {
	t.Helper()
	mk, err := sopsage.MasterKeyFromRecipient(recipient)
	if err != nil {
		t.Fatal(err)
	}
	return EncryptFor(t, plain, sops.KeyGroup{mk}, encryptedRegex)
}

// EncryptFor is Encrypt for the master keys of group (age, PGP, …), which
// encrypt the data key as sops does.
func EncryptFor(t testing.TB, plain string, group sops.KeyGroup, encryptedRegex string) []byte {
	t.Helper()
	store := yamlstore.NewStore(&config.YAMLStoreConfig{})
	branches, err := store.LoadPlainFile([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	tree := sops.Tree{Branches: branches, Metadata: sops.Metadata{
		KeyGroups: []sops.KeyGroup{group}, EncryptedRegex: encryptedRegex, Version: "3.13.3"}}
	dataKey, errs := tree.GenerateDataKey()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		t.Fatal(err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	if tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339)); err != nil {
		t.Fatal(err)
	}
	out, err := store.EmitEncryptedFile(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
