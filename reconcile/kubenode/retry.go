package kubenode

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff spaces the retries of a call the API server failed for a
// passing reason (about a minute in all), as package reconcile does.
var Backoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 15 * time.Second}

// Retriable reports whether an API error may pass on its own: a conflict
// (the object changed since it was read: read it again), a timeout, an
// overloaded or restarting API server, a dropped connection.
func Retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsUnexpectedServerError(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}
