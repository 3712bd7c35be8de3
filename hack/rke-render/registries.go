package main

import (
	"encoding/json"
	"io"

	"github.com/rancher/rke/docker"
	v3 "github.com/rancher/rke/types"
)

// RegistryQuery is what -registries reads: cluster.yml's
// private_registries, with RKE's json names, and image names.
type RegistryQuery struct {
	Registries []v3.PrivateRegistry `json:"registries"`
	Images     []string             `json:"images"`
}

// RegistryAnswer is what -registries prints: for each image, in order, the
// pull's credentials, and the kubelet's Docker config.
type RegistryAnswer struct {
	Pulls   []Pull `json:"pulls"`
	Kubelet string `json:"kubelet"`
}

// Pull is what RKE's docker.GetImageRegistryConfig returns for one image:
// the X-Registry-Auth value, the registry's url, or its error.
type Pull struct {
	Auth     string `json:"auth,omitempty"`
	Registry string `json:"registry,omitempty"`
	Error    string `json:"error,omitempty"`
}

// registryAuth answers a RegistryQuery with RKE's code. The registries map
// is built as RKE's cluster.setClusterDefaults builds
// PrivateRegistriesMap: keyed by url, docker.io for an empty one.
func registryAuth(in io.Reader, out io.Writer) error {
	var q RegistryQuery
	if err := json.NewDecoder(in).Decode(&q); err != nil {
		return err
	}
	prs := map[string]v3.PrivateRegistry{}
	for _, pr := range q.Registries {
		if pr.URL == "" {
			pr.URL = docker.DockerRegistryURL
		}
		prs[pr.URL] = pr
	}
	var a RegistryAnswer
	for _, image := range q.Images {
		auth, url, err := docker.GetImageRegistryConfig(image, prs)
		p := Pull{Auth: auth, Registry: url}
		if err != nil {
			p.Error = err.Error()
		}
		a.Pulls = append(a.Pulls, p)
	}
	if len(prs) > 0 {
		cfg, err := docker.GetKubeletDockerConfig(prs)
		if err != nil {
			return err
		}
		a.Kubelet = cfg
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}
