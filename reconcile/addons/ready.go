package addons

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/rigger/rigger/reconcile/internal/podstatus"
)

// AnnotationWait set to "false" on an object tells rigger not to wait for
// it to be ready.
const AnnotationWait = "rigger.io/wait"

// Bounds of what a NotReadyError gathers.
const (
	// maxNotReady is how many objects one readiness failure describes.
	maxNotReady = 5
	// maxEvents is how many Warning events it quotes per object.
	maxEvents = 3
	// diagnoseTimeout bounds the reads that describe a failure.
	diagnoseTimeout = 10 * time.Second
	// waitingEvery is how often a line says what an object is waiting for.
	waitingEvery = 10 * time.Second
)

// waits reports whether Apply waits for the object to be ready. It does
// not for a LoadBalancer Service (many RKE clusters have no load-balancer
// controller, so its address never comes) nor for an object annotated
// rigger.io/wait: "false".
func waits(u *unstructured.Unstructured) bool {
	if u.GetAnnotations()[AnnotationWait] == "false" {
		return false
	}
	if u.GetKind() == "Service" && u.GroupVersionKind().Group == "" {
		typ, _, _ := unstructured.NestedString(u.Object, "spec", "type")
		return typ != string(corev1.ServiceTypeLoadBalancer)
	}
	return true
}

// waitState is one object being waited for.
type waitState struct {
	t      *target
	live   *unstructured.Unstructured
	res    kstatus.Result
	said   string
	saidAt time.Time
	// downNote says, once it is ready, how many of its pods on Nodes that
	// are not Ready were not waited for.
	downNote string
}

// errFailed stops the wait when an object failed.
var errFailed = errors.New("object failed")

// waitReady waits until every object of targets that waits is Current by
// kstatus, polling every Options.PollInterval, while it makes progress
// (see progress): it ends once nothing moved for Options.ReadyTimeout.
// Failed stops the wait at once. When say is set, workloads that are ready
// and objects still waiting get progress lines.
func (e *Engine) waitReady(ctx context.Context, addon string, targets []*target, say bool) error {
	var pending []*waitState
	for _, t := range targets {
		if waits(t.body) {
			pending = append(pending, &waitState{t: t, res: kstatus.Result{Status: kstatus.UnknownStatus}})
		}
	}
	if len(pending) == 0 {
		return nil
	}
	start := time.Now()
	prog := newProgress(start, e.opts.ReadyTimeout)
	var failed *waitState
	err := wait.PollUntilContextCancel(ctx, e.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		rest := make([]*waitState, 0, len(pending))
		var fp strings.Builder
		for i, w := range pending {
			current, err := e.check(ctx, w)
			if err != nil {
				if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
					pending = append(rest, pending[i:]...)
					return false, err
				}
				// Anything else (the deadline close, the server away)
				// may pass: the object keeps the state last read.
				if w.live == nil {
					w.res = kstatus.Result{Status: kstatus.UnknownStatus, Message: "cannot read it: " + err.Error()}
				}
				e.log.Debug("read for readiness", "component", "addons", "addon", addon, "object", w.t.ref.String(), "error", err)
				rest = append(rest, w)
				continue
			}
			if w.res.Status == kstatus.FailedStatus {
				failed = w
				return false, errFailed
			}
			if current {
				if say {
					if line := readyLine(w.live); line != "" {
						e.say(addon, "%s %s%s", w.t.ref, line, w.downNote)
					}
				}
				continue
			}
			if say && w.res.Message != w.said && time.Since(start) >= waitingEvery && time.Since(w.saidAt) >= waitingEvery {
				e.say(addon, "waiting for %s: %s", w.t.ref, w.res.Message)
				w.said, w.saidAt = w.res.Message, time.Now()
			}
			fmt.Fprintf(&fp, "%s %s %s\n", w.t.ref, w.res.Status, w.res.Message)
			if w.live != nil {
				prog.pods(time.Now(), &fp, e.podsOf(ctx, w.live))
			}
			rest = append(rest, w)
		}
		pending = rest
		if len(pending) == 0 {
			return true, nil
		}
		if !prog.seen(time.Now(), fp.String()) {
			return false, errNoProgress
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	waited := time.Since(start)
	if failed != nil {
		return e.notReady(ctx, addon, failed, waited, 0, nil)
	}
	if !errors.Is(err, errNoProgress) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("addon %s: wait for readiness: %w", addon, err)
	}
	var errs []error
	for i, w := range pending {
		if i == maxNotReady {
			errs = append(errs, fmt.Errorf("addon %s: and %d more objects not ready", addon, len(pending)-i))
			break
		}
		errs = append(errs, e.notReady(ctx, addon, w, waited, prog.stalled(time.Now()), context.DeadlineExceeded))
	}
	return errors.Join(errs...)
}

