package addons

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// How a wait follows progress.
const (
	// maxStallFactor bounds a wait that keeps moving: it ends at the
	// latest this many ReadyTimeouts after it began.
	maxStallFactor = 10
	// maxFollowedRestarts is how many restarts of one container during a
	// wait count as progress (and whose announced back-off is waited out):
	// a container that restarts more often crash-loops, and its restarts
	// stop extending the wait.
	maxFollowedRestarts = 3
	// maxBackoff is the kubelet's longest restart back-off: a back-off a
	// message announces is waited out up to this long.
	maxBackoff = 5 * time.Minute
)

// progress follows a wait for readiness: the wait goes on while what it
// sees moves, and ends once nothing moved for the timeout (cluster.yml's
// addon_job_timeout), measured from the last change, or from the end of a
// restart back-off the kubelet announced; at the latest maxStallFactor
// timeouts after it began. A pod that restarts after a failed first try
// (flannel that could not reach the API server yet, say) is progress still
// to come, not a failure; one that crash-loops is not followed for ever.
type progress struct {
	timeout time.Duration
	began   time.Time
	// last is the fingerprint of what the wait saw last, lastAt when it
	// changed.
	last   string
	lastAt time.Time
	// backoffUntil is when the latest back-off announced ends.
	backoffUntil time.Time
	// restarts are each container's restart count when the wait first saw
	// it, by pod UID and container name; backoffSeen the back-offs
	// already counted, by the same key and the restart count.
	restarts    map[string]int32
	backoffSeen map[string]bool
}

func newProgress(now time.Time, timeout time.Duration) *progress {
	return &progress{timeout: timeout, began: now, lastAt: now, restarts: map[string]int32{}, backoffSeen: map[string]bool{}}
}

// seen records the fingerprint of one look at now, and reports whether the
// wait goes on.
func (p *progress) seen(now time.Time, fingerprint string) bool {
	if fingerprint != p.last {
		p.last, p.lastAt = fingerprint, now
	}
	return now.Before(p.end())
}

// end is when the wait ends unless something moves.
func (p *progress) end() time.Time {
	end := p.lastAt.Add(p.timeout)
	if b := p.backoffUntil.Add(p.timeout); b.After(end) {
		end = b
	}
	if last := p.began.Add(maxStallFactor * p.timeout); end.After(last) {
		return last
	}
	return end
}

// stalled is how long nothing moved, at now.
func (p *progress) stalled(now time.Time) time.Duration { return now.Sub(p.lastAt) }

// pods adds to fp what the pods' containers are doing, as far as it is
// progress: their phase, each container's state and readiness, and its
// restarts up to maxFollowedRestarts during the wait. A container in
// back-off with a restart still followed makes the wait last until the
// back-off announced ends (at most maxBackoff from now).
func (p *progress) pods(now time.Time, fp *strings.Builder, pods []*corev1.Pod) {
	for _, pod := range pods {
		fmt.Fprintf(fp, "pod %s %s %s;", pod.UID, pod.Spec.NodeName, pod.Status.Phase)
		for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			key := string(pod.UID) + "/" + cs.Name
			first, ok := p.restarts[key]
			if !ok {
				p.restarts[key], first = cs.RestartCount, cs.RestartCount
			}
			if cs.RestartCount-first > maxFollowedRestarts {
				// It crash-loops: whatever it does is no progress.
				fmt.Fprintf(fp, " %s crash-loops;", cs.Name)
				continue
			}
			fmt.Fprintf(fp, " %s %d %s %v;", cs.Name, cs.RestartCount, containerState(cs.State), cs.Ready)
			w := cs.State.Waiting
			if w == nil || w.Reason != "CrashLoopBackOff" {
				continue
			}
			bkey := fmt.Sprintf("%s/%d", key, cs.RestartCount)
			if p.backoffSeen[bkey] {
				continue
			}
			p.backoffSeen[bkey] = true
			if d, ok := announcedBackoff(w.Message); ok {
				if until := now.Add(min(d, maxBackoff)); until.After(p.backoffUntil) {
					p.backoffUntil = until
				}
			}
		}
	}
}

// containerState is "running", "terminated" or "waiting <reason>", where
// the kubelet's retries of an image pull, which flip between ErrImagePull
// and ImagePullBackOff for ever, are one state: no progress.
func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return "terminated"
	case s.Waiting != nil:
		switch r := s.Waiting.Reason; r {
		case "ErrImagePull", "ImagePullBackOff":
			return "waiting for its image"
		default:
			return "waiting " + r
		}
	}
	return "unknown"
}

// backoffMessage is how the kubelet announces a restart back-off: "back-off
// 40s restarting failed container=kube-flannel pod=…".
var backoffMessage = regexp.MustCompile(`back-off (\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h)(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))*) restarting`)

// announcedBackoff is the back-off a CrashLoopBackOff message announces.
func announcedBackoff(msg string) (time.Duration, bool) {
	m := backoffMessage.FindStringSubmatch(msg)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(m[1])
	return d, err == nil && d > 0
}
