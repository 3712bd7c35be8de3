package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// baseYML is a cluster of four nodes with every mix of roles the ordering
// cares about: two control-plane nodes, three etcd members, two workers
// (one of them also etcd) that run nginx-proxy.
const baseYML = `cluster_name: test
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane]}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.3, user: u, role: [etcd, worker]}
  - {address: 10.0.0.4, user: u, role: [worker]}
`

var observedAt = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// parse returns the defaulted, valid cluster of a cluster.yml.
func parse(t testing.TB, yml string) *spec.Cluster {
	t.Helper()
	c, diags := spec.Parse([]byte(yml), "cluster.yml")
	if err := diags.Err(); err != nil {
		t.Fatalf("parse cluster.yml: %v\n%s", err, yml)
	}
	return c
}

// build returns the desired state of yml after change (which may be nil).
func build(t testing.TB, yml string, change func(*spec.Cluster)) *desired.Cluster {
	t.Helper()
	c := parse(t, yml)
	if change != nil {
		change(c)
	}
	d, err := desired.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// asApplied is what observe would see once d has been applied: every node
// reachable, every desired container present and running, with the labels
// rigger set.
func asApplied(d *desired.Cluster) *observe.Cluster {
	o := &observe.Cluster{At: observedAt, Nodes: map[string]*observe.Node{}}
	for _, n := range d.Nodes {
		on := &observe.Node{Address: n.Address, Reachable: true, Containers: map[string]observe.Container{}}
		for _, c := range n.Containers {
			on.Containers[c.Name] = observe.Container{
				ID:        containerID(n.Address, c.Name),
				Name:      c.Name,
				Image:     c.Image,
				State:     "running",
				Component: c.Labels[desired.LabelComponent],
				SpecHash:  c.Labels[desired.LabelSpecHash],
				Spec:      c.Labels[desired.LabelSpec],
			}
		}
		o.Nodes[n.Address] = on
	}
	return o
}

// containerID is a stable, made-up Docker ID for a container of a node.
func containerID(node, name string) string {
	sum := sha256.Sum256([]byte(node + "/" + name))
	return hex.EncodeToString(sum[:])[:12]
}

// line is a step as the tests compare it.
func line(s Step) string {
	return fmt.Sprintf("%s %s %s %s (%s)", s.Phase, s.Node, s.Action, s.Component, s.Reason)
}

func lines(p *Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, line(s))
	}
	return out
}

func unreachable(node, err string) *observe.Node {
	return &observe.Node{Address: node, Err: errors.New(err), Error: err}
}

