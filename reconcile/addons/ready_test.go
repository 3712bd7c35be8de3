package addons

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func TestReadiness(t *testing.T) {
	tests := []struct {
		name       string
		obj        string
		wantWait   bool
		wantStatus kstatus.Status
		wantLine   string
	}{
		{
			name: "Deployment rolled out",
			obj: `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, generation: 2},
				spec: {replicas: 3},
				status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3, readyReplicas: 3, availableReplicas: 3,
				  conditions: [{type: Available, status: "True"}, {type: Progressing, status: "True", reason: NewReplicaSetAvailable}]}}`,
			wantWait: true, wantStatus: kstatus.CurrentStatus, wantLine: "rolled out (3/3)",
		},
		{
			name: "Deployment without minimum availability",
			obj: `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, generation: 1},
				spec: {replicas: 1},
				status: {observedGeneration: 1, replicas: 1, updatedReplicas: 1, unavailableReplicas: 1,
				  conditions: [{type: Available, status: "False", reason: MinimumReplicasUnavailable}, {type: Progressing, status: "True", reason: ReplicaSetUpdated}]}}`,
			wantWait: true, wantStatus: kstatus.InProgressStatus, wantLine: "rolled out (0/1)",
		},
		{
			name: "Deployment whose new generation is not observed yet",
			obj: `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, generation: 3},
				spec: {replicas: 1},
				status: {observedGeneration: 2, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1,
				  conditions: [{type: Available, status: "True"}]}}`,
			wantWait: true, wantStatus: kstatus.InProgressStatus, wantLine: "rolled out (1/1)",
		},
		{
			name: "Deployment past its progress deadline",
			obj: `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, generation: 1},
				spec: {replicas: 1},
				status: {observedGeneration: 1, replicas: 1, updatedReplicas: 1,
				  conditions: [{type: Progressing, status: "False", reason: ProgressDeadlineExceeded}]}}`,
			wantWait: true, wantStatus: kstatus.FailedStatus, wantLine: "rolled out (0/1)",
		},
		{
			name: "DaemonSet rolled out",
			obj: `{apiVersion: apps/v1, kind: DaemonSet, metadata: {name: ds, generation: 1},
				status: {observedGeneration: 1, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 3, numberAvailable: 3, numberReady: 3}}`,
			wantWait: true, wantStatus: kstatus.CurrentStatus, wantLine: "rolled out (3/3)",
		},
		{
			name: "Job complete",
			obj: `{apiVersion: batch/v1, kind: Job, metadata: {name: j, generation: 1}, spec: {completions: 1, parallelism: 1},
				status: {succeeded: 1, conditions: [{type: Complete, status: "True"}]}}`,
			wantWait: true, wantStatus: kstatus.CurrentStatus, wantLine: "complete",
		},
		{
			name: "Job running (kstatus alone says Current)",
			obj: `{apiVersion: batch/v1, kind: Job, metadata: {name: j, generation: 1}, spec: {completions: 1, parallelism: 1},
				status: {active: 1, startTime: "2026-01-01T00:00:00Z"}}`,
			wantWait: true, wantStatus: kstatus.InProgressStatus, wantLine: "complete",
		},
		{
			name: "Job failed",
			obj: `{apiVersion: batch/v1, kind: Job, metadata: {name: j, generation: 1}, spec: {completions: 1, parallelism: 1},
				status: {failed: 6, conditions: [{type: Failed, status: "True", reason: BackoffLimitExceeded}]}}`,
			wantWait: true, wantStatus: kstatus.FailedStatus, wantLine: "complete",
		},
		{
			name: "CRD established",
			obj: `{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: widgets.example.com, generation: 1},
				spec: {group: example.com},
				status: {conditions: [{type: NamesAccepted, status: "True"}, {type: Established, status: "True"}]}}`,
			wantWait: true, wantStatus: kstatus.CurrentStatus, wantLine: "established",
		},
		{
			name: "CRD not established yet",
			obj: `{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: widgets.example.com, generation: 1},
				spec: {group: example.com}, status: {conditions: [{type: NamesAccepted, status: "True"}]}}`,
			wantWait: true, wantStatus: kstatus.InProgressStatus, wantLine: "established",
		},
		{
			name:     "ConfigMap",
			obj:      `{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}`,
			wantWait: true, wantStatus: kstatus.CurrentStatus,
		},
		{
			name:     "LoadBalancer Service is not waited for",
			obj:      `{apiVersion: v1, kind: Service, metadata: {name: s}, spec: {type: LoadBalancer}}`,
			wantWait: false, wantStatus: kstatus.InProgressStatus,
		},
		{
			name:     "ClusterIP Service",
			obj:      `{apiVersion: v1, kind: Service, metadata: {name: s}, spec: {type: ClusterIP}}`,
			wantWait: true, wantStatus: kstatus.CurrentStatus,
		},
		{
			name:     "opted out",
			obj:      `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, annotations: {rigger.io/wait: "false"}}, spec: {replicas: 1}}`,
			wantWait: false, wantStatus: kstatus.InProgressStatus, wantLine: "rolled out (0/1)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: obj(t, tt.obj)}
			if got := waits(u); got != tt.wantWait {
				t.Errorf("waits = %v, want %v", got, tt.wantWait)
			}
			res, err := computeStatus(u)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStatus {
				t.Errorf("kstatus = %s (%s), want %s", res.Status, res.Message, tt.wantStatus)
			}
			if got := readyLine(u); got != tt.wantLine {
				t.Errorf("ready line = %q, want %q", got, tt.wantLine)
			}
		})
	}
}

