package kubenode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/internal/podstatus"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// FindNodes returns the Nodes of the machine at address: those labelled
// with it, or else the unlabelled Node named hostname (a kubelet that
// registered before rigger labelled Nodes). Hostname may be empty.
func FindNodes(ctx context.Context, cs kubernetes.Interface, address, hostname string) ([]corev1.Node, error) {
	var list *corev1.NodeList
	err := retryAPI(ctx, func() (err error) {
		list, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: desired.NodeAddressLabel + "=" + desired.NodeAddressLabelValue(address)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list the Nodes of %s: %w", address, err)
	}
	if len(list.Items) > 0 || hostname == "" {
		return list.Items, nil
	}
	var n *corev1.Node
	err = retryAPI(ctx, func() (err error) {
		n, err = cs.CoreV1().Nodes().Get(ctx, hostname, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read Node %s: %w", hostname, err)
	case n.Labels[desired.NodeAddressLabel] != "":
		return nil, nil // another machine's
	}
	return []corev1.Node{*n}, nil
}

// ListNodes lists every Node, again while the API server fails for a
// reason that passes (Retriable), until the backoff is spent or ctx ends.
func ListNodes(ctx context.Context, cs kubernetes.Interface) ([]corev1.Node, error) {
	var list *corev1.NodeList
	err := retryAPI(ctx, func() (err error) {
		list, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	return list.Items, nil
}

// patchNode applies a JSON merge patch, retried on passing errors.
func patchNode(ctx context.Context, cs kubernetes.Interface, name string, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return retryAPI(ctx, func() error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	})
}

// Cordon marks the Node unschedulable and notes that rigger did
// (AnnotationCordoned). A Node already unschedulable is left as it is and
// Cordon returns false: whoever cordoned it uncordons it.
func Cordon(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) (bool, error) {
	if n.Spec.Unschedulable {
		return false, nil
	}
	err := patchNode(ctx, cs, n.Name, map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnotationCordoned: "true"}},
		"spec":     map[string]any{"unschedulable": true},
	})
	if err != nil {
		return false, fmt.Errorf("cordon Node %s: %w", n.Name, err)
	}
	return true, nil
}

// Uncordon makes the Node schedulable again when rigger cordoned it
// (AnnotationCordoned), and reports whether it did.
func Uncordon(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) (bool, error) {
	if _, ours := n.Annotations[AnnotationCordoned]; !ours {
		return false, nil
	}
	err := patchNode(ctx, cs, n.Name, map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnotationCordoned: nil}},
		"spec":     map[string]any{"unschedulable": nil},
	})
	if err != nil {
		return false, fmt.Errorf("uncordon Node %s: %w", n.Name, err)
	}
	return true, nil
}

// Drained is what Drain did.
type Drained struct {
	// Evicted is how many pods it evicted or deleted.
	Evicted int
	// Held counts, by pod (namespace/name), the evictions a
	// PodDisruptionBudget refused before the pod could go (kubectl's drain
	// tries again every 5 s).
	Held map[string]int
	// Kept is rigger's own pod when it was on the Node (namespace/name),
	// "" otherwise.
	Kept string
	// Last is the pod (namespace/name) that was gone last, Gone how long
	// after the drain began: what a slow drain waited for.
	Last string
	Gone time.Duration
}