func TestCompute(t *testing.T) {
	base := build(t, baseYML, nil)
	apiImage := base.Nodes[0].Containers[1].Image
	const refused = "dial tcp 10.0.0.2:22: connect: connection refused"
	tests := []struct {
		name            string
		change          func(*spec.Cluster)    // the cluster.yml now, from baseYML
		observe         func(*observe.Cluster) // the nodes now, from baseYML as applied
		want            []string               // lines of the steps
		wantUnreachable []Unreachable
		wantRemoved     []string
	}{
		{
			name: "fresh cluster",
			observe: func(o *observe.Cluster) {
				for _, n := range o.Nodes {
					n.Containers = nil
				}
			},
			want: []string{
				"etcd 10.0.0.1 create etcd (container missing)",
				"etcd 10.0.0.2 create etcd (container missing)",
				"etcd 10.0.0.3 create etcd (container missing)",
				"controlplane 10.0.0.1 create kube-apiserver (container missing)",
				"controlplane 10.0.0.1 create kube-controller-manager (container missing)",
				"controlplane 10.0.0.1 create kube-scheduler (container missing)",
				"controlplane 10.0.0.2 create kube-apiserver (container missing)",
				"controlplane 10.0.0.2 create kube-controller-manager (container missing)",
				"controlplane 10.0.0.2 create kube-scheduler (container missing)",
				"worker 10.0.0.1 create service-sidekick (container missing)",
				"worker 10.0.0.1 create kubelet (container missing)",
				"worker 10.0.0.1 create kube-proxy (container missing)",
				"worker 10.0.0.1 create etcd-rolling-snapshots (container missing)",
				"worker 10.0.0.2 create service-sidekick (container missing)",
				"worker 10.0.0.2 create kubelet (container missing)",
				"worker 10.0.0.2 create kube-proxy (container missing)",
				"worker 10.0.0.2 create etcd-rolling-snapshots (container missing)",
				"worker 10.0.0.3 create nginx-proxy (container missing)",
				"worker 10.0.0.3 create service-sidekick (container missing)",
				"worker 10.0.0.3 create kubelet (container missing)",
				"worker 10.0.0.3 create kube-proxy (container missing)",
				"worker 10.0.0.3 create etcd-rolling-snapshots (container missing)",
				"worker 10.0.0.4 create nginx-proxy (container missing)",
				"worker 10.0.0.4 create service-sidekick (container missing)",
				"worker 10.0.0.4 create kubelet (container missing)",
				"worker 10.0.0.4 create kube-proxy (container missing)",
			},
		},
		{
			name: "as applied",
		},
		{
			name: "the sidekick ran and exited, as it should",
			observe: func(o *observe.Cluster) {
				for _, n := range o.Nodes {
					c := n.Containers[desired.ServiceSidekick]
					c.State = "exited"
					n.Containers[desired.ServiceSidekick] = c
				}
			},
		},
		{
			name:   "kube-api extra_args",
			change: func(c *spec.Cluster) { c.Services.KubeAPI.ExtraArgs = map[string]string{"v": "4"} },
			want: []string{
				"controlplane 10.0.0.1 replace kube-apiserver (args changed: +--v=4)",
				"controlplane 10.0.0.2 replace kube-apiserver (args changed: +--v=4)",
			},
		},
		{
			name:   "kube-controller extra_args overrides a default",
			change: func(c *spec.Cluster) { c.Services.KubeController.ExtraArgs = map[string]string{"v": "4"} },
			want: []string{
				"controlplane 10.0.0.1 replace kube-controller-manager (args changed: +--v=4, ---v=2)",
				"controlplane 10.0.0.2 replace kube-controller-manager (args changed: +--v=4, ---v=2)",
			},
		},
		{
			name:   "kube-api image",
			change: func(c *spec.Cluster) { c.Services.KubeAPI.Image = "rancher/hyperkube:v1.31.6-rancher1" },
			want: []string{
				"controlplane 10.0.0.1 replace kube-apiserver (image changed " + apiImage + " → rancher/hyperkube:v1.31.6-rancher1)",
				"controlplane 10.0.0.2 replace kube-apiserver (image changed " + apiImage + " → rancher/hyperkube:v1.31.6-rancher1)",
			},
		},
		{
			name: "kubelet extra_env, extra_binds and image",
			change: func(c *spec.Cluster) {
				c.Services.Kubelet.ExtraEnv = []string{"HTTP_PROXY=http://proxy:3128"}
				c.Services.Kubelet.ExtraBinds = []string{"/data:/data"}
			},
			observe: func(o *observe.Cluster) {
				for _, n := range o.Nodes {
					delete(n.Containers, desired.Kubelet)
				}
				o.Nodes["10.0.0.4"].Containers[desired.Kubelet] = observe.Container{Name: desired.Kubelet, State: "running", Spec: stored(t, base, "10.0.0.4", desired.Kubelet), SpecHash: "0123456789abcdef"}
			},
			want: []string{
				"worker 10.0.0.1 create kubelet (container missing)",
				"worker 10.0.0.2 create kubelet (container missing)",
				"worker 10.0.0.3 create kubelet (container missing)",
				"worker 10.0.0.4 replace kubelet (env changed: +HTTP_PROXY=http://proxy:3128; binds changed: +/data:/data)",
			},
		},
		{
			name: "privileged changed",
			observe: func(o *observe.Cluster) {
				c := o.Nodes["10.0.0.3"].Containers[desired.KubeProxy]
				c.Spec = strings.Replace(c.Spec, `"privileged":true`, `"privileged":false`, 1)
				c.SpecHash = "0123456789abcdef"
				o.Nodes["10.0.0.3"].Containers[desired.KubeProxy] = c
			},
			want: []string{"worker 10.0.0.3 replace kube-proxy (privileged changed false → true)"},
		},
		{
			name: "no spec label",
			observe: func(o *observe.Cluster) {
				c := o.Nodes["10.0.0.1"].Containers[desired.Etcd]
				c.Spec, c.SpecHash = "", ""
				o.Nodes["10.0.0.1"].Containers[desired.Etcd] = c
			},
			want: []string{"etcd 10.0.0.1 replace etcd (spec hash differs)"},
		},
		{
			name: "container removed by hand",
			observe: func(o *observe.Cluster) {
				delete(o.Nodes["10.0.0.4"].Containers, desired.Kubelet)
			},
			want: []string{"worker 10.0.0.4 create kubelet (container missing)"},
		},
		{
			name: "container exited",
			observe: func(o *observe.Cluster) {
				setState(o, "10.0.0.3", desired.KubeProxy, "exited")
				setState(o, "10.0.0.2", desired.Etcd, "dead")
				setContainer(o, "10.0.0.4", desired.Kubelet, func(c *observe.Container) { c.State, c.ExitCode = "exited", ptr(255) })
			},
			want: []string{
				"etcd 10.0.0.2 restart etcd (container dead)",
				"worker 10.0.0.3 restart kube-proxy (container exited)",
				"worker 10.0.0.4 restart kubelet (container exited with code 255)",
			},
		},
		{
			// Docker's restart policy starts it again and again: not in
			// sync. Made anew from its spec; etcd restarted (its data
			// stays on the node, and a replacement would first take a
			// snapshot).
			name: "container restarting",
			observe: func(o *observe.Cluster) {
				setContainer(o, "10.0.0.1", desired.KubeScheduler, func(c *observe.Container) {
					c.State, c.ExitCode, c.RestartCount = "restarting", ptr(1), 14
				})
				setContainer(o, "10.0.0.3", desired.Etcd, func(c *observe.Container) {
					c.State, c.ExitCode, c.RestartCount = "restarting", ptr(2), 1
				})
				// Gone before it was inspected: what the list said.
				setContainer(o, "10.0.0.4", desired.KubeProxy, func(c *observe.Container) { c.State, c.ExitCode = "restarting", ptr(0) })
				setState(o, "10.0.0.2", desired.Kubelet, "restarting") // an engine whose list shows no exit code
			},
			want: []string{
				"etcd 10.0.0.3 restart etcd (container restarting (crash loop): exited 2, restarted once)",
				"controlplane 10.0.0.1 replace kube-scheduler (container restarting (crash loop): exited 1, restarted 14 times)",
				"worker 10.0.0.2 replace kubelet (container restarting (crash loop))",
				"worker 10.0.0.4 replace kube-proxy (container restarting (crash loop): exited 0)",
			},
		},
		{
			// A spec change says more, and replaces it all the same.
			name:   "container restarting with another spec",
			change: func(c *spec.Cluster) { c.Services.Scheduler.ExtraArgs = map[string]string{"v": "3"} },
			observe: func(o *observe.Cluster) {
				for _, n := range []string{"10.0.0.1", "10.0.0.2"} {
					setContainer(o, n, desired.KubeScheduler, func(c *observe.Container) {
						c.State, c.ExitCode, c.RestartCount = "restarting", ptr(1), 14
					})
				}
			},
			want: []string{
				"controlplane 10.0.0.1 replace kube-scheduler (args changed: +--v=3, ---v=2)",
				"controlplane 10.0.0.2 replace kube-scheduler (args changed: +--v=3, ---v=2)",
			},
		},
		{
			name:   "node unreachable",
			change: func(c *spec.Cluster) { c.Services.Kubeproxy.ExtraArgs = map[string]string{"v": "3"} },
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.2"] = unreachable("10.0.0.2", refused)
			},
			want: []string{
				"worker 10.0.0.1 replace kube-proxy (args changed: +--v=3, ---v=2)",
				"worker 10.0.0.3 replace kube-proxy (args changed: +--v=3, ---v=2)",
				"worker 10.0.0.4 replace kube-proxy (args changed: +--v=3, ---v=2)",
			},
			wantUnreachable: []Unreachable{{Node: "10.0.0.2", Error: refused}},
		},
		{
			name: "node not observed",
			observe: func(o *observe.Cluster) {
				delete(o.Nodes, "10.0.0.4")
			},
			wantUnreachable: []Unreachable{{Node: "10.0.0.4", Error: "node was not observed"}},
		},
		{
			name:   "worker removed from cluster.yml",
			change: func(c *spec.Cluster) { c.Nodes = c.Nodes[:3] },
			want: []string{
				"removed-nodes 10.0.0.4 remove nginx-proxy (node removed from cluster.yml)",
				"removed-nodes 10.0.0.4 remove service-sidekick (node removed from cluster.yml)",
				"removed-nodes 10.0.0.4 remove kubelet (node removed from cluster.yml)",
				"removed-nodes 10.0.0.4 remove kube-proxy (node removed from cluster.yml)",
			},
			wantRemoved: []string{"10.0.0.4"},
		},
		{
			name:   "removed node unreachable",
			change: func(c *spec.Cluster) { c.Nodes = c.Nodes[:3] },
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.4"] = unreachable("10.0.0.4", "ssh: handshake failed: EOF")
			},
			wantUnreachable: []Unreachable{{Node: "10.0.0.4", Error: "ssh: handshake failed: EOF", Removed: true}},
		},
		{
			name:   "role controlplane removed",
			change: func(c *spec.Cluster) { c.Nodes[1].Role = []string{spec.RoleEtcd, spec.RoleWorker} },
			want: []string{
				"controlplane 10.0.0.2 remove kube-apiserver (not desired on this node: role controlplane removed)",
				"controlplane 10.0.0.2 remove kube-controller-manager (not desired on this node: role controlplane removed)",
				"controlplane 10.0.0.2 remove kube-scheduler (not desired on this node: role controlplane removed)",
				"worker 10.0.0.2 create nginx-proxy (container missing)",
				"worker 10.0.0.3 replace nginx-proxy (env changed: +CP_HOSTS=10.0.0.1, -CP_HOSTS=10.0.0.1,10.0.0.2)",
				"worker 10.0.0.4 replace nginx-proxy (env changed: +CP_HOSTS=10.0.0.1, -CP_HOSTS=10.0.0.1,10.0.0.2)",
			},
		},
		{
			name:   "role etcd removed",
			change: func(c *spec.Cluster) { c.Nodes[2].Role = []string{spec.RoleWorker} },
			want: []string{
				"etcd 10.0.0.3 remove etcd (not desired on this node: role etcd removed)",
				"controlplane 10.0.0.1 replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379, ---etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379)",
				"controlplane 10.0.0.2 replace kube-apiserver (args changed: +--etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379, ---etcd-servers=https://10.0.0.2:2379,https://10.0.0.1:2379,https://10.0.0.3:2379)",
				"worker 10.0.0.3 remove etcd-rolling-snapshots (not desired on this node)",
			},
		},
		{
			name: "role controlplane added",
			change: func(c *spec.Cluster) {
				c.Nodes[2].Role = []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
			},
			want: []string{
				"controlplane 10.0.0.3 create kube-apiserver (container missing)",
				"controlplane 10.0.0.3 create kube-controller-manager (container missing)",
				"controlplane 10.0.0.3 create kube-scheduler (container missing)",
				"worker 10.0.0.3 remove nginx-proxy (not desired on this node: role controlplane added, the API server is local)",
				"worker 10.0.0.4 replace nginx-proxy (env changed: +CP_HOSTS=10.0.0.1,10.0.0.2,10.0.0.3, -CP_HOSTS=10.0.0.1,10.0.0.2)",
			},
		},
		{
			name: "nothing observed",
			observe: func(o *observe.Cluster) {
				clear(o.Nodes)
			},
			wantUnreachable: []Unreachable{
				{Node: "10.0.0.1", Error: "node was not observed"},
				{Node: "10.0.0.2", Error: "node was not observed"},
				{Node: "10.0.0.3", Error: "node was not observed"},
				{Node: "10.0.0.4", Error: "node was not observed"},
			},
		},
		{
			name: "unknown rigger container on a node",
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.1"].Containers["rke-log-linker"] = observe.Container{Name: "rke-log-linker", State: "exited"}
			},
			want: []string{"worker 10.0.0.1 remove rke-log-linker (not desired on this node)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := build(t, baseYML, tt.change)
			o := asApplied(base)
			if tt.observe != nil {
				tt.observe(o)
			}
			p := Compute(d, o)
			if diff := cmp.Diff(tt.want, lines(p)); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantUnreachable, p.Unreachable); diff != "" {
				t.Errorf("unreachable (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRemoved, p.RemovedNodes); diff != "" {
				t.Errorf("removed nodes (-want +got):\n%s", diff)
			}
			if !p.ObservedAt.Equal(observedAt) {
				t.Errorf("ObservedAt = %v, want %v", p.ObservedAt, observedAt)
			}
			if p.Empty() != (len(tt.want) == 0) {
				t.Errorf("Empty() = %v with %d steps", p.Empty(), len(p.Steps))
			}
			checkPointers(t, p)
		})
	}
}