// errNoProgress ends a wait that saw nothing move for its timeout.
var errNoProgress = errors.New("no progress")

// podsOf are the pods of a workload (nil for another object), for the
// progress of a wait: best effort, at most 100.
func (e *Engine) podsOf(ctx context.Context, u *unstructured.Unstructured) []*corev1.Pod {
	sel := workloadSelector(u)
	if sel == "" || u.GetNamespace() == "" {
		return nil
	}
	var out []*corev1.Pod
	for _, item := range e.list(ctx, pods, u.GetNamespace(), metav1.ListOptions{LabelSelector: sel, Limit: 100}) {
		var p corev1.Pod
		if runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &p) == nil {
			out = append(out, &p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

// check reads one object and computes its kstatus status.
func (e *Engine) check(ctx context.Context, w *waitState) (bool, error) {
	live, err := e.get(ctx, w.t.gvr, w.t.ref)
	if err != nil {
		return false, err
	}
	if live == nil {
		w.live = nil
		w.res = kstatus.Result{Status: kstatus.NotFoundStatus, Message: "the object is not in the cluster"}
		return false, nil
	}
	w.live = live
	res, err := computeStatus(live)
	if err != nil {
		w.res = kstatus.Result{Status: kstatus.UnknownStatus, Message: err.Error()}
		return false, nil
	}
	if res.Status == kstatus.InProgressStatus {
		if down := e.downOnLostNodes(ctx, live); down > 0 {
			res = &kstatus.Result{Status: kstatus.CurrentStatus,
				Message: fmt.Sprintf("%s; %d pod(s) on Nodes whose kubelet does not report not waited for", res.Message, down)}
			w.downNote = fmt.Sprintf(" (%d pod(s) on Nodes whose kubelet does not report not waited for)", down)
		}
	}
	w.res = *res
	return res.Status == kstatus.CurrentStatus, nil
}

// downOnLostNodes is, for a workload whose controller has seen its spec
// and whose only shortfall is pods that are not available, how many such
// pods there are when every one of them is on a Node whose kubelet does
// not report (its Ready condition Unknown, or none); 0 otherwise. A node
// that is down (switched off, cut off: the apply reports it unreachable)
// keeps a DaemonSet from rolling out, and a Deployment whose pod ran there
// short until the pod is evicted, minutes later: waiting for them would
// fail the apply of the rest of the cluster for a node it already
// reports. A Node whose kubelet reports it NotReady (Ready False: no
// network yet, say) is not down: it is waited for like any other. The
// pods are read best effort: an error counts as 0.
func (e *Engine) downOnLostNodes(ctx context.Context, u *unstructured.Unstructured) int {
	num := func(f ...string) int64 { n, _, _ := unstructured.NestedInt64(u.Object, f...); return n }
	if num("status", "observedGeneration") < u.GetGeneration() {
		return 0
	}
	var want, have int64
	switch u.GetKind() {
	case "DaemonSet":
		want, have = num("status", "desiredNumberScheduled"), min(num("status", "numberAvailable"), num("status", "updatedNumberScheduled"))
	case "Deployment", "StatefulSet":
		replicas, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		if !ok {
			replicas = 1
		}
		want, have = replicas, min(num("status", "availableReplicas"), num("status", "updatedReplicas"))
	default:
		return 0
	}
	sel := workloadSelector(u)
	if sel == "" || have >= want {
		return 0
	}
	lost := map[string]bool{} // Node name → its kubelet does not report
	down := 0
	for _, item := range e.list(ctx, pods, u.GetNamespace(), metav1.ListOptions{LabelSelector: sel, Limit: 500}) {
		var p corev1.Pod
		if runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &p) != nil {
			return 0
		}
		if podstatus.Ready(&p) {
			continue
		}
		node := p.Spec.NodeName
		if node == "" {
			return 0 // not scheduled: not a node's doing
		}
		l, ok := lost[node]
		if !ok {
			n, err := e.get(ctx, nodes, ObjectRef{Version: "v1", Kind: "Node", Name: node})
			if err != nil || n == nil {
				return 0
			}
			l = nodeReady(n) == string(corev1.ConditionUnknown)
			lost[node] = l
		}
		if !l {
			return 0
		}
		down++
	}
	if int64(down) < want-have {
		return 0
	}
	return down
}

// nodeReady is the Node u's Ready condition's status: True, False, or
// Unknown (also when the kubelet never reported one).
func nodeReady(u *unstructured.Unstructured) string {
	if c, ok := readyCond(u); ok && c.Status != "" {
		return c.Status
	}
	return string(corev1.ConditionUnknown)
}

// readyCond is the Node u's Ready condition.
func readyCond(u *unstructured.Unstructured) (Condition, bool) {
	for _, c := range conditions(u) {
		if c.Type == string(corev1.NodeReady) {
			return c, true
		}
	}
	return Condition{}, false
}

// computeStatus is kstatus's status of u, except that a Job is Current only
// once it is Complete: kstatus counts a Job that has started as Current,
// and an add-on's Job is waited for to its end.
func computeStatus(u *unstructured.Unstructured) (*kstatus.Result, error) {
	res, err := kstatus.Compute(u)
	if err != nil || res.Status != kstatus.CurrentStatus || u.GetKind() != "Job" || u.GroupVersionKind().Group != "batch" {
		return res, err
	}
	for _, c := range conditions(u) {
		if c.Type == "Complete" && c.Status == "True" {
			return res, nil
		}
	}
	return &kstatus.Result{Status: kstatus.InProgressStatus, Message: res.Message}, nil
}

// notReady describes an object that did not become ready, after waited of
// which the last stalled without progress. cause is why waiting stopped
// (nil: the object failed).
func (e *Engine) notReady(ctx context.Context, addon string, w *waitState, waited, stalled time.Duration, cause error) *NotReadyError {
	err := &NotReadyError{Addon: addon, Object: w.t.ref, Status: string(w.res.Status), Message: w.res.Message,
		Waited: waited, Stalled: stalled, Err: cause}
	if w.live != nil {
		err.Conditions = conditions(w.live)
		if ctx.Err() == nil {
			dctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
			pods := e.workloadPods(dctx, w.live)
			err.Events = e.warningEvents(dctx, w.live, pods)
			err.NodePods = e.troubledNeighbours(dctx, pods)
			cancel()
		}
	}
	return err
}

// conditions are an object's status.conditions.
func conditions(u *unstructured.Unstructured) []Condition {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []Condition
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		out = append(out, Condition{Type: str("type"), Status: str("status"), Reason: str("reason"), Message: str("message")})
	}
	return out
}

// readyLine is what a progress line says of a workload that is ready: "rolled
// out (3/3)", "complete", "established"; "" for other kinds.
func readyLine(u *unstructured.Unstructured) string {
	num := func(fields ...string) int64 {
		n, _, _ := unstructured.NestedInt64(u.Object, fields...)
		return n
	}
	switch u.GetKind() {
	case "Deployment", "StatefulSet":
		want, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		if !ok {
			want = 1
		}
		return fmt.Sprintf("rolled out (%d/%d)", num("status", "readyReplicas"), want)
	case "DaemonSet":
		return fmt.Sprintf("rolled out (%d/%d)", num("status", "numberReady"), num("status", "desiredNumberScheduled"))
	case "Job":
		return "complete"
	case "CustomResourceDefinition":
		return "established"
	}
	return ""
}

var (
	events      = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	pods        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodes       = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	replicaSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
)

// maxEventsListed bounds the Warning events read from one namespace.
const maxEventsListed = 500

// workloadPods are the pods of a workload (nil for another object), at
// most 50: best effort, as every read that describes a failure.
func (e *Engine) workloadPods(ctx context.Context, u *unstructured.Unstructured) []unstructured.Unstructured {
	sel := workloadSelector(u)
	if sel == "" || u.GetNamespace() == "" {
		return nil
	}
	return e.list(ctx, pods, u.GetNamespace(), metav1.ListOptions{LabelSelector: sel, Limit: 50})
}

// warningEvents are the last Warning events of u and, for a workload, of
// its pods (and a Deployment's ReplicaSets), oldest first: "Pod
// default/web-1: FailedScheduling: 0/1 nodes are available: ...". Reading
// them is best effort: an error leaves them out.
func (e *Engine) warningEvents(ctx context.Context, u *unstructured.Unstructured, podList []unstructured.Unstructured) []string {
	subjects := map[string]bool{string(u.GetUID()): true}
	ns := u.GetNamespace()
	if sel := workloadSelector(u); sel != "" && ns != "" && u.GetKind() == "Deployment" {
		for _, rs := range e.list(ctx, replicaSets, ns, metav1.ListOptions{LabelSelector: sel, Limit: 50}) {
			for _, o := range rs.GetOwnerReferences() {
				if o.UID == u.GetUID() {
					subjects[string(rs.GetUID())] = true
				}
			}
		}
	}
	for _, p := range podList {
		subjects[string(p.GetUID())] = true
	}
	opts := metav1.ListOptions{FieldSelector: "type=" + corev1.EventTypeWarning, Limit: maxEventsListed}
	if ns == "" {
		opts.FieldSelector += ",involvedObject.uid=" + string(u.GetUID())
	}
	var evs []corev1.Event
	for _, item := range e.list(ctx, events, ns, opts) {
		var ev corev1.Event
		if runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &ev) != nil || !subjects[string(ev.InvolvedObject.UID)] {
			continue
		}
		evs = append(evs, ev)
	}
	slices.SortStableFunc(evs, func(a, b corev1.Event) int { return cmp.Compare(eventTime(a).UnixNano(), eventTime(b).UnixNano()) })
	// The newest maxEvents, one of each text (a scheduler repeats itself
	// in new events).
	var out []string
	for i := len(evs) - 1; i >= 0 && len(out) < maxEvents; i-- {
		ev := evs[i]
		obj := ev.InvolvedObject
		who := obj.Kind + " " + obj.Name
		if obj.Namespace != "" {
			who = obj.Kind + " " + obj.Namespace + "/" + obj.Name
		}
		s := fmt.Sprintf("%s: %s: %s", who, ev.Reason, oneLine(ev.Message))
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Reverse(out)
	return out
}

// list lists objects, best effort.
func (e *Engine) list(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) []unstructured.Unstructured {
	l, err := e.resource(gvr, ns).List(ctx, opts)
	if err != nil {
		e.log.Debug("list for a readiness report", "component", "addons", "resource", gvr.Resource, "namespace", ns, "error", err)
		return nil
	}
	return l.Items
}

// workloadSelector is the label selector of a workload's pods, or "".
func workloadSelector(u *unstructured.Unstructured) string {
	switch u.GetKind() {
	case "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job":
	default:
		return ""
	}
	m, ok, _ := unstructured.NestedMap(u.Object, "spec", "selector")
	if !ok {
		return ""
	}
	var ls metav1.LabelSelector
	if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls) != nil {
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || sel.Empty() {
		return ""
	}
	return sel.String()
}

// eventTime is when an event last happened.
func eventTime(ev corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// waitNodes waits until ready holds for every Node whose kubelet reports
// Ready, and until every Node whose kubelet reports NotReady (Ready False:
// a node that answers, not one that is down) is Ready, polling every
// Options.PollInterval while it makes progress (see progress); Nodes whose
// kubelet does not report (Ready Unknown) are not waited for. The pods of
// workloads (the network plugin's) are part of the progress: one whose
// container restarts after a failed first start is still to come. A
// *NotReadyError names a Node that never got there.
func (e *Engine) waitNodes(ctx context.Context, addon string, ready func(*unstructured.Unstructured) string, workloads []*target) error {
	start := time.Now()
	prog := newProgress(start, e.opts.ReadyTimeout)
	var node *unstructured.Unstructured
	var missing string
	err := wait.PollUntilContextCancel(ctx, e.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		node, missing = nil, ""
		var fp strings.Builder
		list, err := e.resource(nodes, "").List(ctx, metav1.ListOptions{})
		if err != nil {
			e.log.Debug("list the Nodes for readiness", "component", "addons", "addon", addon, "error", err)
			list = &unstructured.UnstructuredList{}
		}
		for i := range list.Items {
			n := &list.Items[i]
			m := nodeMissing(n, ready)
			if m == "" {
				continue
			}
			if node == nil {
				node, missing = n, m
			}
			fmt.Fprintf(&fp, "%s: %s\n", n.GetName(), m)
		}
		if node == nil && err == nil {
			return true, nil
		}
		for _, t := range workloads {
			if live, err := e.get(ctx, t.gvr, t.ref); err == nil && live != nil {
				prog.pods(time.Now(), &fp, e.podsOf(ctx, live))
			}
		}
		if !prog.seen(time.Now(), fp.String()) {
			return false, errNoProgress
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	if !errors.Is(err, errNoProgress) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("addon %s: wait for the Nodes: %w", addon, err)
	}
	if node == nil {
		return fmt.Errorf("addon %s: wait for the Nodes: cannot list them for %s", addon, e.opts.ReadyTimeout)
	}
	now := time.Now()
	nr := &NotReadyError{Addon: addon, Object: ObjectRef{Version: "v1", Kind: "Node", Name: node.GetName()},
		Status: string(kstatus.InProgressStatus), Message: missing, Waited: now.Sub(start), Stalled: prog.stalled(now),
		Err: context.DeadlineExceeded}
	if ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
		nr.NodePods = e.nodeTroubles(dctx, node.GetName(), nil, maxEvents)
		cancel()
	}
	return nr
}

// nodeMissing is what keeps Node n from counting as ready for an add-on:
// "" when ready holds (or n's kubelet does not report), else what is
// missing, for a Node that is NotReady its Ready condition ("the Node is
// not Ready: KubeletNotReady: container runtime network not ready: …").
func nodeMissing(n *unstructured.Unstructured, ready func(*unstructured.Unstructured) string) string {
	switch nodeReady(n) {
	case string(corev1.ConditionTrue):
		return ready(n)
	case string(corev1.ConditionFalse):
		c, _ := readyCond(n)
		return "the Node is not Ready: " + oneLine(strings.TrimSpace(c.Reason+": "+c.Message))
	}
	return ""
}

// nodeTroubles describe the pods on Node name whose containers restarted
// or wait to restart, but those of skip (by UID): best effort, at most
// max.
func (e *Engine) nodeTroubles(ctx context.Context, name string, skip map[string]bool, max int) []string {
	var out []string
	for _, u := range e.list(ctx, pods, "", metav1.ListOptions{FieldSelector: "spec.nodeName=" + name, Limit: 200}) {
		var p corev1.Pod
		if skip[string(u.GetUID())] || runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil || p.Spec.NodeName != name {
			continue
		}
		out = append(out, podstatus.Troubles(&p, name, max-len(out))...)
	}
	return out
}

// troubledNeighbours describe, for the pods of a workload that are not
// ready, the other pods on their Nodes whose containers restarted or do
// not run: "Pod kube-system/kube-flannel-x on node3: container
// kube-flannel restarted 1 time(s), last exit 1 (Error) at 07:32:41Z". A
// network plugin pod that crashed on the Node is why a pod there gets no
// network ("open /run/flannel/subnet.env: no such file or directory"),
// and its own events do not say so. Best effort; at most maxEvents lines
// from the first maxEvents Nodes.
func (e *Engine) troubledNeighbours(ctx context.Context, podList []unstructured.Unstructured) []string {
	own := map[string]bool{}
	var nodeNames []string
	for _, u := range podList {
		own[string(u.GetUID())] = true
		var p corev1.Pod
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil {
			continue
		}
		if n := p.Spec.NodeName; n != "" && !podstatus.Ready(&p) && !slices.Contains(nodeNames, n) && len(nodeNames) < maxEvents {
			nodeNames = append(nodeNames, n)
		}
	}
	var out []string
	for _, node := range nodeNames {
		out = append(out, e.nodeTroubles(ctx, node, own, maxEvents-len(out))...)
	}
	return out
}
