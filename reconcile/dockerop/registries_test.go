package dockerop

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/rigger/rigger/reconcile/registryauth"
	"github.com/rigger/rigger/spec"
)

// pullEngine is an engine without images whose pulls record their
// X-Registry-Auth and fail with pullErr.
type pullEngine struct {
	Engine
	auths   []string
	pullErr error
}

func (e *pullEngine) ImageInspect(context.Context, string, ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{}, errdefs.NotFound(errors.New("no such image"))
}

func (e *pullEngine) ImagePull(_ context.Context, _ string, o image.PullOptions) (io.ReadCloser, error) {
	e.auths = append(e.auths, o.RegistryAuth)
	if e.pullErr != nil {
		return nil, e.pullErr
	}
	return io.NopCloser(strings.NewReader(`{"status":"done"}`)), nil
}

// TestEnsureImageWithRegistries: a pull carries the credentials of the
// image's registry, and only of it; a failed one names the node, the
// image, the registry and its user, never the password.
func TestEnsureImageWithRegistries(t *testing.T) {
	set := registryauth.New([]spec.PrivateRegistry{{URL: "registry.internal:5000", User: "ci", Password: "s3cret"}})
	want, err := set.For("registry.internal:5000/rancher/hyperkube:v1")
	if err != nil || want.Auth == "" {
		t.Fatalf("the set gives no credentials: %+v, %v", want, err)
	}
	fake := &pullEngine{}
	e := WithRegistries(fake, set)
	ctx := context.Background()
	for _, ref := range []string{"registry.internal:5000/rancher/hyperkube:v1", "rancher/rke-tools:v0.1.111"} {
		if err := EnsureImage(ctx, e, "10.0.0.1", ref); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.auths) != 2 || fake.auths[0] != want.Auth || fake.auths[1] != "" {
		t.Errorf("pulls carried %q, want %q and none", fake.auths, want.Auth)
	}
	// A pull made on the engine itself gets them too.
	if _, err := e.ImagePull(ctx, "registry.internal:5000/x", image.PullOptions{}); err != nil || fake.auths[2] != want.Auth {
		t.Errorf("ImagePull carried %q (%v), want %q", fake.auths[2], err, want.Auth)
	}
	if WithRegistries(fake, registryauth.Set{}) != Engine(fake) || WithRegistries(e, registryauth.Set{}) != Engine(fake) {
		t.Error("no registries: the engine is not the node's own")
	}

	fake.pullErr = errors.New("Error response from daemon: Head \"https://registry.internal:5000/v2/rancher/hyperkube/manifests/v1\": no basic auth credentials")
	err = EnsureImage(ctx, e, "10.0.0.1", "registry.internal:5000/rancher/hyperkube:v1")
	var ie *ImageError
	if !errors.As(err, &ie) || ie.Registry != "registry.internal:5000" || ie.User != "ci" {
		t.Fatalf("error %v, want an ImageError of registry.internal:5000 and user ci", err)
	}
	for _, s := range []string{"node 10.0.0.1", "registry.internal:5000/rancher/hyperkube:v1", "private registry registry.internal:5000", `user "ci"`, "no basic auth credentials"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q shows the password", err)
	}
}

// TestEnsureImageExtendedLife: a failed pull of an image of RKE's
// extended-life namespace (rke-extended-life/…, which RKE v1.8.14's table
// names for its newest versions) names the subscription as the likely
// cause and what to do, with or without a private registry; other images
// keep the usual advice.
func TestEnsureImageExtendedLife(t *testing.T) {
	ctx := context.Background()
	denied := errors.New(`Error response from daemon: pull access denied for rke-extended-life/hyperkube, repository does not exist or may require 'docker login': denied: requested access to the resource is denied`)
	for _, tc := range []struct {
		name, ref string
		set       registryauth.Set
		want      []string
	}{
		{name: "Docker Hub", ref: "rke-extended-life/hyperkube:v1.32.13-rancher1",
			want: []string{"node 10.0.0.1", "rke-extended-life/hyperkube:v1.32.13-rancher1", "without credentials", "pull access denied",
				"extended-life", "subscribers", "likely cause", "private_registries", "system_images.kubernetes", "before v1.31.11 or v1.32.7"}},
		{name: "a mirror with credentials", ref: "registry.internal:5000/rke-extended-life/hyperkube:v1.32.13-rancher1",
			set:  registryauth.New([]spec.PrivateRegistry{{URL: "registry.internal:5000", User: "ci", Password: "s3cret"}}),
			want: []string{"from private registry registry.internal:5000 as user \"ci\"", "likely cause", "subscribers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &pullEngine{pullErr: denied}
			err := EnsureImage(ctx, WithRegistries(fake, tc.set), "10.0.0.1", tc.ref)
			var ie *ImageError
			if !errors.As(err, &ie) || !errors.Is(err, denied) {
				t.Fatalf("error %v, want an ImageError wrapping the pull's", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
	err := EnsureImage(ctx, &pullEngine{pullErr: denied}, "10.0.0.1", "rancher/hyperkube:v1.32.3-rancher1")
	if err == nil || strings.Contains(err.Error(), "subscri") || !strings.Contains(err.Error(), "docker load") {
		t.Errorf("a public image's failed pull: %v", err)
	}
}
