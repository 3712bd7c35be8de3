package spec

import "regexp"

// ignoredKey is a key of RKE's cluster.yml that does nothing, in RKE
// v1.8.14 as in rigger: rigger warns that it ignores it instead of refusing
// it as unknown.
type ignoredKey struct {
	summary, detail string
}

// ignoredKeys are the ignored keys by schema path (schemaPath): the yaml
// keys of the types of RKE v1.0.0 (github.com/rancher/types), v1.3.24,
// v1.4.0 and v1.5.10 that RKE v1.8.14's types do not have, which older `rke
// config` wrote in every file (but for a few options of the Cisco ACI
// plugin of RKE v1.3, which rigger does not deploy), and the keys RKE
// v1.8.14 reads and never uses.
var ignoredKeys = map[string]ignoredKey{
	"services.kube-api.pod_security_policy": {
		"RKE v1.6.0 removed pod_security_policy and ignores it, and so does rigger",
		"PodSecurityPolicy is gone from Kubernetes 1.25 on; Pod Security Admission replaces it (services.kube-api.pod_security_configuration). Remove the key.",
	},
	// No RKE read it here, but every RKE ignores unknown keys, and files
	// with it at the top level exist.
	"pod_security_policy": {
		"pod_security_policy was a key of services.kube-api, which RKE v1.6.0 removed; RKE ignores it here, and so does rigger",
		"PodSecurityPolicy is gone from Kubernetes 1.25 on; Pod Security Admission replaces it (services.kube-api.pod_security_configuration). Remove the key.",
	},
	"nodes[].taints[].timeAdded": {
		"RKE reads timeAdded but never uses it, and rigger ignores it too",
		"A taint's time is set by Kubernetes when the taint is added. Remove the key.",
	},
}

var listIndex = regexp.MustCompile(`\[\d+\]`)

// schemaPath is path with its list indices dropped: nodes[].labels.
func schemaPath(path string) string {
	return listIndex.ReplaceAllString(path, "[]")
}
