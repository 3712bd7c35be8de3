package pki

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
)

// KubeconfigPath is where a component's kubeconfig lives on a node, as RKE
// puts it: /etc/kubernetes/ssl/kubecfg-kube-node.yaml.
func KubeconfigPath(name string) string {
	return path.Join(NodeDir, "kubecfg-"+name+".yaml")
}

// Kubeconfig is a kubeconfig with one cluster, one user and one context
// named after the cluster, with the certificates inline. server is the API
// server's URL, e.g. https://10.0.0.1:6443. The result holds a private key:
// write it 0600.
func Kubeconfig(cluster, server, user string, caPEM, certPEM, keyPEM []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: %s
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: %s
  context:
    cluster: %s
    user: %s
current-context: %s
`, quote(cluster), quote(server), b64(caPEM),
		quote(user), b64(certPEM), b64(keyPEM),
		quote(cluster), quote(cluster), quote(user), quote(cluster))
}

// quote is s as a YAML double-quoted scalar: a JSON string is one.
func quote(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