// Drain evicts the pods of the Node (kubectl drain, with
// upgrade_strategy.node_drain_input's settings), DaemonSets' pods aside
// when IgnoreDaemonSets. With self (rigger's own pod in this cluster; nil:
// none), its pod stays (Drained.Kept): it carries the apply out; rigger's
// other replicas go, their caches with them (evictionsWatched). held, when
// set, is called on the first refusal of each pod's eviction by a
// PodDisruptionBudget: the drain waits for it. The Node should be cordoned
// first.
func Drain(ctx context.Context, cs kubernetes.Interface, name string, in spec.NodeDrainInput, self *observe.Self, held func(pod string, err error)) (Drained, error) {
	ignoreDS := in.IgnoreDaemonSets == nil || *in.IgnoreDaemonSets
	timeout := time.Duration(in.Timeout) * time.Second
	if timeout <= 0 {
		timeout = time.Duration(spec.DefaultDrainTimeout) * time.Second
	}
	var (
		mu      sync.Mutex
		refused = map[string]int{}
	)
	watched := evictionsWatched{Interface: cs, refused: func(namespace, pod string, err error) {
		key := namespace + "/" + pod
		mu.Lock()
		refused[key]++
		first := refused[key] == 1
		mu.Unlock()
		if first && held != nil {
			held(key, err)
		}
	}}
	// Pods are evicted in parallel.
	var evicted atomic.Int32
	var kept atomic.Bool
	var last string
	var gone time.Duration
	began := time.Now()
	watched.self, watched.kept = self, func() { kept.Store(true) }
	h := &drain.Helper{
		Ctx: ctx, Client: watched, Force: in.Force, GracePeriodSeconds: in.GracePeriod,
		IgnoreAllDaemonSets: ignoreDS, DeleteEmptyDirData: in.DeleteLocalData, Timeout: timeout,
		Out: io.Discard, ErrOut: io.Discard, EvictErrorRetryDelay: evictRetry,
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, _ bool, err error) {
			if err == nil {
				evicted.Add(1)
				mu.Lock()
				last, gone = pod.Namespace+"/"+pod.Name, time.Since(began)
				mu.Unlock()
			}
		},
	}
	err := drain.RunNodeDrain(h, name)
	// A copy: an eviction still retrying when the drain gave up may count
	// once more.
	mu.Lock()
	out := Drained{Evicted: int(evicted.Load()), Held: maps.Clone(refused), Last: last, Gone: gone}
	if kept.Load() {
		out.Kept = self.Pod
	}
	mu.Unlock()
	if err != nil {
		if held := out.DescribeHeld(); held != "" {
			err = fmt.Errorf("%w (%s)", err, held)
		}
		return out, fmt.Errorf("drain Node %s: %w: set upgrade_strategy.node_drain_input (force, delete_local_data, "+
			"timeout) or move those pods, then apply again", name, err)
	}
	return out, nil
}

// evictRetry is how long the drain waits before it asks again for an
// eviction a PodDisruptionBudget refused (kubectl's 5 s).
var evictRetry = 5 * time.Second

// DescribeHeld says which pods' PodDisruptionBudgets held the drain back
// and how often, "" when none did.
func (d Drained) DescribeHeld() string {
	if len(d.Held) == 0 {
		return ""
	}
	var each []string
	for _, pod := range slices.Sorted(maps.Keys(d.Held)) {
		each = append(each, fmt.Sprintf("%s %d time(s)", pod, d.Held[pod]))
	}
	return "evictions refused by a PodDisruptionBudget until its pods were ready elsewhere: " + strings.Join(each, ", ")
}

// NotReadyError is a Node that did not become Ready in time.
type NotReadyError struct {
	Address string
	// Node is the Node's name; "" when none registered.
	Node   string
	Ready  string
	Waited time.Duration
	// Logs are the kubelet's last lines, when known.
	Logs string
	// Pods describe the pods on the Node that are not ready, or say there
	// are none (a network plugin that does not start there keeps a Node
	// NotReady).
	Pods []string
	// ListErr is the last list of the Nodes' error when no Node was
	// seen: the wait's deadline that cut it short, or the API server's.
	ListErr error
}

func (e *NotReadyError) Error() string {
	var b strings.Builder
	if e.Node == "" {
		fmt.Fprintf(&b, "node %s: its kubelet registered no Node within %s", e.Address, e.Waited)
		if e.ListErr != nil {
			fmt.Fprintf(&b, " (the last look: %v)", e.ListErr)
		}
	} else {
		fmt.Fprintf(&b, "node %s: Node %s not Ready within %s (Ready: %s)", e.Address, e.Node, e.Waited, e.Ready)
	}
	b.WriteString("; the next apply checks it again")
	if len(e.Pods) > 0 {
		fmt.Fprintf(&b, "; on the Node: %s", strings.Join(e.Pods, "; "))
	}
	if e.Logs != "" {
		fmt.Fprintf(&b, "\nlast lines of kubelet on %s:\n%s", e.Address, e.Logs)
	}
	return b.String()
}

// maxPods is how many pods a NotReadyError describes.
const maxPods = 5

