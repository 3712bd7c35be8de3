package desired

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/rkemeta"
)

// parse returns the defaulted, valid cluster of a cluster.yml.
func parse(t testing.TB, yml string) *spec.Cluster {
	t.Helper()
	c, diags := spec.Parse([]byte(yml), "cluster.yml")
	if err := diags.Err(); err != nil {
		t.Fatalf("parse cluster.yml: %v\n%s", err, yml)
	}
	return c
}

func build(t testing.TB, c *spec.Cluster) *Cluster {
	t.Helper()
	d, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// hashes maps "address/container" to the container's spec hash.
func hashes(d *Cluster) map[string]string {
	m := map[string]string{}
	for _, n := range d.Nodes {
		for _, c := range n.Containers {
			m[n.Address+"/"+c.Name] = c.Hash()
		}
	}
	return m
}

// changed lists the "address/container" keys of a whose hash differs in b
// (or that b lacks), sorted.
func changed(a, b map[string]string) []string {
	var out []string
	for k, h := range a {
		if b[k] != h {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// components lists the distinct container names of "address/container" keys.
func components(keys []string) []string {
	var out []string
	for _, k := range keys {
		name := k[strings.Index(k, "/")+1:]
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func container(t testing.TB, d *Cluster, address, name string) *Container {
	t.Helper()
	n, ok := d.Node(address)
	if !ok {
		t.Fatalf("no node %s", address)
	}
	c, ok := n.Container(name)
	if !ok {
		t.Fatalf("node %s has no %s container", address, name)
	}
	return c
}

// flagValues returns the values of --name=… in args.
func flagValues(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestHashScope changes one setting at a time and checks that exactly the
// containers it concerns get a new hash.
func TestHashScope(t *testing.T) {
	cp := []string{"10.10.0.21", "10.10.0.22"}
	tests := []struct {
		name   string
		change func(c *spec.Cluster)
		want   []string // components whose hashes change, sorted
	}{
		{"kube-api extra_args", func(c *spec.Cluster) { c.Services.KubeAPI.ExtraArgs = map[string]string{"v": "4"} }, []string{KubeAPIServer}},
		{"kube-api extra_args_array", func(c *spec.Cluster) {
			c.Services.KubeAPI.ExtraArgsArray = map[string][]string{"tls-sni-cert-key": {"a.pem,a-key.pem"}}
		}, []string{KubeAPIServer}},
		{"kube-controller extra_args", func(c *spec.Cluster) { c.Services.KubeController.ExtraArgs = map[string]string{"v": "4"} }, []string{KubeControllerManager}},
		{"scheduler extra_env", func(c *spec.Cluster) { c.Services.Scheduler.ExtraEnv = []string{"A=b"} }, []string{KubeScheduler}},
		{"kubelet extra_binds", func(c *spec.Cluster) { c.Services.Kubelet.ExtraBinds = []string{"/a:/a"} }, []string{Kubelet}},
		{"kubeproxy extra_args", func(c *spec.Cluster) { c.Services.Kubeproxy.ExtraArgs = map[string]string{"v": "4"} }, []string{KubeProxy}},
		{"etcd extra_args", func(c *spec.Cluster) { c.Services.Etcd.ExtraArgs["quota-backend-bytes"] = "1" }, []string{Etcd}},
		{"etcd image", func(c *spec.Cluster) { c.Services.Etcd.Image = "etcd:new" }, []string{Etcd}},
		{"kube-api image", func(c *spec.Cluster) { c.Services.KubeAPI.Image = "k:new" }, []string{KubeAPIServer}},
		{"kube-controller image", func(c *spec.Cluster) { c.Services.KubeController.Image = "k:new" }, []string{KubeControllerManager}},
		{"scheduler image", func(c *spec.Cluster) { c.Services.Scheduler.Image = "k:new" }, []string{KubeScheduler}},
		{"kubelet image", func(c *spec.Cluster) { c.Services.Kubelet.Image = "k:new" }, []string{Kubelet}},
		{"kubeproxy image", func(c *spec.Cluster) { c.Services.Kubeproxy.Image = "k:new" }, []string{KubeProxy}},
		{"nginx_proxy image", func(c *spec.Cluster) { c.SystemImages.NginxProxy = "rigger:new" }, []string{NginxProxy}},
		{"pause image", func(c *spec.Cluster) { c.Services.Kubelet.InfraContainerImage = "pause:new" }, []string{Kubelet}},
		{"service CIDR", func(c *spec.Cluster) {
			c.Services.KubeAPI.ServiceClusterIPRange = "10.99.0.0/16"
			c.Services.KubeController.ServiceClusterIPRange = "10.99.0.0/16"
		}, []string{KubeAPIServer, KubeControllerManager}},
		{"cluster CIDR", func(c *spec.Cluster) { c.Services.KubeController.ClusterCIDR = "10.98.0.0/16" }, []string{KubeControllerManager, KubeProxy}},
		{"cluster DNS", func(c *spec.Cluster) { c.Services.Kubelet.ClusterDNSServer = "10.43.0.11" }, []string{Kubelet}},
		{"cluster name", func(c *spec.Cluster) { c.ClusterName = "other" }, nil},
		{"prefix_path", func(c *spec.Cluster) { c.PrefixPath = "/opt/rke" }, []string{Etcd, EtcdRollingSnapshots, KubeAPIServer, KubeControllerManager, KubeProxy, KubeScheduler, Kubelet}},
		{"cloud provider", func(c *spec.Cluster) { c.CloudProvider.Name = "external" }, []string{KubeAPIServer, KubeControllerManager, KubeProxy, Kubelet}},
		{"controlplane internal address", func(c *spec.Cluster) { c.Nodes[3].InternalAddress = "192.168.0.21" }, []string{KubeAPIServer, Kubelet, NginxProxy}},
	}
	base := hashes(build(t, load(t, "three-role")))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := load(t, "three-role")
			tt.change(c)
			got := changed(base, hashes(build(t, c)))
			if diff := cmp.Diff(tt.want, components(got)); diff != "" {
				t.Errorf("components with a new hash (-want +got):\n%s\nchanged: %v", diff, got)
			}
			if tt.name == "kube-api extra_args" {
				// Every API server, and nothing else.
				want := []string{cp[0] + "/" + KubeAPIServer, cp[1] + "/" + KubeAPIServer}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("changed containers (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestAddNode: a new worker changes nothing on the other nodes; a new etcd
// node changes the other members' bootstrap args but not their hashes, and
// of the other containers only the API servers' (their --etcd-servers).
func TestAddNode(t *testing.T) {
	before := build(t, load(t, "three-role"))
	tests := []struct {
		name          string
		node          spec.Node
		wantChanged   []string // components of existing nodes with a new hash
		wantBootstrap bool     // existing etcd members' bootstrap args change
	}{
		{"worker", spec.Node{Address: "10.10.0.34", User: "rke", Role: []string{spec.RoleWorker}}, nil, false},
		{"controlplane", spec.Node{Address: "10.10.0.23", User: "rke", Role: []string{spec.RoleControlPlane}}, []string{NginxProxy}, false},
		{"etcd", spec.Node{Address: "10.10.0.14", User: "rke", Role: []string{spec.RoleEtcd}}, []string{KubeAPIServer}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := load(t, "three-role")
			c.Nodes = append(c.Nodes, tt.node)
			spec.SetDefaults(c)
			after := build(t, c)
			if _, ok := after.Node(tt.node.Address); !ok {
				t.Fatalf("new node %s missing", tt.node.Address)
			}
			got := changed(hashes(before), hashes(after))
			if diff := cmp.Diff(tt.wantChanged, components(got)); diff != "" {
				t.Errorf("components with a new hash (-want +got):\n%s", diff)
			}
			for _, n := range before.Nodes {
				e, ok := n.Container(Etcd)
				if !ok {
					continue
				}
				e2 := container(t, after, n.Address, Etcd)
				if changed := !slices.Equal(e.BootstrapArgs, e2.BootstrapArgs); changed != tt.wantBootstrap {
					t.Errorf("%s: bootstrap args changed = %v, want %v:\n%v\n%v", n.Address, changed, tt.wantBootstrap, e.BootstrapArgs, e2.BootstrapArgs)
				}
			}
		})
	}
}

// TestRemoveEtcdNode: removing an etcd member changes the API servers'
// --etcd-servers and the remaining members' bootstrap args, nothing else.
func TestRemoveEtcdNode(t *testing.T) {
	before := build(t, load(t, "three-role"))
	c := load(t, "three-role")
	c.Nodes = slices.Delete(c.Nodes, 2, 3) // etcd-3
	after := build(t, c)
	got := components(changed(hashes(after), hashes(before)))
	if diff := cmp.Diff([]string{KubeAPIServer}, got); diff != "" {
		t.Errorf("components with a new hash (-want +got):\n%s", diff)
	}
	want := []string{
		"--initial-cluster=etcd-etcd-1=https://10.10.0.11:2380,etcd-etcd-2=https://10.10.0.12:2380",
		"--initial-cluster-state=new",
		"--initial-cluster-token=etcd-cluster-1",
	}
	if diff := cmp.Diff(want, container(t, after, "10.10.0.11", Etcd).BootstrapArgs); diff != "" {
		t.Errorf("bootstrap args (-want +got):\n%s", diff)
	}
}

func TestNginxProxyOnNodesWithoutControlplane(t *testing.T) {
	for _, name := range []string{"ha", "three-role", "extra-args", "sandbox"} {
		t.Run(name, func(t *testing.T) {
			c := load(t, name)
			d := build(t, c)
			var cp []string
			for _, n := range c.Nodes {
				if slices.Contains(n.Role, spec.RoleControlPlane) {
					cp = append(cp, n.InternalAddress)
				}
			}
			for i, n := range d.Nodes {
				p, has := n.Container(NginxProxy)
				want := !slices.Contains(c.Nodes[i].Role, spec.RoleControlPlane)
				if has != want {
					t.Errorf("%s: has nginx-proxy = %v, want %v", n.Address, has, want)
				}
				if has {
					// RKE's container: the image's entrypoint, command
					// nginx-proxy, the controlplane nodes in CP_HOSTS.
					got := struct{ Entrypoint, Args, Env []string }{p.Entrypoint, p.Args, p.Env}
					want := struct{ Entrypoint, Args, Env []string }{nil, []string{"nginx-proxy"}, []string{"CP_HOSTS=" + strings.Join(cp, ",")}}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("%s: nginx-proxy container (-want +got):\n%s", n.Address, diff)
					}
					if p.Image != c.SystemImages.NginxProxy {
						t.Errorf("%s: nginx-proxy image %s, want system_images.nginx_proxy %s", n.Address, p.Image, c.SystemImages.NginxProxy)
					}
				}
			}
		})
	}
}

func TestContainersPerRole(t *testing.T) {
	tests := []struct {
		roles string
		want  []string
	}{
		{"[etcd]", []string{Etcd, NginxProxy, ServiceSidekick, Kubelet, KubeProxy, EtcdRollingSnapshots}},
		{"[controlplane]", []string{KubeAPIServer, KubeControllerManager, KubeScheduler, ServiceSidekick, Kubelet, KubeProxy}},
		{"[worker]", []string{NginxProxy, ServiceSidekick, Kubelet, KubeProxy}},
		{"[worker, etcd]", []string{Etcd, NginxProxy, ServiceSidekick, Kubelet, KubeProxy, EtcdRollingSnapshots}},
		{"[etcd, controlplane, worker]", []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, ServiceSidekick, Kubelet, KubeProxy, EtcdRollingSnapshots}},
	}
	for _, tt := range tests {
		t.Run(tt.roles, func(t *testing.T) {
			yml := "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane]}\n  - {address: 10.0.0.2, user: u, role: " + tt.roles + "}\n"
			n := build(t, parse(t, yml)).Nodes[1]
			var got []string
			for _, c := range n.Containers {
				got = append(got, c.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("containers in start order (-want +got):\n%s", diff)
			}
			taint := flagValues(container(t, &Cluster{Nodes: []Node{n}}, "10.0.0.2", Kubelet).Args, "register-with-taints")
			wantTaint := n.HasRole(spec.RoleControlPlane) && !n.HasRole(spec.RoleWorker)
			if (len(taint) == 1) != wantTaint {
				t.Errorf("kubelet --register-with-taints = %v, want the controlplane taint: %v", taint, wantTaint)
			}
		})
	}
}

func TestExtrasAppended(t *testing.T) {
	d := build(t, load(t, "extra-args"))
	k := container(t, d, "10.30.0.11", Kubelet)
	if got := k.Binds[len(k.Binds)-1]; got != "/mnt/data:/mnt/data:rshared" {
		t.Errorf("last kubelet bind %q, want the extra bind", got)
	}
	wantEnv := []string{"HTTP_PROXY=http://proxy.internal:3128", "NO_PROXY=10.0.0.0/8,.svc,.cluster.local"}
	if got := k.Env[len(k.Env)-2:]; !slices.Equal(got, wantEnv) {
		t.Errorf("last kubelet env %q, want the extra env %q", got, wantEnv)
	}
	if len(k.Env) != 3 || k.Env[0] != envCRIDockerd {
		t.Errorf("kubelet env %q: want rigger's own first", k.Env)
	}
	api := container(t, d, "10.30.0.11", KubeAPIServer)
	if got := api.Binds[len(api.Binds)-1]; got != "/etc/kubernetes/admission.yaml:/etc/kubernetes/admission.yaml:ro" {
		t.Errorf("last kube-apiserver bind %q, want the extra bind", got)
	}
	// extra_args override rigger's flag of the same name: one occurrence.
	if got := flagValues(api.Args, "audit-log-maxage"); !slices.Equal(got, []string{"14"}) {
		t.Errorf("--audit-log-maxage = %q, want [14] (extra_args override)", got)
	}
	if got := flagValues(container(t, d, "10.30.0.11", Kubelet).Args, "max-pods"); !slices.Equal(got, []string{"150"}) {
		t.Errorf("kubelet --max-pods = %q, want [150]", got)
	}
	// A repeated extra bind or env is given once.
	c := load(t, "extra-args")
	c.Services.Kubelet.ExtraBinds = append(c.Services.Kubelet.ExtraBinds, "/run:/run:rprivate")
	c.Services.Kubelet.ExtraEnv = append(c.Services.Kubelet.ExtraEnv, envCRIDockerd)
	k = container(t, build(t, c), "10.30.0.11", Kubelet)
	for _, list := range [][]string{k.Binds, k.Env} {
		if u := uniq(list); len(u) != len(list) {
			t.Errorf("repeated entries in %q", list)
		}
	}
}

func TestExtraArgsArray(t *testing.T) {
	c := load(t, "three-role")
	c.Services.KubeAPI.ExtraArgsArray = map[string][]string{
		"tls-sni-cert-key":              {"b.pem,b-key.pem", "a.pem,a-key.pem"},
		"admission-control-config-file": {"/etc/kubernetes/mine.yaml"},
	}
	api := container(t, build(t, c), "10.10.0.21", KubeAPIServer)
	if got, want := flagValues(api.Args, "tls-sni-cert-key"), []string{"b.pem,b-key.pem", "a.pem,a-key.pem"}; !slices.Equal(got, want) {
		t.Errorf("--tls-sni-cert-key = %q, want %q in the given order", got, want)
	}
	if got := flagValues(api.Args, "admission-control-config-file"); !slices.Equal(got, []string{"/etc/kubernetes/mine.yaml"}) {
		t.Errorf("--admission-control-config-file = %q, want the array's value only", got)
	}
}

func TestArgsSortedByFlag(t *testing.T) {
	for _, name := range []string{"ha", "extra-args"} {
		for _, n := range build(t, load(t, name)).Nodes {
			for _, c := range n.Containers {
				if c.Name == NginxProxy || c.Name == EtcdRollingSnapshots { // rigger's subcommand first
					continue
				}
				args := c.Args
				if c.Name == Kubelet && c.Entrypoint[0] == RKEToolsEntrypoint {
					args = args[1:] // rke-tools' entrypoint takes the command first
				}
				var flags []string
				for _, a := range args {
					if !strings.HasPrefix(a, "--") || !strings.Contains(a, "=") {
						t.Errorf("%s %s: arg %q is not --flag=value", n.Address, c.Name, a)
					}
					flags = append(flags, strings.SplitN(a, "=", 2)[0])
				}
				if !slices.IsSorted(flags) {
					t.Errorf("%s %s: args not sorted by flag: %q", n.Address, c.Name, flags)
				}
			}
		}
	}
}

func TestDeterministic(t *testing.T) {
	c := load(t, "extra-args")
	first := render(t, build(t, c))
	for range 20 {
		if got := render(t, build(t, c)); !bytes.Equal(first, got) {
			t.Fatalf("two builds differ:\n%s", cmp.Diff(string(first), string(got)))
		}
	}
}

func TestLabels(t *testing.T) {
	d := build(t, load(t, "ha"))
	for _, n := range d.Nodes {
		for _, c := range n.Containers {
			want := map[string]string{LabelCluster: "prod", LabelComponent: c.Name, LabelSpecHash: c.Hash(), LabelSpec: c.SpecJSON()}
			if diff := cmp.Diff(want, c.Labels); diff != "" {
				t.Errorf("%s %s labels (-want +got):\n%s", n.Address, c.Name, diff)
			}
			if c.NetworkMode != NetworkModeHost || c.RestartPolicy != RestartAlways && !c.RunOnce {
				t.Errorf("%s %s: network %q restart %q, want host and always", n.Address, c.Name, c.NetworkMode, c.RestartPolicy)
			}
			privileged := c.Name == Kubelet || c.Name == KubeProxy
			if c.Privileged != privileged || (c.PidMode == PidModeHost) != privileged {
				t.Errorf("%s %s: privileged %v pid %q, want privileged and host PIDs only for kubelet and kube-proxy", n.Address, c.Name, c.Privileged, c.PidMode)
			}
		}
	}
}

// TestHashCovers changes each field of a container: the hash must change
// exactly for the fields it covers.
func TestHashCovers(t *testing.T) {
	base := container(t, build(t, load(t, "extra-args")), "10.30.0.11", Kubelet)
	tests := []struct {
		field  string
		change func(c *Container)
		covers bool
	}{
		{"Image", func(c *Container) { c.Image += "x" }, true},
		{"Entrypoint", func(c *Container) { c.Entrypoint = []string{"/bin/sh"} }, true},
		{"Args", func(c *Container) { c.Args = append(c.Args, "--x=y") }, true},
		{"Args order", func(c *Container) { c.Args[0], c.Args[1] = c.Args[1], c.Args[0] }, true},
		{"Env", func(c *Container) { c.Env = append(c.Env, "X=y") }, true},
		{"Binds", func(c *Container) { c.Binds = c.Binds[1:] }, true},
		{"NetworkMode", func(c *Container) { c.NetworkMode = "bridge" }, true},
		{"PidMode", func(c *Container) { c.PidMode = "" }, true},
		{"User", func(c *Container) { c.User = "1000:1000" }, true},
		{"Privileged", func(c *Container) { c.Privileged = false }, true},
		{"RestartPolicy", func(c *Container) { c.RestartPolicy = "no" }, true},
		{"Name", func(c *Container) { c.Name = "other" }, false},
		{"Labels", func(c *Container) { c.Labels = map[string]string{"a": "b"} }, false},
		{"BootstrapArgs", func(c *Container) { c.BootstrapArgs = []string{"--initial-cluster-state=existing"} }, false},
		{"nil vs empty", func(c *Container) { c.Env = nil }, true},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			c := *base
			c.Args, c.Env, c.Binds = slices.Clone(c.Args), slices.Clone(c.Env), slices.Clone(c.Binds)
			tt.change(&c)
			if got := c.Hash() != base.Hash(); got != tt.covers {
				t.Errorf("hash changed = %v, want %v", got, tt.covers)
			}
		})
	}
	if h := base.Hash(); len(h) != 16 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Errorf("hash %q: want 16 lower-case hex digits", h)
	}
	var nilC, emptyC Container
	emptyC.Args, emptyC.Env = []string{}, []string{}
	if nilC.Hash() != emptyC.Hash() {
		t.Error("nil and empty lists hash differently")
	}
}

func TestEtcd(t *testing.T) {
	d := build(t, load(t, "ha"))
	e := container(t, d, "203.0.113.12", Etcd)
	for flag, want := range map[string]string{
		"name":                        "etcd-prod-2",
		"data-dir":                    "/var/lib/rancher/etcd/",
		"listen-client-urls":          "https://10.0.0.12:2379",
		"listen-peer-urls":            "https://10.0.0.12:2380",
		"advertise-client-urls":       "https://10.0.0.12:2379",
		"initial-advertise-peer-urls": "https://10.0.0.12:2380",
		"cert-file":                   "/etc/kubernetes/ssl/kube-etcd-10-0-0-12.pem",
		"key-file":                    "/etc/kubernetes/ssl/kube-etcd-10-0-0-12-key.pem",
		"trusted-ca-file":             "/etc/kubernetes/ssl/kube-ca.pem",
		"election-timeout":            "5000",
	} {
		if got := flagValues(e.Args, flag); !slices.Equal(got, []string{want}) {
			t.Errorf("etcd --%s = %q, want %q", flag, got, want)
		}
	}
	for _, a := range e.Args {
		if strings.HasPrefix(a, "--initial-cluster") {
			t.Errorf("bootstrap flag %q in Args: it must be in BootstrapArgs only", a)
		}
	}
	want := []string{
		"--initial-cluster=etcd-prod-1=https://10.0.0.11:2380,etcd-prod-2=https://10.0.0.12:2380,etcd-prod-3=https://10.0.0.13:2380",
		"--initial-cluster-state=new",
		"--initial-cluster-token=etcd-cluster-1",
	}
	if diff := cmp.Diff(want, e.BootstrapArgs); diff != "" {
		t.Errorf("bootstrap args (-want +got):\n%s", diff)
	}
	// The node's own etcd comes first in its API server's --etcd-servers.
	api := container(t, d, "203.0.113.12", KubeAPIServer)
	if got, want := flagValues(api.Args, "etcd-servers"), "https://10.0.0.12:2379,https://10.0.0.11:2379,https://10.0.0.13:2379"; !slices.Equal(got, []string{want}) {
		t.Errorf("--etcd-servers = %q, want %q", got, want)
	}
	// Without an internal address, etcd listens on every address (NAT).
	e = container(t, build(t, load(t, "three-role")), "10.10.0.11", Etcd)
	if got := flagValues(e.Args, "listen-client-urls"); !slices.Equal(got, []string{"https://0.0.0.0:2379"}) {
		t.Errorf("--listen-client-urls = %q, want 0.0.0.0", got)
	}
	// uid and gid.
	c := load(t, "ha")
	c.Services.Etcd.UID, c.Services.Etcd.GID = 52034, 52035
	if got := container(t, build(t, c), "203.0.113.11", Etcd).User; got != "52034:52035" {
		t.Errorf("etcd user %q, want 52034:52035", got)
	}
	// External etcd: no etcd containers, the API server uses the URLs.
	c = load(t, "ha")
	c.Services.Etcd.ExternalURLs = []string{"https://etcd.example.com:2379"}
	c.Services.Etcd.Path = "/k8s"
	d = build(t, c)
	for _, n := range d.Nodes {
		if _, ok := n.Container(Etcd); ok {
			t.Errorf("%s: etcd container with external etcd", n.Address)
		}
	}
	api = container(t, d, "203.0.113.11", KubeAPIServer)
	if got := flagValues(api.Args, "etcd-servers"); !slices.Equal(got, []string{"https://etcd.example.com:2379"}) {
		t.Errorf("--etcd-servers = %q with external etcd", got)
	}
}

func TestEtcdBootstrapArgsJoin(t *testing.T) {
	got := EtcdBootstrapArgs([]Peer{{"etcd-a", "https://10.0.0.1:2380"}, {"etcd-b", "https://[fd00::2]:2380"}}, InitialClusterExisting)
	want := []string{
		"--initial-cluster=etcd-a=https://10.0.0.1:2380,etcd-b=https://[fd00::2]:2380",
		"--initial-cluster-state=existing",
		"--initial-cluster-token=etcd-cluster-1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestPrefixPath(t *testing.T) {
	c := load(t, "ha")
	c.PrefixPath = "/opt/rke"
	d := build(t, c)
	tests := []struct {
		component, bind string
	}{
		{Etcd, "/opt/rke/var/lib/etcd:/var/lib/rancher/etcd/"},
		{Etcd, "/opt/rke/etc/kubernetes:/etc/kubernetes"},
		{KubeAPIServer, "/opt/rke/var/log/kube-audit:/var/log/kube-audit"},
		{Kubelet, "/opt/rke/var/lib/kubelet:/opt/rke/var/lib/kubelet:shared"},
		{Kubelet, "/var/lib/kubelet/volumeplugins:/var/lib/kubelet/volumeplugins:shared"},
		{Kubelet, "/opt/rke/var/lib/cri-dockerd:/var/lib/cri-dockerd"},
		{KubeProxy, "/opt/rke/etc/kubernetes:/etc/kubernetes"},
	}
	for _, tt := range tests {
		if c := container(t, d, "203.0.113.11", tt.component); !slices.Contains(c.Binds, tt.bind) {
			t.Errorf("%s binds %q: want %q", tt.component, c.Binds, tt.bind)
		}
	}
	if got := flagValues(container(t, d, "203.0.113.11", Kubelet).Args, "root-dir"); !slices.Equal(got, []string{"/opt/rke/var/lib/kubelet"}) {
		t.Errorf("kubelet --root-dir = %q", got)
	}
}

func TestKubeletAndProxyIdentity(t *testing.T) {
	d := build(t, load(t, "ha"))
	k := container(t, d, "203.0.113.13", Kubelet)
	for flag, want := range map[string]string{
		"hostname-override": "prod-3",
		"node-ip":           "10.0.0.13",
		"kubeconfig":        "/etc/kubernetes/ssl/kubecfg-kube-node.yaml",
		"cluster-dns":       "10.43.0.10",
	} {
		if got := flagValues(k.Args, flag); !slices.Equal(got, []string{want}) {
			t.Errorf("kubelet --%s = %q, want %q", flag, got, want)
		}
	}
	p := container(t, d, "203.0.113.13", KubeProxy)
	if got := flagValues(p.Args, "hostname-override"); !slices.Equal(got, []string{"prod-3"}) {
		t.Errorf("kube-proxy --hostname-override = %q", got)
	}
	if got := flagValues(p.Args, "cluster-cidr"); !slices.Equal(got, []string{"10.42.0.0/16"}) {
		t.Errorf("kube-proxy --cluster-cidr = %q", got)
	}
	// A cloud provider reaches every component that talks to it.
	c := load(t, "ha")
	c.CloudProvider.Name = "external"
	d = build(t, c)
	for _, name := range []string{KubeAPIServer, KubeControllerManager, Kubelet} {
		if got := flagValues(container(t, d, "203.0.113.11", name).Args, "cloud-provider"); !slices.Equal(got, []string{"external"}) {
			t.Errorf("%s --cloud-provider = %q", name, got)
		}
	}
}

// TestReleaseFollowsImage: the components' default flags are RKE's service
// options of the release the kubernetes image runs, its tag's series
// winning over kubernetes_version, as in RKE.
func TestReleaseFollowsImage(t *testing.T) {
	c := load(t, "ha")
	for _, v := range []struct{ version, image string }{
		{"v1.23.17-rancher1-1", "rancher/hyperkube:v1.23.17-rancher1"},
		{"v1.31.5-rancher1-1", "rancher/hyperkube:v1.23.17-rancher1"},
		{"v2.0.0", "k8s/hyperkube:v2.0.0"},
		{"latest", "k8s/hyperkube:latest"},
	} {
		c.KubernetesVersion, c.SystemImages.Kubernetes = v.version, v.image
		if _, err := Build(c); err == nil {
			t.Errorf("Build with kubernetes_version %s, image %s: no error", v.version, v.image)
		}
	}
	for _, tc := range []struct {
		name, version, image string
		old                  bool // 1.26's flags: pod-eviction-timeout, container-runtime
	}{
		{"1.26", "v1.26.15-rancher1-1", "rancher/hyperkube:v1.26.15-rancher1", true},
		{"1.26 image, 1.31 version", "v1.31.5-rancher1-1", "rancher/hyperkube:v1.26.15-rancher1", true},
		{"1.31 image, 1.26 version", "v1.26.15-rancher1-1", "rancher/hyperkube:v1.31.5-rancher1", false},
		{"an image without a tag: the version's", "v1.26.3", "registry.internal:5000/hyperkube", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, "ha")
			c.KubernetesVersion, c.SystemImages.Kubernetes = tc.version, tc.image
			c.Services.KubeController.Image, c.Services.Kubelet.Image = tc.image, tc.image
			d := build(t, c)
			cm := container(t, d, "203.0.113.11", KubeControllerManager)
			kubelet := container(t, d, "203.0.113.11", Kubelet)
			eviction, runtime := flagValues(cm.Args, "pod-eviction-timeout"), flagValues(kubelet.Args, "container-runtime")
			if tc.old && (!slices.Equal(eviction, []string{"5m0s"}) || !slices.Equal(runtime, []string{"remote"})) {
				t.Errorf("--pod-eviction-timeout = %q, --container-runtime = %q, want 1.26's 5m0s and remote", eviction, runtime)
			}
			if !tc.old && (eviction != nil || runtime != nil) {
				t.Errorf("--pod-eviction-timeout = %q, --container-runtime = %q: gone from 1.27 on", eviction, runtime)
			}
		})
	}
	// The sandbox runs images tagged v1.32.13 built locally: 1.32's flags.
	r, err := runRelease(load(t, "sandbox"))
	if err != nil || r.series != "v1.32" || r.minor != 32 {
		t.Errorf("sandbox runs %+v, %v; want v1.32", r.series, err)
	}
}

// TestRKEServiceOptions: every default flag of RKE's service options for
// 1.31 and 1.32 reaches its component as RKE passes it (an empty value
// removes the flag), unless a comment in components.go or etcd.go explains
// why rigger differs.
func TestRKEServiceOptions(t *testing.T) {
	// rigger's documented differences: etcd's cipher suites have ECDSA
	// counterparts (etcd.go), which RKE's options do not set anyway.
	for _, version := range []string{"v1.31.7-rancher1-1", "v1.32.3-rancher1-1"} {
		t.Run(version, func(t *testing.T) {
			c := parse(t, "kubernetes_version: "+version+"\nnodes: [{address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}]\n")
			d := build(t, c)
			opts, _ := rkemeta.ServiceOptions(version)
			// rigger's own constants must agree with what RKE passes.
			if opts.KubeAPI["secure-port"] != APIServerPort || opts.KubeAPI["service-account-signing-key-file"] != keyPath(CertServiceAccountToken) ||
				opts.Kubelet["volume-plugin-dir"] != KubeletDir+"/volumeplugins" {
				t.Errorf("RKE's options disagree with rigger's constants: %v", opts.KubeAPI)
			}
			for name, want := range map[string]map[string]string{
				Etcd: opts.Etcd, KubeAPIServer: opts.KubeAPI, KubeControllerManager: opts.KubeController,
				KubeScheduler: opts.Scheduler, Kubelet: opts.Kubelet, KubeProxy: opts.Kubeproxy,
			} {
				if len(want) == 0 {
					t.Errorf("%s: RKE has no options", name)
				}
				args := container(t, d, "10.0.0.1", name).Args
				for flag, value := range want {
					got := flagValues(args, flag)
					switch {
					case value == "" && got != nil:
						t.Errorf("%s --%s = %q: RKE removes a flag whose option is empty", name, flag, got)
					case value != "" && name == KubeAPIServer && flag == "enable-admission-plugins":
						if len(got) != 1 || !strings.HasPrefix(got[0], value) {
							t.Errorf("%s --%s = %q, want RKE's %q", name, flag, got, value)
						}
					case value != "" && !slices.Equal(got, []string{value}):
						t.Errorf("%s --%s = %q, want RKE's %q", name, flag, got, value)
					}
				}
			}
		})
	}
}

func TestNodeLookup(t *testing.T) {
	d := build(t, load(t, "three-role"))
	if len(d.Nodes) != 8 || d.Name != "split" {
		t.Fatalf("got %d nodes of %q", len(d.Nodes), d.Name)
	}
	for i, want := range []string{"10.10.0.11", "10.10.0.12", "10.10.0.13", "10.10.0.21", "10.10.0.22", "10.10.0.31", "10.10.0.32", "10.10.0.33"} {
		if d.Nodes[i].Address != want {
			t.Errorf("node %d is %s, want %s (cluster.yml order)", i, d.Nodes[i].Address, want)
		}
	}
	if n, ok := d.Node("10.10.0.22"); !ok || n.Hostname != "cp-2" || !n.HasRole(spec.RoleControlPlane) {
		t.Errorf("Node(10.10.0.22) = %+v, %v", n, ok)
	}
	if _, ok := d.Node("10.10.0.99"); ok {
		t.Error("Node of an unknown address found")
	}
}

// bigCluster is a cluster.yml of n nodes: three with every role, the rest workers.
func bigCluster(n int) string {
	var b strings.Builder
	b.WriteString("cluster_name: bench\nnodes:\n")
	for i := range n {
		roles := "[worker]"
		if i < 3 {
			roles = "[etcd, controlplane, worker]"
		}
		fmt.Fprintf(&b, "  - {address: 10.1.%d.%d, user: u, role: %s}\n", i/250, i%250+1, roles)
	}
	return b.String()
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{3, 50} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			c := parse(b, bigCluster(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCRIDockerd: with cri-dockerd (the default from 1.24 on, as in RKE) the
// kubelet runs rke-tools' entrypoint from the service-sidekick's volume,
// which starts cri-dockerd; without it, the kubelet binary itself.
func TestCRIDockerd(t *testing.T) {
	const yml = "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n"
	on := build(t, parse(t, yml))
	kubelet := container(t, on, "10.0.0.1", Kubelet)
	sidekick := container(t, on, "10.0.0.1", ServiceSidekick)
	if kubelet.Entrypoint[0] != RKEToolsEntrypoint || kubelet.Args[0] != Kubelet ||
		len(kubelet.VolumesFrom) != 1 || kubelet.VolumesFrom[0] != ServiceSidekick {
		t.Errorf("kubelet with cri-dockerd: entrypoint %v, args[0] %q, volumes from %v", kubelet.Entrypoint, kubelet.Args[0], kubelet.VolumesFrom)
	}
	if !sidekick.RunOnce || sidekick.RestartPolicy != RestartNo || sidekick.Image != "rancher/rke-tools:v0.1.114" {
		t.Errorf("sidekick %+v", sidekick)
	}
	n, _ := on.Node("10.0.0.1")
	if names := containerNames(n); !slices.Equal(names, []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, ServiceSidekick, Kubelet, KubeProxy, EtcdRollingSnapshots}) {
		t.Errorf("containers in start order: %v", names)
	}

	off := build(t, parse(t, yml+"enable_cri_dockerd: false\n"))
	kubelet = container(t, off, "10.0.0.1", Kubelet)
	if kubelet.Entrypoint[0] != "/usr/local/bin/kubelet" || len(kubelet.VolumesFrom) > 0 {
		t.Errorf("kubelet without cri-dockerd: entrypoint %v, volumes from %v", kubelet.Entrypoint, kubelet.VolumesFrom)
	}
	if n, _ := off.Node("10.0.0.1"); slices.Contains(containerNames(n), ServiceSidekick) {
		t.Error("a sidekick without cri-dockerd")
	}
}

func containerNames(n *Node) []string {
	var out []string
	for _, c := range n.Containers {
		out = append(out, c.Name)
	}
	return out
}

// TestNodeAddressLabel: every kubelet labels its Node with its address,
// after the labels the user gives in extra_args.
func TestNodeAddressLabel(t *testing.T) {
	d := build(t, parse(t, `nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
  - {address: "fd00::2", user: u, role: [worker], hostname_override: w2}
services:
  kubelet:
    extra_args:
      node-labels: team=a,tier=web
`))
	for node, want := range map[string]string{
		"10.0.0.1": "team=a,tier=web,rigger.io/node-address=10.0.0.1",
		"fd00::2":  "team=a,tier=web,rigger.io/node-address=fd00__2",
	} {
		if got := flagValues(container(t, d, node, Kubelet).Args, "node-labels"); len(got) != 1 || got[0] != want {
			t.Errorf("%s: --node-labels %v, want %q", node, got, want)
		}
	}
}

// TestCRIDockerdEnv: the kubelet gets cri-dockerd's settings as RKE passes
// them to rke-tools' entrypoint.
func TestCRIDockerdEnv(t *testing.T) {
	c := load(t, "extra-args")
	c.CRIDockerdStreamServerAddress, c.CRIDockerdStreamServerPort = "10.30.0.11", "10010"
	c.Services.KubeController.ClusterCIDR = "10.42.0.0/16,fd00:42::/56"
	env := container(t, build(t, c), "10.30.0.11", Kubelet).Env
	for _, want := range []string{envCRIDockerd, "CRIDOCKERD_STREAM_SERVER_ADDRESS=10.30.0.11", "CRIDOCKERD_STREAM_SERVER_PORT=10010", "RKE_KUBELET_CRIDOCKERD_DUALSTACK=true"} {
		if !slices.Contains(env, want) {
			t.Errorf("kubelet env %q lacks %s", env, want)
		}
	}
}

// TestCleanPaths: a node leaving the cluster is cleaned as RKE's
// CleanUpAll cleans it (hosts/hosts.go), prefix_path applied to the same
// paths, and of the API server's audit log too.
func TestCleanPaths(t *testing.T) {
	want := []string{"/opt/rke/etc/kubernetes", "/opt/rke/var/lib/etcd", "/opt/rke/var/log/kube-audit", "/etc/cni", "/opt/cni", "/opt/rke/var/lib/cni", "/var/run/calico"}
	if got := CleanPaths("/opt/rke"); !slices.Equal(got, want) {
		t.Errorf("CleanPaths(/opt/rke) = %q, want %q", got, want)
	}
	if got := CleanPaths(""); !slices.Contains(got, "/etc/kubernetes") || !slices.Contains(got, "/var/lib/cni") {
		t.Errorf("CleanPaths() = %q", got)
	}
}

// TestKubeletDockerConfig: with private registries, the kubelet gets the
// Docker config with their credentials, and where to write it (the
// kubelet's root directory under prefix_path), as RKE gives them to
// rke-tools' entrypoint; without, neither.
func TestKubeletDockerConfig(t *testing.T) {
	const yml = "nodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n"
	env := container(t, build(t, parse(t, yml)), "10.0.0.1", Kubelet).Env
	for _, e := range env {
		if strings.HasPrefix(e, EnvKubeletDockerConfig+"=") || strings.HasPrefix(e, EnvKubeletDockerFile+"=") {
			t.Errorf("kubelet without private registries has %s", e)
		}
	}
	c := parse(t, yml+"private_registries: [{url: 'registry.internal:5000', user: ci, password: s3cret}]\n")
	c.PrefixPath = "/opt/rke" // not in cluster.yml yet
	env = container(t, build(t, c), "10.0.0.1", Kubelet).Env
	want := []string{
		EnvKubeletDockerConfig + "=" + base64.StdEncoding.EncodeToString([]byte(`{"auths":{"registry.internal:5000":{"auth":"Y2k6czNjcmV0"}}}`)),
		EnvKubeletDockerFile + "=/opt/rke/var/lib/kubelet/config.json",
	}
	for _, w := range want {
		if !slices.Contains(env, w) {
			t.Errorf("kubelet env %q lacks %s", env, w)
		}
	}
}