// checkPointers checks that each action has the Before and After it needs
// and that they are the step's container.
func checkPointers(t *testing.T, p *Plan) {
	t.Helper()
	for _, s := range p.Steps {
		if wantBefore := s.Action != Create; (s.Before != nil) != wantBefore {
			t.Errorf("%s: Before = %v, want set: %v", line(s), s.Before, wantBefore)
		}
		if wantAfter := s.Action != Remove; (s.After != nil) != wantAfter {
			t.Errorf("%s: After = %v, want set: %v", line(s), s.After, wantAfter)
		}
		if s.Before != nil && s.Before.Name != s.Component {
			t.Errorf("%s: Before is %s", line(s), s.Before.Name)
		}
		if s.After != nil && s.After.Name != s.Component {
			t.Errorf("%s: After is %s", line(s), s.After.Name)
		}
	}
}

// stored is the spec label of a container of d.
func stored(t testing.TB, d *desired.Cluster, node, name string) string {
	t.Helper()
	n, ok := d.Node(node)
	if !ok {
		t.Fatalf("no node %s", node)
	}
	c, ok := n.Container(name)
	if !ok {
		t.Fatalf("no container %s on %s", name, node)
	}
	return c.SpecJSON()
}

func setState(o *observe.Cluster, node, name, state string) {
	c := o.Nodes[node].Containers[name]
	c.State = state
	o.Nodes[node].Containers[name] = c
}

