package kubenode

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// retryAPI calls fn until it succeeds, fails for a reason that does not
// pass on its own (Retriable), or the backoff is spent: about a minute, as
// an API server whose etcd lost a member answers Unavailable until its
// client moves on. It is the one retry of API calls in rigger.
func retryAPI(fn func() error) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 15 * time.Second}
	return retry.OnError(backoff, Retriable, fn)
}

// Retriable reports whether an API error may pass on its own: a conflict
// (the object changed since it was read: read it again), a timeout, an
// overloaded or restarting API server, a dropped connection.
func Retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsUnexpectedServerError(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}
