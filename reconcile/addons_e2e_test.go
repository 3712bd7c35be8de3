package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/kubenode"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/sandbox/smoke"
	"github.com/rigger/rigger/spec"
)

// testAddons is the add-ons on the running cluster: a pod on one node
// reaches a pod on another by IP and by a Service name CoreDNS resolves;
// the nodes' metrics are served; the user's add-ons are applied, changed
// and pruned; a broken one fails naming its object and event while the
// rest stays converged; a Node whose CNI configuration was deleted is
// not in sync, and the next apply recreates the network plugin's pod there. (TestClusterSandbox's converge from scratch
// deploys and checks the system add-ons; its engine phase, a worker that
// joins and gets the network plugin.)
func testAddons(ctx context.Context, t *testing.T, f *clusterFixture) {
	f.converge(ctx, t)
	s, a, c := f.s, f.a, f.c
	cs := a.Client(ctx, t, c)

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

	t.Run("a Node whose CNI configuration was deleted is not in sync, and the next apply repairs it", func(t *testing.T) {
		n := s.Nodes[2]
		entries, err := os.ReadDir(n.CNIConfigDir())
		if err != nil || len(entries) == 0 {
			t.Fatalf("%s's CNI configuration: %v, %d files; want the network plugin's", n.Hostname, err, len(entries))
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(n.CNIConfigDir(), e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		// cri-dockerd, in the kubelet's container, keeps the configuration
		// it loaded: the node loses its network when they start again (a
		// reboot, a kubelet replaced after a remove stopped half-way).
		if err := sandboxtest.DockerClient(t, n).ContainerRestart(ctx, "kubelet", container.StopOptions{}); err != nil {
			t.Fatal(err)
		}
		rt.Eventually(ctx, t, 2*time.Minute, n.Hostname+" NotReady without a network", func(ctx context.Context) (bool, error) {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Hostname, metav1.GetOptions{})
			return err == nil && kubenode.NoNetwork(node), err
		})
		pl := a.Plan(ctx, t, c)
		i := slices.IndexFunc(pl.NodeChanges, func(p kubenode.Pending) bool {
			return p.Node == n.Address && strings.Contains(p.Change, "NetworkReady=false")
		})
		if !pl.Changes() || i < 0 {
			t.Fatalf("plan with %s NotReady: changes %v, Node changes %+v; want a repair of it", n.Hostname, pl.Changes(), pl.NodeChanges)
		}
		st := pl.Status()
		for _, ns := range st.Nodes {
			if ns.Address == n.Address && (ns.KubernetesNode == nil || ns.KubernetesNode.Ready != "False" || !strings.Contains(ns.KubernetesNode.ReadyMessage, "NetworkReady=false")) {
				t.Errorf("status of %s: %+v; want its Node NotReady with the kubelet's message", n.Address, ns.KubernetesNode)
			}
		}
		a.Apply(ctx, t, c)
		events := strings.Join(a.Events(), "\n")
		if !strings.Contains(events, "the pod is recreated") {
			t.Errorf("the apply did not say it recreated the network plugin's pod:\n%s", events)
		}
		rt.NodesReady(ctx, t, cs, s.Nodes[:3])
		a.InSync(ctx, t, c)
	})

	t.Run("the user's add-ons are applied, changed and pruned", func(t *testing.T) {
		cm := func(name, v string) string {
			return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: default}\ndata: {v: %q}\n", name, v)
		}
		with := func(docs ...string) *spec.Cluster {
			return f.cluster(t, rt.Roles(3), func(c *spec.Cluster) { c.Addons = strings.Join(docs, "---\n") })
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
		broken := f.cluster(t, rt.Roles(3), func(c *spec.Cluster) {
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
		st := a.Plan(ctx, t, broken).Status()
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
}