// nodePods describes the pods on Node name that are not ready, at most
// maxPods: what their containers restarted for or wait for
// (podstatus.Troubles), else their state; "no pods" when none is there (a
// network plugin whose DaemonSet placed no pod keeps a Node NotReady);
// nothing when they cannot be listed within 10 s.
func nodePods(ctx context.Context, cs kubernetes.Interface, name string) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name, Limit: 200})
	if err != nil {
		return nil
	}
	var out []string
	on := 0
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != name {
			continue
		}
		on++
		if podstatus.Ready(p) || len(out) >= maxPods {
			continue
		}
		if d := podstatus.Troubles(p, name, maxPods-len(out)); len(d) > 0 {
			out = append(out, d...)
		} else {
			out = append(out, fmt.Sprintf("Pod %s/%s on %s: %s", p.Namespace, p.Name, name, podstatus.State(p)))
		}
	}
	if on == 0 {
		return []string{"no pods"}
	}
	return out
}

// ReadyPoll is how often WaitReady looks.
const ReadyPoll = 2 * time.Second

// WaitReady waits up to timeout for the machine's Node to be registered
// and Ready, and returns it. When after is set, the Ready condition must
// have been reported after it (by the kubelet's clock: pass a heartbeat
// the Node had before its kubelet changed, never rigger's own time), so
// that the old kubelet's last word does not count. On timeout the error
// is a *NotReadyError. Errors of the API server are retried until the
// timeout.
func WaitReady(ctx context.Context, cs kubernetes.Interface, address, hostname string, after time.Time, timeout time.Duration) (*corev1.Node, error) {
	return waitReady(ctx, cs, address, hostname, after, timeout, nil)
}

// waitReady is WaitReady, with repair (nil: none) looking at the Node at
// each poll while it is not Ready, and for pods of an earlier Node of its
// name once it is.
func waitReady(ctx context.Context, cs kubernetes.Interface, address, hostname string, after time.Time, timeout time.Duration, repair *networkRepair) (*corev1.Node, error) {
	var (
		last    *corev1.Node
		lastErr error
	)
	began := time.Now()
	err := wait.PollUntilContextTimeout(ctx, ReadyPoll, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := FindNodes(ctx, cs, address, hostname)
		if err != nil {
			lastErr = err
			return false, nil
		}
		l := Link([]Machine{{Address: address, Hostname: hostname}}, nodes)
		last = l.Owned[address]
		if last != nil && observe.Ready(last) == string(corev1.ConditionTrue) && Heartbeat(last).After(after) {
			repair.stale(ctx, address, last, timeout)
			return true, nil
		}
		repair.check(ctx, address, last)
		return false, nil
	})
	if err == nil {
		return last, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	e := &NotReadyError{Address: address, Waited: time.Since(began).Round(time.Second)}
	if last != nil {
		e.Node, e.Ready = last.Name, observe.Ready(last)
	} else if lastErr != nil && !errors.Is(lastErr, context.DeadlineExceeded) {
		return nil, fmt.Errorf("node %s: wait for its Node: %w", address, lastErr)
	} else {
		// A look cut short by the wait's own deadline (or the API server's
		// timeout) says nothing of the Node: the error says none was seen,
		// with the kubelet's last lines the caller adds.
		e.ListErr = lastErr
	}
	return nil, e
}

// Heartbeat is when the kubelet last reported the Node's Ready condition
// (zero without one).
func Heartbeat(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

// Delete deletes the Node (gone already is no error).
func Delete(ctx context.Context, cs kubernetes.Interface, name string) error {
	err := retryAPI(ctx, func() error {
		return cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Node %s: %w", name, err)
	}
	return nil
}

// RemoveNode takes the Nodes of a machine that left cluster.yml out of
// the cluster before its containers are removed: cordoned, drained (when
// Ready: a NotReady Node's pods cannot be evicted; self as for Drain: the
// other replicas of rigger evicted without delete_local_data) and
// deleted. hostname (may be empty) finds an unlabelled Node. It returns
// the Nodes deleted.
func RemoveNode(ctx context.Context, cs kubernetes.Interface, address, hostname string, in spec.NodeDrainInput, self *observe.Self) ([]string, error) {
	nodes, err := FindNodes(ctx, cs, address, hostname)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for i := range nodes {
		n := &nodes[i]
		if _, err := Cordon(ctx, cs, n); err != nil {
			errs = append(errs, err)
			continue
		}
		if observe.Ready(n) == string(corev1.ConditionTrue) {
			if _, err := Drain(ctx, cs, n.Name, in, self, nil); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := Delete(ctx, cs, n.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, n.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("node %s: take its Node out of the cluster: %w", address, err)
	}
	return removed, nil
}