// setContainer changes the observed container name of node with f.
func setContainer(o *observe.Cluster, node, name string, f func(*observe.Container)) {
	c := o.Nodes[node].Containers[name]
	f(&c)
	o.Nodes[node].Containers[name] = c
}

func ptr(i int) *int { return &i }

// TestAfterPointsIntoDesired: After is the desired container itself, not a
// copy, so the executor creates exactly what was planned.
func TestAfterPointsIntoDesired(t *testing.T) {
	d := build(t, baseYML, nil)
	o := asApplied(d)
	delete(o.Nodes["10.0.0.1"].Containers, desired.Etcd)
	p := Compute(d, o)
	if len(p.Steps) != 1 || p.Steps[0].After != &d.Nodes[0].Containers[0] {
		t.Fatalf("want one step whose After is &d.Nodes[0].Containers[0], got %v", lines(p))
	}
}

// TestDeterministic computes plans with many map entries (removed nodes,
// extra containers) again and again: Go randomises map order, the plan
// must not change.
func TestDeterministic(t *testing.T) {
	d := build(t, baseYML, func(c *spec.Cluster) {
		c.Nodes = c.Nodes[:2]
		c.Services.KubeAPI.ExtraArgs = map[string]string{"v": "4", "audit-log-maxage": "3"}
		c.Services.Kubelet.ExtraEnv = []string{"A=1", "B=2", "C=3"}
	})
	o := asApplied(build(t, baseYML, nil))
	for i := range 5 {
		addr := fmt.Sprintf("10.0.1.%d", i)
		o.Nodes[addr] = &observe.Node{Address: addr, Reachable: i%2 == 0, Error: "down", Containers: asApplied(build(t, baseYML, nil)).Nodes["10.0.0.2"].Containers}
	}
	for _, name := range []string{"x", "y", "z", "a"} {
		o.Nodes["10.0.0.1"].Containers[name] = observe.Container{Name: name, State: "running"}
	}
	first := Compute(d, o)
	if len(first.Steps) < 20 {
		t.Fatalf("only %d steps: the test no longer exercises ordering", len(first.Steps))
	}
	for range 20 {
		if diff := cmp.Diff(first, Compute(d, o)); diff != "" {
			t.Fatalf("two Computes of the same input differ (-first +again):\n%s", diff)
		}
	}
}

