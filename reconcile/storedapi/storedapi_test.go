package storedapi

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// protobufValue is a value as the API server stores a built-in kind.
func protobufValue(t *testing.T, apiVersion, kind string) []byte {
	t.Helper()
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: []byte{0x0a, 0x00}}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s\x00"), b...)
}

func TestStoredType(t *testing.T) {
	for _, tc := range []struct {
		name             string
		value            []byte
		apiVersion, kind string
		err              string
	}{
		{"protobuf", protobufValue(t, "networking.k8s.io/v1alpha1", "IPAddress"), "networking.k8s.io/v1alpha1", "IPAddress", ""},
		{"JSON", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a"}}`), "example.com/v1", "Widget", ""},
		{"encrypted", []byte("k8s:enc:aescbc:v1:key1:\x01\x02"), "", "", "encrypted"},
		{"neither", []byte("\x00\x01garbage"), "", "", "not an object the API server wrote"},
		{"a broken envelope", []byte("k8s\x00\xff\xff"), "", "", "not an object the API server wrote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, k, err := StoredType(tc.value)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("StoredType: %q %q %v, want an error with %q", v, k, err, tc.err)
				}
				return
			}
			if err != nil || v != tc.apiVersion || k != tc.kind {
				t.Fatalf("StoredType: %q %q %v, want %q %q", v, k, err, tc.apiVersion, tc.kind)
			}
		})
	}
}

// memKV is an etcd key space in memory: Get with a range, a limit and More,
// as etcd answers.
type memKV struct {
	clientv3.KV
	kvs   map[string][]byte
	calls int
}

func (m *memKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	m.calls++
	op := clientv3.OpGet(key, opts...)
	var keys []string
	for k := range m.kvs {
		if k >= key && (len(op.RangeBytes()) == 0 && k == key || k < string(op.RangeBytes())) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	resp := &clientv3.GetResponse{}
	for i, k := range keys {
		if l := op.Limit(); l > 0 && int64(i) == l {
			resp.More = true
			break
		}
		resp.Kvs = append(resp.Kvs, &mvccpb.KeyValue{Key: []byte(k), Value: m.kvs[k]})
	}
	return resp, nil
}

func TestScan(t *testing.T) {
	ipv1alpha1 := protobufValue(t, "networking.k8s.io/v1alpha1", "IPAddress")
	kv := &memKV{kvs: map[string][]byte{
		"/registry/ipaddresses/10.43.0.10":  protobufValue(t, "networking.k8s.io/v1", "IPAddress"),
		"/registry/ipaddresses/10.43.0.99":  ipv1alpha1,
		"/registry/ipaddressesx/10.43.0.98": ipv1alpha1, // another prefix
		"/registry/servicecidrs/kubernetes": protobufValue(t, "networking.k8s.io/v1", "ServiceCIDR"),
		"/registry/validatingadmissionpolicies/deny": protobufValue(t, "admissionregistration.k8s.io/v1beta1",
			"ValidatingAdmissionPolicy"),
		"/registry/podsecuritypolicy/restricted": protobufValue(t, "policy/v1beta1", "PodSecurityPolicy"),
		"/registry/cronjobs/team-a/nightly":      protobufValue(t, "batch/v1beta1", "CronJob"),
		"/registry/cronjobs/team-a/weekly":       []byte("k8s:enc:aescbc:v1:key1:..."),
	}}
	for i := range 2*pageSize + 3 { // more than a page, and more than MaxListed
		kv.kvs["/registry/servicecidrs/old-"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26))] =
			protobufValue(t, "networking.k8s.io/v1alpha1", "ServiceCIDR")
	}
	f, err := Scan(context.Background(), kv, "/registry", 32, 33, Removed(32, 33))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Objects) != MaxListed || f.More != 2*pageSize+3+1-MaxListed {
		t.Fatalf("found %d objects and %d more, want %d and %d", len(f.Objects), f.More, MaxListed, 2*pageSize+3+1-MaxListed)
	}
	if o := f.Objects[0]; o.Key != "/registry/ipaddresses/10.43.0.99" || o.Name != "10.43.0.99" || o.Namespace != "" ||
		o.API.GroupVersion() != "networking.k8s.io/v1alpha1" || o.API.GroupResource() != "ipaddresses.networking.k8s.io" {
		t.Errorf("first object %+v", o)
	}
	if kv.calls < 4 {
		t.Errorf("%d reads: the servicecidrs were not read a page at a time", kv.calls)
	}

	// An upgrade from 1.24 to 1.25: the namespaced CronJob, with its
	// namespace; the PodSecurityPolicy under its own key prefix; the
	// encrypted value counted.
	f, err = Scan(context.Background(), kv, "/registry/", 24, 25, Removed(24, 25))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range f.Objects {
		got = append(got, o.API.GroupVersion()+" "+o.Namespace+"/"+o.Name)
	}
	if want := []string{"batch/v1beta1 team-a/nightly", "policy/v1beta1 /restricted"}; !reflect.DeepEqual(got, want) || f.Encrypted != 1 {
		t.Errorf("from 1.24 to 1.25: %v, %d encrypted; want %v, 1", got, f.Encrypted, want)
	}

	if !reflect.DeepEqual(f.EncryptedResources, []string{"cronjobs.batch"}) {
		t.Errorf("encrypted values' resources: %v, want cronjobs.batch", f.EncryptedResources)
	}

	// Events: events.k8s.io's are stored as the core group's v1 Events,
	// which every minor serves; their keys, which any tenant can multiply,
	// are not read.
	calls := kv.calls
	kv.kvs["/registry/events/team-a/x.1"] = []byte("\x00not even an object")
	if _, err := Scan(context.Background(), kv, "/registry/", 24, 25, Removed(24, 25)); err != nil {
		t.Errorf("Events read: %v", err)
	}
	if reads := kv.calls - calls; reads != 6 {
		t.Errorf("%d reads from 1.24 to 1.25, want 6: one for each resource but events", reads)
	}

	kv.kvs["/registry/ipaddresses/broken"] = []byte("\x00garbage")
	if _, err := Scan(context.Background(), kv, "/registry", 32, 33, Removed(32, 33)); err == nil || !strings.Contains(err.Error(), "/registry/ipaddresses/broken") {
		t.Errorf("a value no API server wrote: %v, want an error naming its key", err)
	}
}

