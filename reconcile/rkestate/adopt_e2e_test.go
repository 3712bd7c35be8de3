package rkestate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/rkestate"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// rkeProcess is a container of RKE's node plan (v3.Process, its JSON).
type rkeProcess struct {
	Name          string            `json:"name"`
	Command       []string          `json:"command"`
	Args          []string          `json:"args"`
	Env           []string          `json:"env"`
	Image         string            `json:"image"`
	VolumesFrom   []string          `json:"volumesFrom"`
	Binds         []string          `json:"binds"`
	NetworkMode   string            `json:"networkMode"`
	RestartPolicy string            `json:"restartPolicy"`
	PidMode       string            `json:"pidMode"`
	Privileged    bool              `json:"privileged"`
	Labels        map[string]string `json:"labels"`
	User          string            `json:"user"`
}

// startRKEProcess creates and starts p as RKE does (services.GetProcessConfig,
// docker.DoRunContainer); service-sidekick RKE only creates on Linux (its
// volume is what the kubelet needs: services.runSidekick).
func startRKEProcess(ctx context.Context, t *testing.T, cli *client.Client, p rkeProcess) {
	t.Helper()
	cfg := &container.Config{Entrypoint: p.Command, Cmd: p.Args, Env: p.Env, Image: p.Image, Labels: p.Labels, User: p.User}
	host := &container.HostConfig{VolumesFrom: p.VolumesFrom, Binds: p.Binds, NetworkMode: container.NetworkMode(p.NetworkMode),
		PidMode: container.PidMode(p.PidMode), Privileged: p.Privileged}
	if p.RestartPolicy != "" {
		host.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyMode(p.RestartPolicy)}
	}
	resp, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, p.Name)
	if err != nil {
		t.Fatalf("create RKE's %s: %v", p.Name, err)
	}
	if p.Name == desired.ServiceSidekick {
		return
	}
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start RKE's %s: %v", p.Name, err)
	}
}

