package kubenode

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rigger/rigger/reconcile/internal/apiretry"
)

// apiBackoff spaces the retries of a Node, RBAC or state Secret call:
// about a minute in all, as an API server whose etcd lost a member
// answers Unavailable until its client moves on.
var apiBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 15 * time.Second}

// retryAPI calls fn until it succeeds, fails for a reason that does not
// pass on its own (Retriable), the backoff is spent or ctx ends.
func retryAPI(ctx context.Context, fn func() error) error {
	return apiretry.Do(ctx, apiBackoff, Retriable, func(context.Context) error { return fn() })
}

// Retriable reports whether a failed Node, RBAC or state Secret call is
// made again: a failure that passes (apiretry.Passes), a conflict (the
// object changed since it was read: read it again), or any 500 (these
// calls send no field the schema could refuse).
func Retriable(err error) bool {
	return apiretry.Passes(err) || apierrors.IsConflict(err) || apierrors.IsInternalError(err)
}
