// Package registryauth gives image pulls the credentials of cluster.yml's
// private_registries, chosen as RKE v1.8.14 chooses them: the Docker API's
// X-Registry-Auth of a pull rigger makes on a node (RKE's
// docker.GetImageRegistryConfig), and the Docker config file the kubelet
// reads for the pulls of pod images (RKE's docker.GetKubeletDockerConfig).
package registryauth

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/registry"

	"github.com/rigger/rigger/spec"
)

// DockerHub is the registry of a private_registries entry without url,
// as in RKE.
const DockerHub = "docker.io"

// Set is the private registries of a cluster, keyed by url as RKE keys
// them: an entry without url is Docker Hub's, and of two entries with one
// url the last counts. The zero Set has no registry.
type Set struct {
	byURL map[string]spec.PrivateRegistry
}

// New returns the Set of private_registries prs.
func New(prs []spec.PrivateRegistry) Set {
	if len(prs) == 0 {
		return Set{}
	}
	s := Set{byURL: make(map[string]spec.PrivateRegistry, len(prs))}
	for _, pr := range prs {
		if pr.URL == "" {
			pr.URL = DockerHub
		}
		s.byURL[pr.URL] = pr
	}
	return s
}

// Empty reports whether the Set has no registry.
func (s Set) Empty() bool { return len(s.byURL) == 0 }

// Pull is what a pull of one image is given.
type Pull struct {
	// Registry is the url of the private registry whose credentials the
	// pull carries, "" for none.
	Registry string
	// User is that registry's user.
	User string
	// Auth is the X-Registry-Auth header's value, "" for none.
	Auth string
}

// For returns the credentials of a pull of image. As RKE, it looks the
// registry up by the image's host, or by its host and path without the
// last two components when the path has more than two ("repo.com/foo/bar"
// for repo.com/foo/bar/rancher/rke-tools:v0.1.51); an image that names no
// host is Docker Hub's. An image name that does not parse is an error, as
// in RKE.
func (s Set) For(image string) (Pull, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return Pull{}, fmt.Errorf("image %q: %w", image, err)
	}
	if s.Empty() {
		return Pull{}, nil
	}
	key := reference.Domain(named)
	if parts := strings.Split(reference.Path(named), "/"); len(parts) > 2 {
		key += "/" + strings.Join(parts[:len(parts)-2], "/")
	}
	pr, ok := s.byURL[key]
	if !ok {
		return Pull{}, nil
	}
	if pr.ECRCredentialPlugin != nil && pr.User == "" && pr.Password == "" {
		// Validation refuses these: rigger does not get ECR tokens.
		return Pull{}, fmt.Errorf("private registry %s: ecr_credential_plugin is not supported by rigger", pr.URL)
	}
	b, err := json.Marshal(registry.AuthConfig{Username: pr.User, Password: pr.Password})
	if err != nil {
		return Pull{}, fmt.Errorf("private registry %s: %w", pr.URL, err)
	}
	return Pull{Registry: pr.URL, User: pr.User, Auth: base64.URLEncoding.EncodeToString(b)}, nil
}

// dockerConfig is the Docker config file as RKE writes it for the kubelet.
type dockerConfig struct {
	Auths       map[string]authEntry `json:"auths,omitempty"`
	CredHelpers map[string]string    `json:"credHelpers,omitempty"`
}

type authEntry struct {
	Auth string `json:"auth,omitempty"`
}

// KubeletDockerConfig is the Docker config file (config.json) that gives
// the kubelet's pulls of pod images the registries' credentials, as RKE
// writes it: "auths" with each registry's user:password, and for a
// registry with ecr_credential_plugin the "ecr-login" credential helper
// instead. It is empty for an empty Set.
func (s Set) KubeletDockerConfig() []byte {
	if s.Empty() {
		return nil
	}
	cfg := dockerConfig{Auths: map[string]authEntry{}, CredHelpers: map[string]string{}}
	for url, pr := range s.byURL {
		if pr.ECRCredentialPlugin != nil {
			cfg.CredHelpers[pr.URL] = "ecr-login"
			continue
		}
		cfg.Auths[url] = authEntry{Auth: base64.StdEncoding.EncodeToString([]byte(pr.User + ":" + pr.Password))}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err) // maps of strings always marshal
	}
	return b
}
