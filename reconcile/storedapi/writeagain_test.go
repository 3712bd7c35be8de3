package storedapi

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/apiservertest"
)

// TestWriteAgainRealAPIServer: an object etcd holds at an older API
// version than its resource's storage version (put there as an API
// server of an older release would have stored it) is found by Scan,
// its resource is found served (Served, which leaves out the resources
// the API server does not serve), and WriteAgain has the API server store
// it at its storage version, unchanged: Scan then finds nothing.
func TestWriteAgainRealAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{s.EtcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	cs, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}

	// A ValidatingAdmissionPolicy, stored at v1 by the API server, then
	// put back as JSON at v1beta1 (the same fields).
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "object.spec.replicas <= 5"}},
		},
	}
	made, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const key = "/registry/validatingadmissionpolicies/replicas"
	old := made.DeepCopy()
	old.APIVersion, old.Kind = "admissionregistration.k8s.io/v1beta1", "ValidatingAdmissionPolicy"
	raw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, key, string(raw)); err != nil {
		t.Fatal(err)
	}

	const resource = "validatingadmissionpolicies.admissionregistration.k8s.io"
	apis := []API{{Group: "admissionregistration.k8s.io", Version: "v1beta1", Kind: "ValidatingAdmissionPolicy", Resource: "validatingadmissionpolicies", Removed: 99}}
	found, err := Scan(ctx, etcd.KV, "/registry", 32, 99, apis)
	if err != nil {
		t.Fatal(err)
	}
	if len(found.Objects) != 1 || found.Objects[0].Key != key || !reflect.DeepEqual(found.Resources, []string{resource}) {
		t.Fatalf("scan before: %+v, want %s listed", found, key)
	}

	served, err := Served(cs.Discovery(), []string{resource, "ipaddresses.networking.k8s.io", "widgets.example.com", "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	// 1.32 serves IPAddresses at no version by default (beta, off).
	if want := map[string]string{resource: "admissionregistration.k8s.io/v1", "configmaps": "v1"}; !reflect.DeepEqual(served, want) {
		t.Errorf("served %v, want %v", served, want)
	}

	// k8s.io/api's table: 1.34 no longer serves the v1beta1 policies.
	if err := CheckWritten(ctx, etcd.KV, "/registry", 32, 34, resource); err == nil || !strings.Contains(err.Error(), key+" at admissionregistration.k8s.io/v1beta1") {
		t.Errorf("CheckWritten before writing again: %v, want the key named", err)
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	n, err := WriteAgain(ctx, dyn, resource, served[resource])
	if err != nil || n != 1 {
		t.Fatalf("WriteAgain: %d written, %v; want 1", n, err)
	}
	if found, err := Scan(ctx, etcd.KV, "/registry", 32, 99, apis); err != nil || len(found.Objects) != 0 || len(found.Resources) != 0 {
		t.Errorf("scan after: %+v, %v; want nothing", found, err)
	}
	if err := CheckWritten(ctx, etcd.KV, "/registry", 32, 34, resource); err != nil {
		t.Errorf("CheckWritten after writing again: %v", err)
	}
	resp, err := etcd.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	if v, k, err := StoredType(resp.Kvs[0].Value); err != nil || v != "admissionregistration.k8s.io/v1" || k != "ValidatingAdmissionPolicy" {
		t.Errorf("stored at %q %q (%v), want admissionregistration.k8s.io/v1", v, k, err)
	}
	after, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "replicas", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != made.UID || !reflect.DeepEqual(after.Spec, made.Spec) || after.CreationTimestamp != made.CreationTimestamp {
		t.Errorf("written again as\n%+v\nwant unchanged\n%+v", after, made)
	}

	if _, err := WriteAgain(ctx, dyn, "ipaddresses.networking.k8s.io", "networking.k8s.io/v1"); err == nil {
		t.Error("WriteAgain through a version not served: no error")
	}
}
