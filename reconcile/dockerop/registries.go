package dockerop

import (
	"context"
	"io"

	"github.com/docker/docker/api/types/image"

	"github.com/rigger/rigger/reconcile/registryauth"
)

// registries is an Engine whose image pulls carry the credentials of the
// image's private registry.
type registries struct {
	Engine
	set registryauth.Set
}

// WithRegistries returns e pulling images with the credentials of their
// registry in set (private_registries), as RKE pulls: the Docker API's
// X-Registry-Auth of the registry registryauth.Set.For chooses. With an
// empty set it returns e.
func WithRegistries(e Engine, set registryauth.Set) Engine {
	if r, ok := e.(*registries); ok {
		e = r.Engine
	}
	if set.Empty() {
		return e
	}
	return &registries{Engine: e, set: set}
}

// ImagePull pulls ref with the credentials of its registry, unless opts
// carries some.
func (r *registries) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error) {
	if opts.RegistryAuth == "" {
		pull, err := r.set.For(ref)
		if err != nil {
			return nil, err
		}
		opts.RegistryAuth = pull.Auth
	}
	return r.Engine.ImagePull(ctx, ref, opts)
}
