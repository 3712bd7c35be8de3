package gitops_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/sopsfile"
	"github.com/rigger/rigger/spec/sopsfile/sopsfiletest"
)

// lockedBuffer is a bytes.Buffer the server's goroutines may log to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServerSOPS follows a repository with clusters encrypted with SOPS:
// the one serve has the key of is decrypted and reconciled; one encrypted
// for another key and one changed without sops stall with
// DecryptionFailed, naming the file; the plain cluster goes on. No
// decrypted value reaches status.yml or the logs.
func TestServerSOPS(t *testing.T) {
	const password = "registry-pw-Zq81xK"
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	yml := func(name string) string {
		return "cluster_name: " + name + "\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n" +
			"private_registries:\n  - url: registry.internal:5000\n    user: puller\n    password: " + password + "\n"
	}
	secret := sopsfiletest.Encrypt(t, yml("secret"), id.Recipient().String(), spec.SOPSEncryptedRegex)
	tampered := bytes.Replace(sopsfiletest.Encrypt(t, yml("tampered"), id.Recipient().String(), spec.SOPSEncryptedRegex),
		[]byte("user: puller"), []byte("user: pullex"), 1)
	o := newOrigin(t, freePort(t))
	o.commit(t, "four clusters", map[string]string{
		"clusters/plain/cluster.yml":    "cluster_name: plain\nnodes:\n  - {address: 127.0.0.1, user: u, role: [etcd, controlplane, worker]}\n",
		"clusters/secret/cluster.yml":   string(secret),
		"clusters/wrongkey/cluster.yml": string(sopsfiletest.Encrypt(t, yml("wrongkey"), other.Recipient().String(), spec.SOPSEncryptedRegex)),
		"clusters/tampered/cluster.yml": string(tampered),
	})
	o.push(t)
	var mu sync.Mutex
	opened := map[string]string{} // cluster name: its registry password
	var logs lockedBuffer
	_, events := serveClustersWith(t, o, gitops.Config{
		Decrypt: sopsfile.Decrypter{AgeIdentities: []age.Identity{id}}.Decrypt,
		Log:     slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Open: func(c *spec.Cluster, _ reconcile.Options) (gitops.Session, error) {
			mu.Lock()
			defer mu.Unlock()
			opened[c.ClusterName] = ""
			if len(c.PrivateRegistries) > 0 {
				opened[c.ClusterName] = c.PrivateRegistries[0].Password
			}
			return nil, errors.New("no nodes in this test")
		},
	})

	waitStatusWritten(t, events, 4)
	for cluster, want := range map[string]string{
		"wrongkey": "clusters/wrongkey/cluster.yml:13:1: error: sops: cannot decrypt the file with SOPS: no key rigger has decrypts the file's data key",
		"tampered": "clusters/tampered/cluster.yml:13:1: error: sops: cannot decrypt the file with SOPS: the file's MAC does not match its values",
	} {
		conds := conditionsOf(t, o, "clusters/"+cluster)
		if c, r := conds[gitops.ConditionStalled], conds[gitops.ConditionReady]; c.Status != "True" || c.Reason != string(gitops.ReasonDecryptionFailed) ||
			!strings.Contains(r.Message, want) {
			t.Errorf("%s: Stalled %+v, Ready %+v, want DecryptionFailed, Ready saying %q", cluster, c, r, want)
		}
	}
	for _, cluster := range []string{"plain", "secret"} {
		if c := conditionsOf(t, o, "clusters/"+cluster)[gitops.ConditionStalled]; c.Status != "False" {
			t.Errorf("%s: Stalled %+v, want False: it is retried", cluster, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := opened["plain"]; !ok || opened["secret"] != password || len(opened) != 2 {
		t.Errorf("sessions opened for %v, want plain and secret, with its password decrypted", opened)
	}
	for _, dir := range []string{"plain", "secret", "wrongkey", "tampered"} {
		if st, _ := bareGit(o, "show", "main:clusters/"+dir+"/status.yml"); strings.Contains(st, password) || st == "" {
			t.Errorf("status.yml of %s is missing or shows the password:\n%s", dir, st)
		}
	}
	if l := logs.String(); strings.Contains(l, password) || !strings.Contains(l, "secret") {
		t.Errorf("the logs show the password, or are empty:\n%s", l)
	}
}