// kubeClient is a client of the API server at server with the kube-admin
// certificate of set.
func kubeClient(t *testing.T, set *pki.Set, server string, timeout time.Duration) kubernetes.Interface {
	t.Helper()
	kc := pki.Kubeconfig("adopt", server, "kube-admin", set.Certs[pki.CACertName].CertPEM,
		set.Certs[pki.KubeAdminCertName].CertPEM, set.Certs[pki.KubeAdminCertName].KeyPEM)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = timeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestAdoptSandbox: a cluster laid out on three sandbox nodes exactly as
// RKE lays it out, from RKE's own code (hack/rke-render: the certificates
// and cluster.rkestate rke up writes, the files its cert-deployer puts on
// each node, the containers of its node plans), is taken over by rigger
// adopt and one apply while the API is polled: no poll fails, the CA is
// RKE's, the etcd members are the same (IDs), a Secret and a ConfigMap made
// under RKE are there, RKE's secrets encryption key goes on encrypting
// them, the Nodes are Ready, every component is rigger's, and
// the next plan is empty. Under make test-long, the adopted cluster is then
// upgraded one minor version.
func TestAdoptSandbox(t *testing.T) {
	opts := sandbox.Options{Subnet: 27, Nodes: 3, Images: true}
	if sandboxtest.Long() {
		opts.KubernetesVersions = []string{adoptUpgrade} // the upgrade after the takeover
	}
	s := sandboxtest.Start(t, opts)
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	bin := rkerender.Binary(t)

	// Secrets encrypted at rest with the key RKE generates: adopt imports
	// it, and rigger goes on with it.
	yml, ok := replaceOnce(sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, s, rt.Roles(3))),
		"\nservices:\n", "\nservices:\n  kube-api:\n    secrets_encryption_config: {enabled: true}\n")
	if !ok {
		t.Fatalf("no services block in the sandbox's cluster.yml:\n%s", yml)
	}
	// Scheduled snapshots on the etcd nodes, as RKE's default (the
	// sandbox's example turns them off), and RKE's own images: no image of
	// rigger's on the nodes, so rigger's etcd-rolling-snapshots runs its
	// binary (the sandbox's, in this test binary) in system_images.alpine.
	for old, new := range map[string]string{"    snapshot: false\n": "    snapshot: true\n", "cert_downloader: rigger/rigger:dev": "cert_downloader: rancher/rke-tools:v0.1.114"} {
		if yml, ok = replaceOnce(yml, old, new); !ok {
			t.Fatalf("no %q in the sandbox's cluster.yml:\n%s", old, yml)
		}
	}
	nodebin.Use(s.RiggerBinary)
	t.Cleanup(func() { nodebin.Use("") })
	dir := t.TempDir()
	clusterFile := filepath.Join(dir, "cluster.yml")
	if err := os.WriteFile(clusterFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := rt.Load(t, yml)
	stateFile, plansFile, filesFile := filepath.Join(dir, "cluster.rkestate"), filepath.Join(dir, "plans.json"), filepath.Join(dir, "files.json")
	rkerender.Run(t, bin, "-rkestate", stateFile, "-plans", plansFile, "-files", filesFile, clusterFile)

	var plans struct {
		Nodes []struct {
			Address   string                `json:"address"`
			Processes map[string]rkeProcess `json:"processes"`
		} `json:"nodes"`
	}
	var files map[string]map[string]string
	for f, v := range map[string]any{plansFile: &plans, filesFile: &files} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	fh, err := os.Open(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	st, err := rkestate.Parse(stateFile, fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	rkeSet := &pki.Set{Certs: st.Certs}
	rkeKeys, err := secretsenc.Parse(stateFile, st.EncryptionConfig)
	if err != nil {
		t.Fatalf("RKE's encryption config: %v", err)
	}
	// What the API servers write Secrets with: RKE's first key.
	encrypted := []byte("k8s:enc:aescbc:v1:" + rkeKeys.Names()[0] + ":")

	d, err := desired.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*client.Client{}
	for _, n := range s.Nodes {
		clients[n.Address] = sandboxtest.DockerClient(t, n)
	}

	start := time.Now()
	t.Run("lay out as RKE", func(t *testing.T) {
		for _, n := range s.Nodes {
			out := map[string][]byte{}
			for p, b := range files[n.Address] {
				out[p] = []byte(b)
			}
			// The admission configuration RKE's file deployer writes
			// (cluster.getConsolidatedAdmissionConfiguration, not exported)
			// is the one rigger writes.
			dn, _ := d.Node(n.Address)
			conf, err := desired.ConfigFiles(c, dn)
			if err != nil {
				t.Fatal(err)
			}
			if b, ok := conf["/etc/kubernetes/admission.yaml"]; ok {
				out["/etc/kubernetes/admission.yaml"] = b
			} else {
				t.Fatalf("rigger writes no admission.yaml: %v", slices.Collect(maps.Keys(conf)))
			}
			if err := dockerop.WriteFiles(ctx, clients[n.Address], n.Address, c.SystemImages.Alpine, desired.KubernetesDir, out); err != nil {
				t.Fatal(err)
			}
		}
		// RKE's order: etcd (all members at once, a new cluster), then the
		// control plane, then the workers' components.
		for _, name := range []string{"etcd", "service-sidekick", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "nginx-proxy", "kubelet", "kube-proxy"} {
			for _, np := range plans.Nodes {
				if p, ok := np.Processes[name]; ok {
					p.Name = name
					startRKEProcess(ctx, t, clients[np.Address], p)
				}
			}
		}
		// RKE's scheduled snapshots (services.RunEtcdSnapshotSave, not in
		// the node plan): rke-tools' rke-etcd-backup, which the sandbox's
		// alpine image lacks, so the container is only created.
		for _, n := range s.Nodes {
			p := rkeProcess{Name: desired.EtcdRollingSnapshots, Image: c.SystemImages.Alpine, NetworkMode: "host", RestartPolicy: "always",
				Command: []string{"/opt/rke-tools/rke-etcd-backup", "etcd-backup", "save", "--cacert", "/etc/kubernetes/ssl/kube-ca.pem",
					"--cert", "/etc/kubernetes/ssl/kube-node.pem", "--key", "/etc/kubernetes/ssl/kube-node-key.pem",
					"--name", "etcd-rolling-snapshots", "--endpoints=" + n.Address + ":2379", "--retention=72h", "--creation=12h"},
				Binds: []string{"/opt/rke/etcd-snapshots:/backup:z", "/etc/kubernetes:/etc/kubernetes:z"}}
			cfg := &container.Config{Entrypoint: p.Command, Image: p.Image}
			host := &container.HostConfig{Binds: p.Binds, NetworkMode: container.NetworkMode(p.NetworkMode),
				RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyMode(p.RestartPolicy)}}
			if _, err := clients[n.Address].ContainerCreate(ctx, cfg, host, nil, nil, p.Name); err != nil {
				t.Fatalf("create RKE's %s: %v", p.Name, err)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What RKE's containers said, to see why.
		for _, n := range s.Nodes {
			list, err := clients[n.Address].ContainerList(context.Background(), container.ListOptions{All: true})
			if err != nil {
				continue
			}
			for _, ctr := range list {
				name := strings.TrimPrefix(ctr.Names[0], "/")
				t.Logf("%s %s: %s %s\n%s", n.Address, name, ctr.State, ctr.Status, dockerop.Logs(context.Background(), clients[n.Address], name))
			}
		}
	})
	servers := make([]kubernetes.Interface, len(s.Nodes))
	for i, n := range s.Nodes {
		servers[i] = kubeClient(t, rkeSet, "https://"+n.Address+":6443", 10*time.Second)
	}
	k := servers[0]
	rt.Eventually(ctx, t, 3*time.Minute, "RKE's API servers answer", func(ctx context.Context) (bool, error) {
		for _, k := range servers {
			if _, err := k.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	// What rke up applies then (cluster.ApplyAuthzResources): the Nodes'
	// group bound to system:node (RKE's kube-node certificate is one for
	// every node), the API server's access to the kubelets.
	rbac := k.RbacV1()
	if _, err := rbac.ClusterRoleBindings().Update(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:node", Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
			Annotations: map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "false"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects: []rbacv1.Subject{{Kind: "Group", Name: "system:nodes", APIGroup: "rbac.authorization.k8s.io"}},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "proxy-clusterrole-kubeapiserver"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/metrics", "nodes/proxy", "nodes/stats", "nodes/log", "nodes/spec"},
			Verbs: []string{"get", "list", "watch", "create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "proxy-role-binding-kubernetes-master"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "proxy-clusterrole-kubeapiserver"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "kube-apiserver", APIGroup: "rbac.authorization.k8s.io"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt.Eventually(ctx, t, 3*time.Minute, "RKE's kubelets register the Nodes", func(ctx context.Context) (bool, error) {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(nodes.Items) == 3, err
	})
	t.Logf("RKE's cluster up in %s", time.Since(start).Round(time.Second))
	marker := map[string]string{"made": "under RKE"}
	if _, err := k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "adopt-marker"}, StringData: marker}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "adopt-marker"}, Data: marker}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if raw := rt.EtcdGet(ctx, t, clients[s.Nodes[0].Address], "/registry/secrets/default/adopt-marker"); !bytes.HasPrefix(raw, encrypted) {
		t.Fatalf("RKE's API servers stored the Secret as %.40q, want it encrypted with RKE's key (%s)", raw, encrypted)
	}

	// RKE keeps its state in the cluster too (SaveFullStateToK8s: the
	// state's JSON in the Secret kube-system/full-cluster-state).
	stateJSON, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: rkestate.FullStateName},
		Data: map[string][]byte{rkestate.FullStateName: stateJSON}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("adopt from the API server", func(t *testing.T) {
		kubeconfig := filepath.Join(dir, "kube_config_cluster.yml")
		kc, err := pki.AdminKubeconfig(rkeSet, pki.RequestFor(c))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
			t.Fatal(err)
		}
		taken, err := rt.New(t).Session(t, c).Adopt(ctx, reconcile.AdoptOptions{Kubeconfig: kubeconfig})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range taken.Items {
			if it.Action != rkestate.Imported || it.Source != "Secret kube-system/full-cluster-state" ||
				!bytes.Equal(taken.Set.Certs[it.Name].KeyPEM, st.Certs[it.Name].KeyPEM) {
				t.Errorf("%s: %s from %s, want RKE's, imported from the Secret", it.Name, it.Action, it.Source)
			}
		}
	})
	t.Run("adopt from the nodes", func(t *testing.T) {
		taken, err := rt.New(t).Session(t, c).Adopt(ctx, reconcile.AdoptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range taken.Items {
			switch {
			case it.Name == pki.KubeAdminCertName:
				if it.Action != rkestate.Missing {
					t.Errorf("%s: %s; RKE does not put it on the nodes", it.Name, it.Action)
				}
			case it.Action != rkestate.Imported || !strings.HasPrefix(it.Source, "node 10.231.27.11:") ||
				!bytes.Equal(taken.Set.Certs[it.Name].KeyPEM, st.Certs[it.Name].KeyPEM):
				t.Errorf("%s: %s from %s, want RKE's, imported from the first node", it.Name, it.Action, it.Source)
			}
		}
	})

	a := rt.New(t)
	sess := a.Session(t, c)
	taken, err := sess.Adopt(ctx, reconcile.AdoptOptions{RKEState: st})
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	for _, it := range taken.Items {
		if it.Action != rkestate.Imported {
			t.Errorf("adopt: %s %s", it.Name, it.Action)
		}
	}

	pl := a.Plan(ctx, t, c)
	if len(pl.PKIChanges) != 0 {
		t.Errorf("the plan after adopt issues certificates: %+v", pl.PKIChanges)
	}
	if e := pl.Encryption; e == nil || e.Source.Kind != pkisource.StateDir || !slices.Equal(e.Keys, rkeKeys.Names()) || e.Op != nil {
		t.Errorf("the plan after adopt: secrets encryption %+v, want RKE's keys %v from the state directory and nothing to do", e, rkeKeys.Names())
	}
	if pl.Observed.Etcd == nil || len(pl.Observed.Etcd.Members) != 3 {
		t.Fatalf("etcd members seen by the plan: %+v (%v)", pl.Observed.Etcd, pl.Observed.EtcdErr)
	}
	membersBefore := memberIDs(pl.Observed)
	replaced := 0
	for _, st := range pl.Plan.Steps {
		t.Logf("plan: %s %s %s (%s)", st.Node, st.Action, st.Component, st.Reason)
		if st.Component == "etcd-member" {
			t.Errorf("the takeover changes etcd's membership: %s %s", st.Action, st.Node)
		}
		if strings.HasPrefix(st.Reason, "adopt: replace RKE's") {
			replaced++
		}
	}
	if want := 3 * 8; replaced != want { // etcd, 3 control plane, sidekick, kubelet, kube-proxy, etcd-rolling-snapshots
		t.Errorf("%d steps replace RKE's containers, want %d", replaced, want)
	}

	// Poll the API through the three API servers, as a load balancer in
	// front of them would: a poll fails when none answers. One that is down
	// refuses at once; one that is slow on a loaded machine is up, so each
	// request is given 10 s (the clients' timeout, above).
	var polls, failed atomic.Int64
	var failures sync.Map
	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for pollCtx.Err() == nil {
			var errs []string
			ok := false
			for _, k := range servers {
				_, err := k.CoreV1().ConfigMaps("default").Get(pollCtx, "adopt-marker", metav1.GetOptions{})
				if err == nil {
					ok = true
					break
				}
				errs = append(errs, err.Error())
			}
			if pollCtx.Err() != nil {
				return
			}
			polls.Add(1)
			if !ok {
				failures.Store(time.Now(), strings.Join(errs, "; "))
				failed.Add(1)
			}
			select {
			case <-pollCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	applyStart := time.Now()
	_, err = a.ApplyPlanned(ctx, t, sess, pl)
	stopPolling()
	wg.Wait()
	t.Logf("takeover apply took %s; %d polls, %d failed", time.Since(applyStart).Round(time.Second), polls.Load(), failed.Load())
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if failed.Load() > 0 {
		failures.Range(func(at, msg any) bool {
			t.Errorf("API down at %s: %s", at.(time.Time).Format(time.TimeOnly), msg)
			return true
		})
	}
	if polls.Load() < 10 {
		t.Errorf("only %d polls during the apply", polls.Load())
	}

	t.Run("after", func(t *testing.T) {
		for _, n := range s.Nodes {
			got, err := os.ReadFile(filepath.Join(n.Dir, "etc-kubernetes", "ssl", "kube-ca.pem"))
			if err == nil && !bytes.Equal(got, st.Certs[pki.CACertName].CertPEM) {
				t.Errorf("node %s: kube-ca.pem is no longer RKE's", n.Address)
			}
		}
		stateCA, err := os.ReadFile(filepath.Join(a.StateDir, "kube-ca.pem"))
		if err != nil || !bytes.Equal(stateCA, st.Certs[pki.CACertName].CertPEM) {
			t.Errorf("the state directory's CA is not RKE's (%v)", err)
		}
		if _, err := k.CoreV1().Secrets("default").Get(ctx, "adopt-marker", metav1.GetOptions{}); err != nil {
			t.Errorf("the Secret made under RKE: %v", err)
		}
		// A Secret written by rigger's API servers is encrypted with RKE's key.
		if _, err := k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "after-adopt"}, StringData: marker}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if raw := rt.EtcdGet(ctx, t, clients[s.Nodes[1].Address], "/registry/secrets/default/after-adopt"); !bytes.HasPrefix(raw, encrypted) {
			t.Errorf("rigger's API servers stored a new Secret as %.40q, want it encrypted with RKE's key (%s)", raw, encrypted)
		}
		rt.Eventually(ctx, t, 5*time.Minute, "every Node Ready", func(ctx context.Context) (bool, error) {
			nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, n := range nodes.Items {
				if observe.Ready(&n) != string(corev1.ConditionTrue) {
					return false, fmt.Errorf("node %s not Ready", n.Name)
				}
			}
			return len(nodes.Items) == 3, nil
		})
		for _, n := range s.Nodes {
			list, err := clients[n.Address].ContainerList(ctx, container.ListOptions{All: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, ctr := range list {
				name := strings.TrimPrefix(ctr.Names[0], "/")
				if observe.IsRKEContainer(name) && ctr.Labels[desired.LabelCluster] != c.ClusterName {
					t.Errorf("node %s: %s is still RKE's", n.Address, name)
				}
			}
		}
		// The adopted cluster keeps its scheduled snapshots: rigger's
		// etcd-rolling-snapshots on every etcd node, rigger's binary in
		// RKE's image, each running the schedule (the snapshot the takeover
		// took before etcd changed is its last; the snapshotter phase of
		// reconcile/etcdsnap's TestEtcdSandbox sees one taken when due).
		bin, err := nodebin.Get()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range s.Nodes {
			info, err := clients[n.Address].ContainerInspect(ctx, desired.EtcdRollingSnapshots)
			if err != nil {
				t.Fatalf("node %s: %v", n.Address, err)
			}
			if info.Config.Labels[desired.LabelCluster] != c.ClusterName || info.Config.Image != c.SystemImages.Alpine ||
				!slices.Equal(info.Config.Entrypoint, []string{desired.BinaryPath}) || !strings.Contains(info.Config.Labels[desired.LabelSpec], bin.ID) {
				t.Errorf("node %s: %s is not rigger's binary in %s: image %s, entrypoint %v, labels %v", n.Address, desired.EtcdRollingSnapshots,
					c.SystemImages.Alpine, info.Config.Image, info.Config.Entrypoint, info.Config.Labels)
			}
		}
		rt.Eventually(ctx, t, 3*time.Minute, "rigger's etcd-rolling-snapshots on every etcd node checks the schedule", func(ctx context.Context) (bool, error) {
			for _, n := range s.Nodes {
				l := dockerop.Logs(ctx, clients[n.Address], desired.EtcdRollingSnapshots)
				if strings.Contains(l, "scheduled snapshot failed") {
					t.Fatalf("node %s: %s failed:\n%s", n.Address, desired.EtcdRollingSnapshots, l)
				}
				if !strings.Contains(l, "no scheduled snapshot due") && !strings.Contains(l, "scheduled snapshot taken and verified") &&
					!strings.Contains(l, "scheduled snapshot not taken here") {
					return false, fmt.Errorf("node %s: no check logged yet: %q", n.Address, l)
				}
			}
			return true, nil
		})
		pl := a.Plan(ctx, t, c)
		if after := memberIDs(pl.Observed); !slices.Equal(after, membersBefore) {
			t.Errorf("etcd member IDs %v after the takeover, %v before", after, membersBefore)
		}
		a.InSync(ctx, t, c)
	})

	t.Run("upgraded one minor version after the takeover", func(t *testing.T) {
		sandboxtest.SkipUnlessLong(t)
		images, err := sandbox.VersionImages(adoptUpgrade)
		if err != nil {
			t.Fatal(err)
		}
		upYML := strings.ReplaceAll(strings.ReplaceAll(yml, sandbox.HyperkubeRef(sandbox.KubernetesVersion), images["kubernetes"]),
			sandbox.EtcdRef(sandbox.EtcdVersion), images["etcd"])
		up := rt.Load(t, upYML)
		if up.Services.KubeAPI.Image != images["kubernetes"] || up.Services.Etcd.Image != images["etcd"] {
			t.Fatalf("the cluster.yml of the upgrade runs %s and %s, want %v", up.Services.KubeAPI.Image, up.Services.Etcd.Image, images)
		}
		pl := a.Apply(ctx, t, up)
		if u := pl.Plan.Upgrade; u == nil || u.To != adoptUpgrade {
			t.Errorf("the plan's upgrade: %+v, want one to %s", u, adoptUpgrade)
		}
		rt.Eventually(ctx, t, 5*time.Minute, "every Node Ready on "+adoptUpgrade, func(ctx context.Context) (bool, error) {
			nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, n := range nodes.Items {
				if observe.Ready(&n) != string(corev1.ConditionTrue) || n.Status.NodeInfo.KubeletVersion != adoptUpgrade {
					return false, fmt.Errorf("node %s: Ready %s, kubelet %s", n.Name, observe.Ready(&n), n.Status.NodeInfo.KubeletVersion)
				}
			}
			return len(nodes.Items) == 3, nil
		})
		// What was made under RKE is still there, the Secret still read
		// with RKE's key.
		if _, err := k.CoreV1().Secrets("default").Get(ctx, "adopt-marker", metav1.GetOptions{}); err != nil {
			t.Errorf("the Secret made under RKE after the upgrade: %v", err)
		}
		if after := memberIDs(a.Plan(ctx, t, up).Observed); !slices.Equal(after, membersBefore) {
			t.Errorf("etcd member IDs %v after the upgrade, %v before", after, membersBefore)
		}
		a.InSync(ctx, t, up)
	})
}

// adoptUpgrade is the Kubernetes version TestAdoptSandbox upgrades the
// adopted cluster to: the next minor version after the sandbox's default.
const adoptUpgrade = "v1.33.13"

func memberIDs(o *observe.Cluster) []string {
	if o.Etcd == nil {
		return nil
	}
	var ids []string
	for _, m := range o.Etcd.Members {
		ids = append(ids, fmt.Sprintf("%x=%s", m.ID, m.Name))
	}
	slices.Sort(ids)
	return ids
}

// replaceOnce replaces the first old in s by new, and says whether there
// was one.
func replaceOnce(s, old, new string) (string, bool) {
	before, after, ok := strings.Cut(s, old)
	if !ok {
		return s, false
	}
	return before + new + after, true
}