// TestRemovedAgainstScheme checks the generated table against the
// lifecycle of the k8s.io/api rigger is built with: every stored kind's
// removed version it declares is in the table, at the same minor, so that
// an update of k8s.io/api without `go generate ./reconcile/storedapi`
// fails here.
func TestRemovedAgainstScheme(t *testing.T) {
	table := map[string]int{}
	for _, a := range removed {
		table[a.GroupVersion()+" "+a.Kind] = a.Removed
	}
	kinds := scheme.Scheme.AllKnownTypes()
	for gvk, typ := range kinds {
		r, ok := reflectNew(typ).(interface{ APILifecycleRemoved() (int, int) })
		if !ok || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		if _, stored := kinds[gvk.GroupVersion().WithKind(gvk.Kind+"List")]; !stored {
			continue
		}
		major, minor := r.APILifecycleRemoved()
		if major != 1 || minor <= 24 {
			continue
		}
		if got, ok := table[gvk.GroupVersion().String()+" "+gvk.Kind]; !ok || got != minor {
			t.Errorf("%s: removed in 1.%d, the table says %d (run go generate ./reconcile/storedapi)", gvk, minor, got)
		}
	}
	var got []string
	for _, a := range Removed(32, 33) {
		got = append(got, a.GroupVersion()+" "+a.Kind)
	}
	if want := []string{"networking.k8s.io/v1alpha1 IPAddress", "networking.k8s.io/v1alpha1 ServiceCIDR"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Removed(32, 33) = %v, want %v (1.33 stopped serving the alpha IPAddress and ServiceCIDR)", got, want)
	}
}

func reflectNew(t reflect.Type) any { return reflect.New(t).Interface() }