// TestSecretsRedacted: the value of a secret env variable or flag never
// shows in a reason, in Render's output or in the JSON of a plan, while
// other values do.
func TestSecretsRedacted(t *testing.T) {
	secrets := []string{"s3cr3t-old", "s3cr3t-new", "tok-abc", "hunter2", "pr0xy-pass"}
	before := build(t, baseYML, func(c *spec.Cluster) {
		c.Services.KubeAPI.ExtraEnv = []string{"AWS_SECRET_ACCESS_KEY=s3cr3t-old", "DB_PASSWORD=hunter2"}
	})
	after := build(t, baseYML, func(c *spec.Cluster) {
		c.Services.KubeAPI.ExtraEnv = []string{"AWS_SECRET_ACCESS_KEY=s3cr3t-new", "HTTP_PROXY=http://proxy:3128", "HTTPS_PROXY=http://u:pr0xy-pass@proxy:3128"}
		c.Services.KubeAPI.ExtraArgs = map[string]string{"oidc-token": "tok-abc"}
	})
	p := Compute(after, asApplied(before))
	want := "args changed: +--oidc-token=(redacted); env changed: +AWS_SECRET_ACCESS_KEY=(redacted), +HTTP_PROXY=http://proxy:3128, " +
		"+HTTPS_PROXY=http://u:(redacted)@proxy:3128, -AWS_SECRET_ACCESS_KEY=(redacted), -DB_PASSWORD=(redacted)"
	if len(p.Steps) != 2 {
		t.Fatalf("want the two API servers replaced, got %v", lines(p))
	}
	for _, s := range p.Steps {
		if s.Reason != want {
			t.Errorf("%s %s: reason\n%s\nwant\n%s", s.Node, s.Component, s.Reason, want)
		}
	}
	var text strings.Builder
	p.Render(&text)
	js := mustJSON(t, p)
	for _, out := range []struct{ name, s string }{{"reason", p.Steps[0].Reason}, {"Render", text.String()}, {"JSON", js}} {
		for _, secret := range secrets {
			if strings.Contains(out.s, secret) {
				t.Errorf("%s shows the secret %q:\n%s", out.name, secret, out.s)
			}
		}
	}
	if !strings.Contains(js, `"reason": "args changed: +--oidc-token=(redacted)`) {
		t.Errorf("JSON lacks the reason:\n%s", js)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ name, key, in, want string }{
		{"plain env", "env", "HTTP_PROXY=http://p:3128", "HTTP_PROXY=http://p:3128"},
		{"key env", "env", "ETCDCTL_KEY=/etc/kubernetes/ssl/k.pem", "ETCDCTL_KEY=(redacted)"},
		{"lower case secret env", "env", "my_secret=x", "my_secret=(redacted)"},
		{"token env", "env", "GITHUB_TOKEN=ghp_x", "GITHUB_TOKEN=(redacted)"},
		{"password env", "env", "PGPASSWORD=x", "PGPASSWORD=(redacted)"},
		{"kubelet's Docker config", "env", "RKE_KUBELET_DOCKER_CONFIG=eyJhdXRocyI6e319", "RKE_KUBELET_DOCKER_CONFIG=(redacted)"},
		{"env without value", "env", "SECRET", "SECRET"},
		{"proxy env with a password", "env", "HTTPS_PROXY=http://u:p@ss@proxy:3128", "HTTPS_PROXY=http://u:(redacted)@proxy:3128"},
		{"env with a token as user", "env", "REPO=https://ghp_x@github.com/a/b", "REPO=https://(redacted)@github.com/a/b"},
		{"proxy list", "env", "PROXIES=http://a:3128,https://u:p@b", "PROXIES=http://a:3128,https://u:(redacted)@b"},
		{"token flag", "args", "--token=abc", "--token=(redacted)"},
		{"URL flag", "args", "--proxy-url=https://user:pw@proxy", "--proxy-url=https://user:(redacted)@proxy"},
		{"URL entrypoint", "entrypoint", "https://user:pw@proxy", "https://user:(redacted)@proxy"},
		{"URL bind", "binds", "/a:/b", "/a:/b"},
		{"key file flag", "args", "--tls-private-key-file=/etc/kubernetes/ssl/a-key.pem", "--tls-private-key-file=/etc/kubernetes/ssl/a-key.pem"},
		{"plain flag", "args", "--v=4", "--v=4"},
		{"bind", "binds", "/secret:/secret", "/secret:/secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact(tt.key, tt.in); got != tt.want {
				t.Errorf("redact(%q, %q) = %q, want %q", tt.key, tt.in, got, tt.want)
			}
		})
	}
}

