package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/rancher/rke/cluster"
)

// parseFile reads the cluster.yml at path as `rke up` starts to: RKE's
// cluster.ParseConfig, whose result it writes as JSON with RKE's json names
// to out/<name>/config.json (or RKE's error to out/<name>/error.txt), then
// cluster.InitClusterObject (RKE's defaults and validation), whose
// configuration it writes to out/<name>/defaulted.json (or RKE's error to
// out/<name>/init-error.txt), and, with a cloud provider, the cloud config
// file RKE writes to the nodes to out/<name>/cloud-config.
func parseFile(path, out string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c, err := cluster.ParseConfig(string(text))
	if err != nil {
		return os.WriteFile(filepath.Join(dir, "error.txt"), []byte(err.Error()), 0o644)
	}
	if err := writeJSONFile(filepath.Join(dir, "config.json"), c); err != nil {
		return err
	}
	// RKE keeps its state beside cluster.yml: work in a directory of our own.
	work, err := os.MkdirTemp("", "rke-parse-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	flags := cluster.ExternalFlags{ClusterFilePath: filepath.Join(work, "cluster.yml")}
	kc, err := cluster.InitClusterObject(context.Background(), c, flags, "")
	if err != nil {
		return os.WriteFile(filepath.Join(dir, "init-error.txt"), []byte(err.Error()), 0o644)
	}
	if kc.CloudProvider.Name != "" {
		// The cloud config file RKE writes to /etc/kubernetes/cloud-config
		// on every node (setCloudProvider made it).
		if err := os.WriteFile(filepath.Join(dir, "cloud-config"), []byte(kc.CloudConfigFile), 0o644); err != nil {
			return err
		}
	}
	return writeJSONFile(filepath.Join(dir, "defaulted.json"), &kc.RancherKubernetesEngineConfig)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
