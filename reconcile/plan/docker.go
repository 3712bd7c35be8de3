package plan

import (
	"fmt"
	"strings"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// UnsupportedDocker is a node whose Docker engine RKE does not support
// for the cluster's Kubernetes version.
type UnsupportedDocker struct {
	Node string
	// Version is the engine's version, as it reports it.
	Version string
	// Err says why Version could not be compared with the supported list
	// (it is not a semantic version); nil when it was, and is not on it.
	Err error
}

// DockerVersionError refuses a plan (unless rigger runs with
// --ignore-docker-version) when nodes run a Docker engine that is not on RKE's list of supported
// versions for the cluster's Kubernetes minor version.
type DockerVersionError struct {
	// KubernetesVersion is kubernetes_version; Supported the Docker
	// versions RKE lists for its minor version (`20.10.x`, …).
	KubernetesVersion string
	Supported         []string
	Nodes             []UnsupportedDocker
}

func (e *DockerVersionError) Error() string {
	minor := strings.TrimPrefix(rkemeta.Series(e.KubernetesVersion), "v")
	var each []string
	for _, n := range e.Nodes {
		if n.Err != nil {
			each = append(each, fmt.Sprintf("node %s: %v", n.Node, n.Err))
		} else {
			each = append(each, fmt.Sprintf("node %s runs Docker %s", n.Node, n.Version))
		}
	}
	supported := "none"
	if len(e.Supported) > 0 {
		supported = strings.Join(e.Supported, ", ")
	}
	if riggermeta.IsRigger(e.KubernetesVersion) {
		supported += " (RKE's list for " + strings.TrimPrefix(riggermeta.BaseSeries, "v") + ", which rigger's own versions keep: their nodes run the same rke-tools and cri-dockerd)"
	}
	return fmt.Sprintf("unsupported Docker version for Kubernetes %s: %s. The Docker versions RKE %s supports for Kubernetes %s are %s (any patch release). "+
		"Install a supported Docker version on these nodes, or run rigger with --ignore-docker-version to skip this check (as rke up's flag; "+
		"like rke up, rigger ignores ignore_docker_version in cluster.yml)",
		minor, strings.Join(each, "; "), rkemeta.RKEVersion, minor, supported)
}

// CheckDocker returns a *DockerVersionError when reachable nodes of c run
// a Docker engine that RKE's check (rkemeta.SupportsDocker) refuses for
// c.KubernetesVersion (for rigger's versions past RKE's table, with RKE's
// list of 1.32: riggermeta.SupportsDocker); nil otherwise, and always when ignore is set (rigger's
// --ignore-docker-version). As in `rke up`, which replaces the file's
// ignore_docker_version with its flag, cluster.yml plays no part. Nodes
// that did not answer, and nodes gone from cluster.yml, are not checked.
// Like Compute, it is pure.
func CheckDocker(c *spec.Cluster, o *observe.Cluster, ignore bool) error {
	if ignore || o == nil {
		return nil
	}
	var found []UnsupportedDocker
	for _, n := range c.Nodes {
		on := o.Nodes[n.Address]
		if on == nil || !on.Reachable {
			continue
		}
		ok, err := riggermeta.SupportsDocker(c.KubernetesVersion, on.DockerVersion)
		if err != nil || !ok {
			found = append(found, UnsupportedDocker{Node: n.Address, Version: on.DockerVersion, Err: err})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return &DockerVersionError{KubernetesVersion: c.KubernetesVersion, Supported: riggermeta.DockerVersions(c.KubernetesVersion), Nodes: found}
}