func TestSpecReason(t *testing.T) {
	spec := func(fields string) string {
		return `{"v":"rigger.io/spec-hash/v1","image":"a:1","args":["--a=1"],"env":[],"privileged":false,"user":""` + fields + `}`
	}
	tests := []struct{ name, before, after, want string }{
		{"no label", "", spec(""), "spec hash differs"},
		{"unreadable label", "{", spec(""), "spec hash differs (the container's spec label is not readable)"},
		{"same spec, other hash", spec(""), spec(""), "spec hash differs"},
		{"reordered", `{"args":["--a=1","--b=2"]}`, `{"args":["--b=2","--a=1"]}`, "args reordered"},
		{"repeated entry added", `{"args":["--u","a"]}`, `{"args":["--u","a","--u","b"]}`, "args changed: +--u, +b"},
		{"repeated entry removed", `{"args":["a","a","b"]}`, `{"args":["a","b"]}`, "args changed: -a"},
		{"list appears", `{}`, `{"binds":["/a:/a"]}`, "binds changed: +/a:/a"},
		{"new field", spec(""), spec(`,"ulimits":"nofile=1"`), "ulimits changed (none) → nofile=1"},
		{"user", spec(""), spec(`,"user":"1000:1000"`), `user changed "" → 1000:1000`},
		{"URL's password only", spec(`,"proxy":"http://u:a@p"`), spec(`,"proxy":"http://u:b@p"`), "proxy changed"},
		{"URL", spec(`,"proxy":"http://p"`), spec(`,"proxy":"http://u:b@p"`), "proxy changed http://p → http://u:(redacted)@p"},
		{"format", `{"v":"rigger.io/spec-hash/v0"}`, `{"v":"rigger.io/spec-hash/v1"}`, "spec format changed rigger.io/spec-hash/v0 → rigger.io/spec-hash/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := specReason(tt.before, tt.after); got != tt.want {
				t.Errorf("specReason = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestFiles checks the files step and the restarts of containers that
// read a file that changed.
func TestFiles(t *testing.T) {
	const (
		caPath   = "/etc/kubernetes/ssl/kube-ca.pem"
		apiCert  = "/etc/kubernetes/ssl/kube-apiserver.pem"
		newFile  = "/etc/kubernetes/ssl/new.pem"
		onlyNode = "10.0.0.4"
	)
	withFiles := func(d *desired.Cluster, files map[string][]byte) {
		for i := range d.Nodes {
			d.Nodes[i].Files = files
		}
	}
	observed := func(d *desired.Cluster, files map[string][]byte) *observe.Cluster {
		o := asApplied(d)
		for _, n := range o.Nodes {
			n.FilesRead = true
			n.Files = map[string]string{}
			for p, b := range files {
				n.Files[p] = observe.FileHash(b)
			}
		}
		return o
	}
	before := map[string][]byte{caPath: []byte("ca"), apiCert: []byte("api")}
	for _, tc := range []struct {
		name    string
		want    map[string][]byte
		notRead bool
		reload  map[string]string
		steps   []string
	}{
		{name: "same files", want: before},
		{
			name:   "rotation under way, files already written: their readers restart",
			want:   before,
			reload: map[string]string{apiCert: ReasonRotation},
			steps:  []string{"controlplane 10.0.0.4 restart kube-apiserver (reads rotated certificates)"},
		},
		{
			name:   "rotation under way, files to write",
			want:   map[string][]byte{caPath: []byte("ca"), apiCert: []byte("api v2")},
			reload: map[string]string{apiCert: ReasonRotation},
			steps: []string{
				"files 10.0.0.4 write-files files (changed: kube-apiserver.pem)",
				"controlplane 10.0.0.4 restart kube-apiserver (reads changed files)",
			},
		},
		{
			name: "certificate changed",
			want: map[string][]byte{caPath: []byte("ca"), apiCert: []byte("api v2")},
			steps: []string{
				"files 10.0.0.4 write-files files (changed: kube-apiserver.pem)",
				"controlplane 10.0.0.4 restart kube-apiserver (reads changed files)",
			},
		},
		{
			name: "new file only",
			want: map[string][]byte{caPath: []byte("ca"), apiCert: []byte("api"), newFile: []byte("new")},
			steps: []string{
				"files 10.0.0.4 write-files files (missing: new.pem)",
			},
		},
		{
			name:    "files not read",
			want:    before,
			notRead: true,
			steps: []string{
				"files 10.0.0.4 write-files files (files not read from the node: writing all)",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := build(t, "cluster_name: test\nnodes:\n  - {address: "+onlyNode+", user: u, role: [etcd, controlplane, worker]}\n", nil)
			o := observed(d, before)
			if tc.notRead {
				o.Nodes[onlyNode].FilesRead, o.Nodes[onlyNode].Files = false, nil
			}
			withFiles(d, tc.want)
			for i := range d.Nodes {
				d.Nodes[i].Reload = tc.reload
			}
			p := Compute(d, o)
			if diff := cmp.Diff(tc.steps, lines(p)); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			for _, s := range p.Steps {
				if s.Action == WriteFiles && len(s.Files) == 0 {
					t.Errorf("write-files step without files: %+v", s)
				}
			}
		})
	}
}

// TestEtcdMembership: the membership changes of a running etcd cluster
// sit in the etcd phase in a safe order.
func TestEtcdMembership(t *testing.T) {
	const grown = baseYML + "  - {address: 10.0.0.5, user: u, role: [etcd], hostname_override: n5}\n"
	d := build(t, grown, nil)
	o := asApplied(build(t, baseYML, nil))
	o.Nodes["10.0.0.5"] = &observe.Node{Address: "10.0.0.5", Reachable: true}
	member := func(id uint64, addr string, healthy bool) etcdmember.Member {
		m := etcdmember.Member{ID: id, Name: "etcd-" + addr, PeerURLs: []string{"https://" + addr + ":2380"}, Healthy: healthy}
		if !healthy {
			m.Error = "connection refused"
		}
		return m
	}
	o.Etcd = &observe.Etcd{Members: []etcdmember.Member{
		member(1, "10.0.0.1", true), member(2, "10.0.0.2", true), member(3, "10.0.0.3", true), member(9, "10.0.0.9", false),
	}}
	var got []string
	for _, s := range Compute(d, o).Steps {
		if s.Phase == PhaseEtcd {
			got = append(got, line(s))
		}
	}
	want := []string{
		"etcd 10.0.0.9 remove-member etcd-member (member etcd-10.0.0.9 https://10.0.0.9:2380 is of no etcd node of cluster.yml (unhealthy: connection refused))",
		"etcd 10.0.0.5 add-member etcd-member (new etcd node: joins as a learner, votes once it has caught up)",
		"etcd 10.0.0.5 create etcd (container missing)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("etcd phase (-want +got):\n%s", diff)
	}
}

// TestEtcdLearnerResumed: a member an apply added as a learner and did not
// promote (it was killed) is added again, which resumes it: before its
// container's creation when that is missing, alone when it runs (the
// executor then promotes it).
func TestEtcdLearnerResumed(t *testing.T) {
	for _, running := range []bool{false, true} {
		d := build(t, baseYML, nil)
		o := asApplied(d)
		var members []etcdmember.Member
		for i, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
			members = append(members, etcdmember.Member{ID: uint64(i + 1), Name: "etcd-" + addr, PeerURLs: []string{"https://" + addr + ":2380"}, Healthy: true})
		}
		members[2].IsLearner, members[2].Healthy = true, false
		o.Etcd = &observe.Etcd{Members: members}
		want := []string{"etcd 10.0.0.3 add-member etcd-member (added as a learner by an apply that stopped before it voted: joins, votes once it has caught up)"}
		if !running {
			delete(o.Nodes["10.0.0.3"].Containers, desired.Etcd)
			want = append(want, "etcd 10.0.0.3 create etcd (container missing)")
		}
		var got []string
		for _, s := range Compute(d, o).Steps {
			if s.Phase == PhaseEtcd {
				got = append(got, line(s))
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("container running %v: etcd phase (-want +got):\n%s", running, diff)
		}
	}
}
