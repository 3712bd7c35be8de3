package sopsfile

import (
	"bytes"
	"context"
	"testing"

	"filippo.io/age"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/sopsfile/sopsfiletest"
)

// FuzzDecrypt feeds spec.ParseWith and Decrypt files encrypted for the
// fuzzer's identity, changed anywhere: they are read or refused with a
// diagnostic, never a panic or a hang, and no secret of the seed shows.
func FuzzDecrypt(f *testing.F) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sopsfiletest.Encrypt(f, plainCluster, id.Recipient().String(), spec.SOPSEncryptedRegex))
	f.Add(sopsfiletest.Encrypt(f, plainCluster, id.Recipient().String(), ""))
	f.Add([]byte("a: &a [*a]\nsops:\n  mac: x\n"))
	f.Add([]byte("sops:\n  mac: ENC[AES256_GCM,data:x,iv:y,tag:z,type:str]\n  lastmodified: nope\n"))
	d := Decrypter{AgeIdentities: []age.Identity{id}}.Options()
	f.Fuzz(func(t *testing.T, data []byte) {
		_, diags, err := spec.ParseWith(context.Background(), data, "cluster.yml", d)
		if err != nil {
			t.Fatalf("ParseWith returned %v, want diagnostics only", err)
		}
		for _, dg := range diags {
			for _, s := range []string{secretKey, secretPassword, secretSSHLine} {
				if bytes.Contains([]byte(dg.String()), []byte(s)) && !bytes.Contains(data, []byte(s)) {
					t.Errorf("a diagnostic shows a decrypted secret: %s", dg)
				}
			}
		}
	})
}
