package kubenode

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rigger/rigger/internal/fuzzcheck"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// stateSecretData is the data of the state Secret SaveState writes for a
// one-node cluster.
func stateSecretData(t testing.TB) map[string][]byte {
	t.Helper()
	c, diags := spec.Parse([]byte(`cluster_name: c1
kubernetes_version: v1.31.5-rancher1-1
nodes:
  - {address: 10.0.0.1, hostname_override: n1, role: [etcd, controlplane, worker], user: root, labels: {a: b},
     taints: [{key: k, value: v, effect: NoSchedule}]}
`), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	data, err := stateData(c, set)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseStateTooLarge(t *testing.T) {
	data := stateSecretData(t)
	data["padding"] = make([]byte, maxStateSize)
	if _, _, err := parseState(data); err == nil || !strings.Contains(err.Error(), "more than 1 MiB") {
		t.Fatalf("got %v, want the Secret refused as too large", err)
	}
}

// FuzzParseState feeds parseState what the state Secret's cluster.json
// may hold (anyone who may write Secrets in kube-system can change it): no
// panic, work in proportion to the Secret, and a state that reads survives
// being written and read again.
func FuzzParseState(f *testing.F) {
	full := stateSecretData(f)
	f.Add(full[StateKey])
	// The CA alone is a PKI FromFiles accepts; the other certificates
	// would only slow the fuzzer down (pki's FuzzFromFiles covers them).
	data := map[string][]byte{}
	for _, k := range []string{pki.CACertName + ".pem", pki.CACertName + "-key.pem"} {
		data[k] = full[k]
	}
	f.Add([]byte(`{"cluster_name":"c1","nodes":[{"address":"10.0.0.1","role":null,"labels":{},"taints":[{}]}]}`))
	f.Add([]byte(`{"nodes":{"a":1}}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, cluster []byte) {
		in := make(map[string][]byte, len(data))
		size := 0
		for k, v := range data {
			in[k] = v
			size += len(v)
		}
		in[StateKey] = cluster
		var st *ClusterState
		var err error
		fuzzcheck.Bounded(t, size, func() { _, st, err = parseState(in) })
		if err != nil {
			return
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a state read back does not encode: %v", err)
		}
		in[StateKey] = b
		_, again, err := parseState(in)
		if err != nil {
			t.Fatalf("a state written again does not read: %v\n%s", err, b)
		}
		if diff := cmp.Diff(st, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("a state written again differs (-first +again):\n%s", diff)
		}
	})
}
