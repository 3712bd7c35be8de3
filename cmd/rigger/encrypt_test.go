package main

import (
	"strings"
	"testing"
)

// TestRotateKeyRefuses: as rke encrypt rotate-key, rotate-key refuses a
// cluster without a key rigger generates, before any connection.
func TestRotateKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir)
	node := "ssh_key_path: " + dir + "/id\nnodes: [{address: 192.0.2.10, user: u, role: [etcd, controlplane, worker]}]\n"
	for _, tc := range []struct {
		name, yml, want string
	}{
		{"encryption off", node, "secrets_encryption_config.enabled is not true"},
		{"custom_config", node + "services: {kube-api: {secrets_encryption_config: {enabled: true, custom_config: " +
			"{apiVersion: apiserver.config.k8s.io/v1, kind: EncryptionConfiguration, resources: [{resources: [secrets], providers: [{identity: {}}]}]}}}}\n",
			"only the key it generates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCluster(t, tc.yml)
			_, errOut, code := run(t, "encrypt", "rotate-key", "-f", path, "--state-dir", t.TempDir()+"/state", "--yes")
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr:\n%s", code, errOut)
			}
		})
	}
}
