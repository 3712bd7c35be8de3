package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rigger/rigger/reconcile/observe"
)

// TestCheckDocker: as in `rke up`, a node whose Docker engine is not on
// RKE's list for the cluster's Kubernetes minor version refuses the plan,
// naming the node, its version, the list and what to do, whatever
// cluster.yml's ignore_docker_version says; --ignore-docker-version (ignore)
// skips the check.
func TestCheckDocker(t *testing.T) {
	const nodes = "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n  - {address: 10.0.0.2, user: u, role: [worker]}\n"
	observed := func(v1, v2 string) *observe.Cluster {
		return &observe.Cluster{Nodes: map[string]*observe.Node{
			"10.0.0.1": {Address: "10.0.0.1", Reachable: true, DockerVersion: v1},
			"10.0.0.2": {Address: "10.0.0.2", Reachable: true, DockerVersion: v2},
		}}
	}
	for _, tc := range []struct {
		name, yml string
		// version, when set, replaces the kubernetes_version yml validated
		// with (rigger would need every system image for it).
		version string
		ignore  bool
		o       *observe.Cluster
		want    []UnsupportedDocker
		// says are parts of the error's text.
		says []string
	}{
		{name: "--ignore-docker-version: not checked", yml: "kubernetes_version: v1.32.3-rancher1-1\n", ignore: true,
			o: observed("28.4.0", "dev")},
		{
			name: "checked by default", yml: "kubernetes_version: v1.32.3-rancher1-1\n",
			o:    observed("20.10.24+dfsg1", "28.4.0"),
			want: []UnsupportedDocker{{Node: "10.0.0.2", Version: "28.4.0"}},
			says: []string{"--ignore-docker-version"},
		},
		{
			name: "ignore_docker_version: true in cluster.yml does not skip it, as in rke up",
			yml:  "ignore_docker_version: true\nkubernetes_version: v1.32.3-rancher1-1\n",
			o:    observed("28.4.0", "20.10.24"),
			want: []UnsupportedDocker{{Node: "10.0.0.1", Version: "28.4.0"}},
		},
		{name: "supported", yml: "ignore_docker_version: false\nkubernetes_version: v1.32.3-rancher1-1\n",
			o: observed("20.10.24+dfsg1", "27.5.1")},
		{
			name: "one node too new", yml: "ignore_docker_version: false\nkubernetes_version: v1.32.3-rancher1-1\n",
			o:    observed("20.10.24+dfsg1", "28.4.0"),
			want: []UnsupportedDocker{{Node: "10.0.0.2", Version: "28.4.0"}},
			says: []string{"unsupported Docker version for Kubernetes 1.32: node 10.0.0.2 runs Docker 28.4.0.",
				"supports for Kubernetes 1.32 are 1.13.x, ", ", 28.3.x (any patch release)",
				"Install a supported Docker version on these nodes, or run rigger with --ignore-docker-version"},
		},
		{
			name: "a version that does not parse", yml: "ignore_docker_version: false\nkubernetes_version: v1.32.3-rancher1-1\n",
			o:    observed("dev", "20.10.24"),
			want: []UnsupportedDocker{{Node: "10.0.0.1", Version: "dev"}},
			says: []string{`node 10.0.0.1: the Docker version "dev" is not a semantic version: dev is not in dotted-tri format.`},
		},
		{
			name: "a minor version RKE lists no Docker version for",
			yml:  "ignore_docker_version: false\n", version: "v1.38.1",
			o:    observed("20.10.24", "20.10.24"),
			want: []UnsupportedDocker{{Node: "10.0.0.1", Version: "20.10.24"}, {Node: "10.0.0.2", Version: "20.10.24"}},
			says: []string{"supports for Kubernetes 1.38 are none"},
		},
		{
			name: "nodes that did not answer or are gone are not checked",
			yml:  "ignore_docker_version: false\nkubernetes_version: v1.32.3-rancher1-1\n",
			o: &observe.Cluster{Nodes: map[string]*observe.Node{
				"10.0.0.1": {Address: "10.0.0.1", Reachable: false},
				"10.0.0.9": {Address: "10.0.0.9", Reachable: true, DockerVersion: "28.0.1"},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, tc.yml+nodes)
			if tc.version != "" {
				c.KubernetesVersion = tc.version
			}
			err := CheckDocker(c, tc.o, tc.ignore)
			var de *DockerVersionError
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a *DockerVersionError", err)
			}
			if diff := cmp.Diff(tc.want, de.Nodes, cmpopts.IgnoreFields(UnsupportedDocker{}, "Err")); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			for _, n := range de.Nodes {
				if (n.Err != nil) != (n.Version == "dev") {
					t.Errorf("node %s: Err %v", n.Node, n.Err)
				}
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q:\n%s", s, err)
				}
			}
		})
	}
}
