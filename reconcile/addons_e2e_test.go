package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/addons"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/sandbox/smoke"
	"github.com/rigger/rigger/spec"
)

// TestAddonsSandbox is the add-ons end to end, on nodes with nothing but
// sshd, Docker and empty CNI directories: the example cluster (the kubelet
// through cri-dockerd, flannel, CoreDNS, metrics-server) converges from
// scratch; a pod on one node reaches a pod on another by IP and by a
// Service name CoreDNS resolves; the nodes' metrics are served; the user's
// add-ons are applied, changed and pruned; a broken one fails naming its
// object and event while the rest stays converged; a node added later gets
// the network plugin and becomes Ready.
func TestAddonsSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 15, Nodes: 4, Images: true})
	a := rt.New(t)
	c := rt.Cluster(t, s, rt.Roles(3))
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	var cs kubernetes.Interface

	ok := t.Run("converges from scratch with cri-dockerd, flannel, CoreDNS and metrics-server", func(t *testing.T) {
		if !*c.EnableCRIDockerd || c.Network.Plugin != "flannel" {
			t.Fatalf("the example cluster runs cri-dockerd %v, network %s: want RKE's defaults", *c.EnableCRIDockerd, c.Network.Plugin)
		}
		pl := a.Apply(ctx, t, c)
		if pl.Addons != nil {
			t.Errorf("a fresh cluster's add-ons were planned (%v): the API server did not run yet", pl.Addons)
		}
		events := strings.Join(a.Events(), "\n")
		for _, want := range []string{"addon " + sysaddons.NetworkPlugin + ": ", "addon " + sysaddons.CoreDNS + ": ", "addon " + sysaddons.MetricsServer + ": "} {
			if !strings.Contains(events, want) {
				t.Errorf("no progress line of %q:\n%s", want, events)
			}
		}
		checkNodes(ctx, t, a, c, s.Nodes[:3])
		cs = a.Client(ctx, t, c)
		for _, n := range s.Nodes[:3] {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Hostname, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "docker://") {
				t.Errorf("%s runs pods with %s, want docker:// (cri-dockerd)", n.Hostname, rt)
			}
		}
		st, _, err := a.Session(t, c).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{sysaddons.NetworkPlugin, sysaddons.CoreDNS, sysaddons.MetricsServer} {
			i := slices.IndexFunc(st.Addons, func(as reconcile.AddonStatus) bool { return as.Name == name })
			if i < 0 || !st.Addons[i].Ready || st.Addons[i].Pending != 0 {
				t.Errorf("status of %s: %+v (all: %+v)", name, st.Addons, st.Addons)
			}
		}
		a.InSync(ctx, t, c)
	})
	if !ok {
		t.FailNow()
	}

	t.Run("a pod reaches a pod on another node by IP and by a Service name", func(t *testing.T) {
		res, err := smoke.Check{Client: cs, Image: sandbox.ToolsImage, ServerNode: s.Nodes[2].Hostname, ClientNode: s.Nodes[0].Hostname,
			Progress: func(msg string) { t.Log(msg) }}.Run(ctx)
		if err != nil {
			t.Fatalf("%v (%+v)", err, res)
		}
	})

	t.Run("the nodes' metrics are served (kubectl top nodes)", func(t *testing.T) {
		rt.Eventually(ctx, t, 3*time.Minute, "metrics of every node", func(ctx context.Context) (bool, error) {
			b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes").DoRaw(ctx)
			if err != nil {
				return false, err
			}
			var list struct {
				Items []struct {
					Metadata struct{ Name string }
					Usage    map[string]string
				}
			}
			if err := json.Unmarshal(b, &list); err != nil {
				return false, err
			}
			have := 0
			for _, it := range list.Items {
				if it.Usage["cpu"] != "" && it.Usage["memory"] != "" {
					have++
				}
			}
			if have < 3 {
				return false, fmt.Errorf("%d of 3 nodes with figures: %s", have, b)
			}
			return true, nil
		})
	})

	t.Run("the user's add-ons are applied, changed and pruned", func(t *testing.T) {
		cm := func(name, v string) string {
			return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: default}\ndata: {v: %q}\n", name, v)
		}
		with := func(docs ...string) *spec.Cluster {
			return rt.Cluster(t, s, rt.Roles(3), func(c *spec.Cluster) { c.Addons = strings.Join(docs, "---\n") })
		}
		a.Apply(ctx, t, with(cm("user-a", "1"), cm("user-b", "1")))
		changed := with(cm("user-a", "2"))
		pl := a.Plan(ctx, t, changed)
		if pl.Addons == nil || pl.Addons.Count(addons.Configure) != 1 || pl.Addons.Count(addons.Prune) != 1 || !pl.Plan.Empty() {
			t.Fatalf("plan: steps %v, add-ons %+v; want user-a configured and user-b pruned", rt.StepLines(pl.Plan), pl.Addons)
		}
		a.Apply(ctx, t, changed)
		got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "user-a", metav1.GetOptions{})
		if err != nil || got.Data["v"] != "2" {
			t.Errorf("user-a: %v, %v", got, err)
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "user-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("user-b, removed from addons, is still there: %v", err)
		}
		a.InSync(ctx, t, changed)
	})

	t.Run("a broken add-on fails naming its object and event; the rest stays converged", func(t *testing.T) {
		broken := rt.Cluster(t, s, rt.Roles(3), func(c *spec.Cluster) {
			c.AddonJobTimeout = 30
			c.Addons = `apiVersion: apps/v1
kind: Deployment
metadata: {name: broken, namespace: default}
spec:
  selector: {matchLabels: {app: broken}}
  template:
    metadata: {labels: {app: broken}}
    spec:
      containers:
      - {name: c, image: "rigger-sandbox/does-not-exist:1", imagePullPolicy: IfNotPresent}
`
		})
		_, _, err := a.TryApply(ctx, t, broken)
		var nr *addons.NotReadyError
		if !errors.As(err, &nr) || nr.Object.Name != "broken" || !strings.Contains(err.Error(), "rigger-sandbox/does-not-exist:1") {
			t.Fatalf("apply of a Deployment whose image does not exist: %v; want a NotReadyError naming it and its pull failure", err)
		}
		st, _, err := a.Session(t, broken).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.PendingSteps != 0 {
			t.Errorf("%d steps pending on the nodes after a failed add-on", st.PendingSteps)
		}
		for _, as := range st.Addons {
			if as.Name != addons.UserAddonName && !as.Ready {
				t.Errorf("add-on %s not ready after another failed: %+v", as.Name, as)
			}
		}
		// Fixed: the broken Deployment goes, the cluster converges.
		a.Apply(ctx, t, c)
	})

	t.Run("a node added later gets the network plugin and becomes Ready", func(t *testing.T) {
		withFourth := rt.Cluster(t, s, rt.Roles(3, 3))
		a.Apply(ctx, t, withFourth)
		checkNodes(ctx, t, a, withFourth, s.Nodes)
		a.InSync(ctx, t, withFourth)
	})
}