func TestConditionsAndSelector(t *testing.T) {
	u := &unstructured.Unstructured{Object: obj(t, `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d},
		spec: {selector: {matchLabels: {app: web}, matchExpressions: [{key: tier, operator: In, values: [a, b]}]}},
		status: {conditions: [{type: Available, status: "False", reason: MinimumReplicasUnavailable, message: "Deployment does not have minimum availability."}, "junk"]}}`)}
	want := []Condition{{Type: "Available", Status: "False", Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability."}}
	if diff := cmp.Diff(want, conditions(u)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if got, want := workloadSelector(u), "app=web,tier in (a,b)"; got != want {
		t.Errorf("selector = %q, want %q", got, want)
	}
	cmObj := &unstructured.Unstructured{Object: obj(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}`)}
	if got := workloadSelector(cmObj); got != "" {
		t.Errorf("a ConfigMap has no pods, got selector %q", got)
	}
}

func TestErrorMessages(t *testing.T) {
	dep := ObjectRef{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "demo", Name: "web"}
	nr := &NotReadyError{
		Addon: "demo", Object: dep, Status: "InProgress", Message: "Deployment does not have minimum availability.",
		Conditions: []Condition{
			{Type: "Available", Status: "False", Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability."},
			{Type: "Progressing", Status: "True", Reason: "ReplicaSetUpdated"},
		},
		Events:   []string{`Pod demo/web-1: Failed: Failed to pull image "x": not found`},
		NodePods: []string{`Pod kube-system/flannel-a on n3: container flannel restarted 1 time(s)`},
		Waited:   30 * time.Second, Err: context.DeadlineExceeded,
	}
	want := `addon demo: Deployment demo/web is not ready after 30s (InProgress: Deployment does not have minimum availability.); ` +
		`condition Available=False MinimumReplicasUnavailable: Deployment does not have minimum availability.; ` +
		`last warning events: Pod demo/web-1: Failed: Failed to pull image "x": not found; ` +
		`on the same Nodes: Pod kube-system/flannel-a on n3: container flannel restarted 1 time(s)`
	if got := nr.Error(); got != want {
		t.Errorf("NotReadyError:\n got %s\nwant %s", got, want)
	}
	if !errors.Is(nr, context.DeadlineExceeded) {
		t.Error("a NotReadyError after a timeout is not context.DeadlineExceeded")
	}

	rejected := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil)
	ae := &ApplyError{Addon: "demo", Object: dep, Source: Source{Name: "addons", Document: 2, Line: 7}, Err: rejected}
	want = `addon demo: Deployment demo/web (addons: document 2 at line 7): the API server rejected the apply: Deployment.apps "web" is invalid`
	if got := ae.Error(); got != want {
		t.Errorf("ApplyError:\n got %s\nwant %s", got, want)
	}
	if !apierrors.IsInvalid(ae) {
		t.Error("an ApplyError does not unwrap to the API error")
	}
}

// TestTroubledNeighbours: a workload's pod that is not ready is reported
// with the pods on its Node whose containers restarted or wait to restart
// (the network plugin that crashed there), not with healthy ones nor with
// those on other Nodes.
func TestTroubledNeighbours(t *testing.T) {
	dep := `{apiVersion: apps/v1, kind: Deployment, metadata: {name: metrics, namespace: kube-system}, spec: {selector: {matchLabels: {app: metrics}}}}`
	pod := func(name, app, node, ready, statuses string) string {
		return `{apiVersion: v1, kind: Pod, metadata: {name: ` + name + `, namespace: kube-system, uid: ` + name + `, labels: {app: ` + app + `}},
			spec: {nodeName: ` + node + `}, status: {conditions: [{type: Ready, status: "` + ready + `"}], containerStatuses: [` + statuses + `]}}`
	}
	crashed := `{name: kube-flannel, restartCount: 2, state: {waiting: {reason: CrashLoopBackOff, message: back-off 20s}},
		lastState: {terminated: {exitCode: 1, reason: Error, finishedAt: "2026-11-24T07:32:41Z"}}}`
	objs := []string{
		dep,
		pod("metrics-a", "metrics", "n3", "False", `{name: metrics-server, state: {waiting: {reason: ContainerCreating}}}`),
		pod("flannel-3", "flannel", "n3", "False", crashed),
		pod("proxy-3", "proxy", "n3", "True", `{name: proxy, restartCount: 0, state: {running: {}}}`),
		pod("flannel-1", "flannel", "n1", "False", crashed),
	}
	var rt []runtime.Object
	for _, o := range objs {
		rt = append(rt, &unstructured.Unstructured{Object: obj(t, o)})
	}
	dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{pods: "PodList"}, rt...)
	e := New(dyn, newStaticMapper(), Options{})
	ctx := context.Background()
	got := e.troubledNeighbours(ctx, e.workloadPods(ctx, &unstructured.Unstructured{Object: obj(t, dep)}))
	want := []string{"Pod kube-system/flannel-3 on n3: container kube-flannel restarted 2 time(s), last exit 1 (Error) at 07:32:41Z; waiting: CrashLoopBackOff: back-off 20s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("troubled neighbours (-want +got):\n%s", diff)
	}
}

// TestDownOnLostNodes: a workload short of pods only on Nodes whose kubelet
// does not report (a node down, which the apply reports) counts as ready;
// one short of a pod on a Node whose kubelet reports it NotReady (a node
// that answers and is broken, or not set up yet), on a Ready Node, or of a
// pod not scheduled, does not.
func TestDownOnLostNodes(t *testing.T) {
	ds := `{apiVersion: apps/v1, kind: DaemonSet, metadata: {name: flannel, namespace: kube-system, generation: 2},
		spec: {selector: {matchLabels: {app: flannel}}},
		status: {observedGeneration: 2, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 3, numberAvailable: 2, numberReady: 2}}`
	pod := func(name, node string, ready bool) string {
		status := "False"
		if ready {
			status = "True"
		}
		return `{apiVersion: v1, kind: Pod, metadata: {name: ` + name + `, namespace: kube-system, labels: {app: flannel}},
			spec: {nodeName: "` + node + `"}, status: {conditions: [{type: Ready, status: "` + status + `"}]}}`
	}
	node := func(name, status string) string {
		return `{apiVersion: v1, kind: Node, metadata: {name: ` + name + `}, status: {conditions: [{type: Ready, status: "` + status + `"}]}}`
	}
	readyNodes := []string{node("n1", "True"), node("n2", "True")}
	tests := []struct {
		name    string
		objs    []string
		current bool
	}{
		{"the missing pod is on a Node whose kubelet does not report", append([]string{node("n3", "Unknown"), pod("a", "n1", true), pod("b", "n2", true), pod("c", "n3", false)}, readyNodes...), true},
		{"the missing pod is on a Node whose kubelet reports it NotReady", append([]string{node("n3", "False"), pod("a", "n1", true), pod("b", "n2", true), pod("c", "n3", false)}, readyNodes...), false},
		{"the missing pod is on a Ready Node", append([]string{node("n3", "True"), pod("a", "n1", true), pod("b", "n2", true), pod("c", "n3", false)}, readyNodes...), false},
		{"the missing pod is not scheduled", append([]string{pod("a", "n1", true), pod("b", "n2", true), pod("c", "", false)}, readyNodes...), false},
		{"the missing pod's Node is gone", append([]string{pod("a", "n1", true), pod("b", "n2", true), pod("c", "n3", false)}, readyNodes...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			var objs []runtime.Object
			for _, o := range append([]string{ds}, tt.objs...) {
				objs = append(objs, &unstructured.Unstructured{Object: obj(t, o)})
			}
			dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
				pods: "PodList", nodes: "NodeList", {Group: "apps", Version: "v1", Resource: "daemonsets"}: "DaemonSetList",
			}, objs...)
			e := New(dyn, newStaticMapper(), Options{})
			w := &waitState{t: &target{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"},
				ref: ObjectRef{Group: "apps", Version: "v1", Kind: "DaemonSet", Namespace: "kube-system", Name: "flannel"}}}
			current, err := e.check(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			if current != tt.current {
				t.Errorf("current %v (%s: %s), want %v", current, w.res.Status, w.res.Message, tt.current)
			}
		})
	}
}

// TestWaitNodes: an add-on's NodeReady is waited for on every Ready Node,
// and a Node where it does not hold in time fails the wait naming it.
func TestWaitNodes(t *testing.T) {
	node := func(name string, status string, ann string) string {
		return `{apiVersion: v1, kind: Node, metadata: {name: ` + name + `, annotations: {net: "` + ann + `"}}, status: {conditions: [{type: Ready, status: "` + status + `",
			reason: KubeletNotReady, message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is not ready: cni config uninitialized"}]}}`
	}
	ready := func(n *unstructured.Unstructured) string {
		if n.GetAnnotations()["net"] == "" {
			return "no net annotation"
		}
		return ""
	}
	tests := []struct {
		name        string
		nodes       []string
		wantNode    string // "": ready
		wantMessage string
	}{
		{"every Ready Node holds it", []string{node("n1", "True", "x"), node("n2", "True", "y")}, "", ""},
		{"a Node whose kubelet does not report is not waited for", []string{node("n1", "True", "x"), node("n2", "Unknown", "")}, "", ""},
		{"a Ready Node without it", []string{node("n1", "True", "x"), node("n2", "True", "")}, "n2", "no net annotation"},
		{"a Node whose kubelet reports it NotReady", []string{node("n1", "True", "x"), node("n2", "False", "x")}, "n2",
			"the Node is not Ready: KubeletNotReady: container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is not ready: cni config uninitialized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, o := range tt.nodes {
				objs = append(objs, &unstructured.Unstructured{Object: obj(t, o)})
			}
			dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nodes: "NodeList", pods: "PodList"}, objs...)
			e := New(dyn, newStaticMapper(), Options{ReadyTimeout: 200 * time.Millisecond, PollInterval: 10 * time.Millisecond})
			err := e.waitNodes(context.Background(), "net", ready, nil)
			var nr *NotReadyError
			switch {
			case tt.wantNode == "" && err != nil:
				t.Fatalf("waitNodes: %v", err)
			case tt.wantNode != "" && (!errors.As(err, &nr) || nr.Object.Name != tt.wantNode || nr.Message != tt.wantMessage):
				t.Fatalf("waitNodes: %v; want a NotReadyError naming Node %s", err, tt.wantNode)
			}
		})
	}
}
