package plan

import (
	"errors"
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
				"etcd key /registry/ipaddresses/10.43.0.99", "and 3 more", "kubectl replace", "etcdctl del"},
		},
		{
			name:  "etcd not read",
			o:     &observe.Cluster{StoredAPIs: &storedapi.Found{From: 32, To: 33}, StoredAPIsErr: errors.New("context deadline exceeded")},
			wants: []string{"etcd could not be read", "context deadline exceeded", "apply again"},
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
		})
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
