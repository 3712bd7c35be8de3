package secretstate_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/transport/agenttun"
	"github.com/rigger/rigger/transport/agenttun/backendtest"
)

// testAgentRecords: the agent tunnel's records in Secrets keep what its
// Store needs (backendtest), on a real API server; a directory's records
// copied in open as the same store; a damaged Secret is named.
func testAgentRecords(t *testing.T, newStore func(t *testing.T) *secretstate.Store) {
	records := func(t *testing.T) agenttun.Backend {
		s := newStore(t)
		return &secretstate.AgentRecords{Secrets: s.Secrets, Namespace: s.Namespace}
	}
	backendtest.Run(t, records)
	t.Run("stores", func(t *testing.T) { backendtest.RunStores(t, records) })

	t.Run("copied from a directory", func(t *testing.T) {
		now := time.Now()
		dirStore, err := agenttun.OpenStore(t.TempDir(), now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dirStore.IssueToken("c1", "n1", time.Hour, now); err != nil {
			t.Fatal(err)
		}
		to := records(t)
		n, err := agenttun.Copy(t.Context(), dirStore.Backend(), to)
		if err != nil || n != 1 {
			t.Fatalf("Copy = %d, %v; want 1 record", n, err)
		}
		s, err := agenttun.NewStore(t.Context(), to, now)
		if err != nil {
			t.Fatal(err)
		}
		if s.CA().Checksum() != dirStore.CA().Checksum() {
			t.Fatal("the Secrets hold another CA than the directory's")
		}
		if toks, _ := to.List(t.Context(), "tokens"); len(toks) != 1 {
			t.Fatalf("%d tokens in the Secrets, want the directory's one", len(toks))
		}
	})

	t.Run("damaged", func(t *testing.T) {
		st := newStore(t)
		b := &secretstate.AgentRecords{Secrets: st.Secrets, Namespace: st.Namespace}
		if _, err := st.Secrets.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secretstate.AgentCASecret},
			Data:       map[string][]byte{"ca.crt": []byte("x")},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := agenttun.NewStore(t.Context(), b, time.Now())
		if err == nil || !strings.Contains(err.Error(), secretstate.AgentCASecret) || !strings.Contains(err.Error(), "new CA would") {
			t.Fatalf("a CA Secret rigger did not write: %v, want a refusal naming it", err)
		}
		key := "nodes/" + strings.Repeat("ab", 32) + ".json"
		if _, err := st.Secrets.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "rigger-agent-nodes-" + strings.Repeat("ab", 32)},
			Data:       map[string][]byte{"content": []byte("{}")},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(t.Context(), key); err == nil || !strings.Contains(err.Error(), "rigger-agent-nodes-abab") {
			t.Fatalf("a record's Secret rigger did not write: %v, want an error naming it", err)
		}
	})
}
