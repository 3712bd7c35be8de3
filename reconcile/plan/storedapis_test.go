package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/storedapi"
)

// TestUpgradeMinors: the minors an upgrade goes from and to, from the
// oldest API server that answered to the newest cluster.yml asks for.
func TestUpgradeMinors(t *testing.T) {
	const yml = "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n  - {address: 10.0.0.2, user: u, role: [controlplane, worker]}\n"
	for _, tc := range []struct {
		name             string
		running, desired string
		observe          func(*observe.Cluster)
		from, to         int
		ok               bool
	}{
		{name: "one minor up", running: "v1.32.13-rancher1", desired: "v1.33.1", from: 32, to: 33, ok: true},
		{name: "a patch release", running: "v1.32.1-rancher1", desired: "v1.32.13-rancher1", from: 32, to: 32},
		{
			name: "an API server left behind by a stopped upgrade", running: "v1.33.1", desired: "v1.33.1", from: 32, to: 33, ok: true,
			observe: func(o *observe.Cluster) {
				c := o.Nodes["10.0.0.2"].Containers["kube-apiserver"]
				c.Image = "rancher/hyperkube:v1.32.13-rancher1"
				o.Nodes["10.0.0.2"].Containers["kube-apiserver"] = c
			},
		},
		{
			name: "no API server answered", running: "v1.32.13-rancher1", desired: "v1.33.1", from: -1, to: 33,
			observe: func(o *observe.Cluster) {
				for _, n := range o.Nodes {
					n.Reachable = false
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := asApplied(build(t, yml, hyperkubeAt(tc.running)))
			if tc.observe != nil {
				tc.observe(o)
			}
			from, to, ok := UpgradeMinors(build(t, yml, hyperkubeAt(tc.desired)), o)
			if from != tc.from || to != tc.to || ok != tc.ok {
				t.Errorf("UpgradeMinors = %d, %d, %v; want %d, %d, %v", from, to, ok, tc.from, tc.to, tc.ok)
			}
		})
	}
}

// TestCheckStoredAPIs: objects stored at a removed API version refuse
// the upgrade, each named with its key and what to do; etcd that could
// not be read refuses it too, as an error that is not a StoredAPIError.
func TestCheckStoredAPIs(t *testing.T) {
	api := storedapi.Removed(32, 33)[0]
	for _, tc := range []struct {
		name  string
		o     *observe.Cluster
		wants []string // in the error; none: no error
	}{
		{name: "no upgrade", o: &observe.Cluster{}},
		{name: "nothing stored at a removed version", o: &observe.Cluster{StoredAPIs: &storedapi.Found{From: 32, To: 33}}},
		{
			name: "an object stored at a removed version",
			o: &observe.Cluster{StoredAPIs: &storedapi.Found{From: 32, To: 33, More: 3, Objects: []storedapi.Object{
				{API: api, Key: "/registry/ipaddresses/10.43.0.99", Name: "10.43.0.99"},
			}}},
			wants: []string{"from 1.32 to 1.33", "ipaddresses.networking.k8s.io 10.43.0.99 stored at networking.k8s.io/v1alpha1, not served from 1.33",
				"etcd key /registry/ipaddresses/10.43.0.99", "and up to 3 more", "serve no version of their resources", "etcdctl del", "runtime-config"},
		},
		{
			name: "objects the running API servers can write again",
			o: &observe.Cluster{StoredAPIs: &storedapi.Found{From: 32, To: 33, More: 3, Objects: []storedapi.Object{
				{API: api, Key: "/registry/ipaddresses/10.43.0.99", Name: "10.43.0.99"},
			}, Resources: []string{"ipaddresses.networking.k8s.io"}, WriteAt: map[string]string{"ipaddresses.networking.k8s.io": "networking.k8s.io/v1beta1"}}},
		},
		{
			name: "a resource served, another not: only the other's objects named",
			o: &observe.Cluster{StoredAPIs: &storedapi.Found{From: 32, To: 33, Objects: []storedapi.Object{
				{API: api, Key: "/registry/ipaddresses/10.43.0.99", Name: "10.43.0.99"},
				{API: storedapi.API{Group: "example.com", Version: "v1alpha1", Kind: "Widget", Resource: "widgets", Removed: 33}, Key: "/registry/widgets/ns/w", Namespace: "ns", Name: "w"},
			}, Resources: []string{"ipaddresses.networking.k8s.io", "widgets.example.com"}, WriteAt: map[string]string{"ipaddresses.networking.k8s.io": "networking.k8s.io/v1beta1"}}},
			wants: []string{"widgets.example.com ns/w stored at example.com/v1alpha1", "etcd key /registry/widgets/ns/w"},
		},
		{
			name:  "etcd not read",
			o:     &observe.Cluster{StoredAPIs: &storedapi.Found{From: 32, To: 33}, StoredAPIsErr: errors.New("context deadline exceeded")},
			wants: []string{"could not be looked for", "context deadline exceeded", "apply again"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStoredAPIs(tc.o)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			var se *StoredAPIError
			if errors.As(err, &se) != (tc.o.StoredAPIsErr == nil) {
				t.Errorf("%T: a StoredAPIError only for objects found", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if strings.Contains(tc.name, "only the other's") && strings.Contains(err.Error(), "10.43.0.99") {
				t.Errorf("error %q names an object that is written again", err)
			}
		})
	}
}

// TestWriteAgain: a plan that upgrades Kubernetes past an API version
// etcd stores objects at, whose resources the running API servers serve,
// writes them again before the upgrade and says so; a plan without an
// upgrade or with an unservable resource writes nothing.
func TestWriteAgain(t *testing.T) {
	api := storedapi.Removed(32, 33)[0]
	found := &storedapi.Found{From: 32, To: 33, More: 7, Objects: []storedapi.Object{
		{API: api, Key: "/registry/ipaddresses/10.43.0.99", Name: "10.43.0.99"},
		{API: api, Key: "/registry/ipaddresses/10.43.0.98", Name: "10.43.0.98"},
	}, Resources: []string{"ipaddresses.networking.k8s.io"}, WriteAt: map[string]string{"ipaddresses.networking.k8s.io": "networking.k8s.io/v1beta1"}}
	want := []WriteAgain{{Resource: "ipaddresses.networking.k8s.io", At: "networking.k8s.io/v1beta1", Stored: []string{"networking.k8s.io/v1alpha1"}, Objects: 2}}
	if got := writeAgain(found); !reflect.DeepEqual(got, want) {
		t.Errorf("writeAgain = %+v, want %+v", got, want)
	}
	p := &Plan{Upgrade: &Upgrade{From: "v1.32.13", To: "v1.33.13"}, WriteAgain: want}
	var b strings.Builder
	p.Render(&b)
	for _, w := range []string{"Before the upgrade, after its snapshot", "ipaddresses.networking.k8s.io (2 stored at networking.k8s.io/v1alpha1) through networking.k8s.io/v1beta1", "which v1.33.13 reads"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("plan %q\nlacks %q", b.String(), w)
		}
	}
	unservable := *found
	unservable.WriteAt = nil
	if got := writeAgain(&unservable); got != nil {
		t.Errorf("writeAgain of an unservable resource = %+v, want none (the upgrade is refused)", got)
	}
	if got := writeAgain(nil); got != nil {
		t.Errorf("writeAgain(nil) = %+v", got)
	}
}

// TestStoredAPIWarnings: values encrypted at rest, whose stored version
// could not be read, are said in the plan, with their resources; not
// skipped without a word.
func TestStoredAPIWarnings(t *testing.T) {
	if w := StoredAPIWarnings(&observe.Cluster{StoredAPIs: &storedapi.Found{From: 24, To: 25}}); w != nil {
		t.Errorf("nothing encrypted: %v", w)
	}
	w := StoredAPIWarnings(&observe.Cluster{StoredAPIs: &storedapi.Found{From: 24, To: 25, Encrypted: 3,
		EncryptedResources: []string{"cronjobs.batch", "poddisruptionbudgets.policy"}}})
	if len(w) != 1 || !strings.Contains(w[0], "3 values of cronjobs.batch, poddisruptionbudgets.policy are encrypted at rest") ||
		!strings.Contains(w[0], "kubectl replace") {
		t.Errorf("warnings %q", w)
	}
}
