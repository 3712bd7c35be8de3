package replicas

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/lock"
)

// TestRelay: an accepted webhook goes to another live replica at the
// address its membership Lease holds, with its path, body and signature,
// marked with the relaying replica; not to
// this one (its server fails the test), nor to one without an address.
func TestRelay(t *testing.T) {
	type got struct {
		path, body, sig, by, host string
	}
	received := make(chan got, 4)
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		received <- got{r.URL.Path, string(b), r.Header.Get("X-Hub-Signature-256"), r.Header.Get(webhook.RelayedHeader), r.Host}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer peer.Close()
	self := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the webhook was relayed to the replica that received it")
	}))
	defer self.Close()

	client := fake.NewClientset()
	s, err := New(Config{Client: client, Namespace: "ns", Group: "g", ID: "a", Address: self.URL})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for id, addr := range map[string]string{"a": self.URL, "b": peer.URL, "c": ""} {
		h, err := json.Marshal(lock.Holder{ID: id, Address: addr})
		if err != nil {
			t.Fatal(err)
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.memberLease(id), Labels: map[string]string{LabelReplica: "g"},
			Annotations: map[string]string{lock.HolderAnnotation: string(h)}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &metav1.MicroTime{Time: now}}}
		if _, err := client.CoordinationV1().Leases("ns").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.read(context.Background())
	hdr := http.Header{"X-Hub-Signature-256": {"sha256=abc"}, "Host": {"forge.example"}, "Content-Length": {"99"}}
	s.Relay(context.Background(), nil, "/hooks/0123", hdr, []byte(`{"ref":"refs/heads/main"}`))
	r := testwait.Recv(t, received, 10*time.Second, "the relayed webhook at replica b", func(got) bool { return true })
	want := got{"/hooks/0123", `{"ref":"refs/heads/main"}`, "sha256=abc", "a", peer.Listener.Addr().String()}
	if r != want {
		t.Errorf("relayed %+v, want %+v", r, want)
	}
}
