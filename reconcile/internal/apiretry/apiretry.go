// Package apiretry decides which failed Kubernetes API calls may pass on
// their own (Passes), and makes such calls again (Do). Each caller says
// which failures it makes again, starting from Passes: the add-ons' apply
// those alone, the Node, RBAC and state Secret calls also conflicts and
// any 500, the cluster Lease also no answer at all.
package apiretry

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Passes reports whether an API error may pass on its own: a timeout, an
// overloaded or restarting API server, a dropped or refused connection,
// or the API server's 500 for its etcd not answering (storageUnavailable).
// Other 500s are not in it: server-side apply answers one for a field the
// schema does not declare, which no retry mends.
func Passes(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsConnectionRefused(err) ||
		storageUnavailable(err)
}

// storageUnavailable reports whether err is the API server's 500 for etcd
// not answering: a member down, a leader election. Right after an etcd
// member goes away, the API server answers each resource's first call so
// after about 10 s, until its etcd client gives the member up. The API
// server gives no reason for it but the message.
func storageUnavailable(err error) bool {
	if !apierrors.IsInternalError(err) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"etcdserver: ", "rpc error: code = Unavailable", "rpc error: code = DeadlineExceeded"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Do calls fn until it succeeds, fails for a reason again rejects, the
// backoff's steps are spent or ctx ends, and returns fn's last error (or
// ctx's, when ctx ended before the first call).
func Do(ctx context.Context, backoff wait.Backoff, again func(error) bool, fn func(context.Context) error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = fn(ctx)
		if last != nil && !again(last) {
			return false, last
		}
		return last == nil, nil
	})
	if last != nil {
		return last
	}
	return err
}
