package plan

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/golden"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// checkGolden compares got with testdata/<name>.golden (golden.Check).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name+".golden"), []byte(got))
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestRender(t *testing.T) {
	base := build(t, baseYML, nil)
	tests := []struct {
		name    string
		change  func(*spec.Cluster)
		observe func(*observe.Cluster)
	}{
		{name: "no-changes"},
		{
			name: "fresh",
			observe: func(o *observe.Cluster) {
				for _, n := range o.Nodes {
					n.Containers = nil
				}
			},
		},
		{
			// One of each action, an unreachable node of cluster.yml and an
			// unreachable removed node.
			name: "mixed",
			change: func(c *spec.Cluster) {
				c.Nodes = c.Nodes[:3]
				c.Services.KubeAPI.ExtraArgs = map[string]string{"v": "4"}
			},
			observe: func(o *observe.Cluster) {
				delete(o.Nodes["10.0.0.1"].Containers, desired.Etcd)
				setState(o, "10.0.0.3", desired.Kubelet, "exited")
				o.Nodes["10.0.0.2"] = unreachable("10.0.0.2", "dial tcp 10.0.0.2:22: i/o timeout")
				o.Nodes["10.0.0.9"] = unreachable("10.0.0.9", "ssh: handshake failed:\nEOF")
				removed := asApplied(build(t, baseYML, nil)).Nodes["10.0.0.4"]
				removed.Address = "10.0.0.8"
				o.Nodes["10.0.0.8"] = removed
			},
		},
		{
			// Started again since the last apply: Docker restarted the
			// scheduler, the engine restarted kube-proxy; a restarting
			// kubelet is a crash loop, replaced.
			name: "restarted",
			observe: func(o *observe.Cluster) {
				for node, c := range map[string]struct {
					name     string
					restarts int
					state    string
				}{"10.0.0.1": {desired.KubeScheduler, 3, "running"}, "10.0.0.4": {desired.KubeProxy, 0, "running"}, "10.0.0.3": {desired.Kubelet, 5, "restarting"}} {
					oc := o.Nodes[node].Containers[c.name]
					oc.StartedSince, oc.RestartCount, oc.State = true, c.restarts, c.state
					o.Nodes[node].Containers[c.name] = oc
				}
			},
		},
		{
			name: "unreachable-only",
			observe: func(o *observe.Cluster) {
				o.Nodes["10.0.0.4"] = unreachable("10.0.0.4", "connection refused")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := asApplied(base)
			if tt.observe != nil {
				tt.observe(o)
			}
			p := Compute(build(t, baseYML, tt.change), o)
			var b strings.Builder
			p.Render(&b)
			checkGolden(t, tt.name, b.String())
			if tt.name == "mixed" {
				checkGolden(t, tt.name+".json", mustJSON(t, p))
			}
		})
	}
}

// TestJSONRoundTrip: the JSON of a plan decodes into the same steps (Before
// and After only summarised).
func TestJSONRoundTrip(t *testing.T) {
	d := build(t, baseYML, func(c *spec.Cluster) { c.Services.Kubelet.Image = "k:new" })
	p := Compute(d, asApplied(build(t, baseYML, nil)))
	var got struct {
		Steps []struct {
			Node, Component, Action, Phase, Reason string
			Before                                 struct {
				ID, Image, State string
				SpecHash         string `json:"spec_hash"`
			}
			After struct {
				Image    string
				SpecHash string `json:"spec_hash"`
			}
		}
		ObservedAt string `json:"observed_at"`
	}
	if err := json.Unmarshal([]byte(mustJSON(t, p)), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != 4 || got.ObservedAt != "2026-11-22T00:00:00Z" {
		t.Fatalf("decoded %+v", got)
	}
	for i, s := range got.Steps {
		want := p.Steps[i]
		if s.Node != want.Node || s.Component != desired.Kubelet || s.Action != string(Replace) || s.Phase != string(PhaseWorker) ||
			s.Reason != want.Reason || s.Before.SpecHash != want.Before.SpecHash || s.Before.ID == "" || s.After.Image != "k:new" || s.After.SpecHash != want.After.Hash() {
			t.Errorf("step %d decoded as %+v, from %s", i, s, line(want))
		}
	}
}

// TestDiff: a saved plan read back is the same plan; a plan of changed
// nodes is not, and the difference is named.
func TestDiff(t *testing.T) {
	d := build(t, baseYML, func(c *spec.Cluster) { c.Services.Kubelet.Image = "k:new" })
	o := asApplied(build(t, baseYML, nil))
	p := Compute(d, o)
	var saved Plan
	if err := json.Unmarshal([]byte(mustJSON(t, p)), &saved); err != nil {
		t.Fatal(err)
	}
	if diff := Diff(&saved, p); diff != "" {
		t.Fatalf("a plan read back differs from itself:\n%s", diff)
	}

	// Someone recreated the kubelet of 10.0.0.4 since the plan was saved.
	kubelet := o.Nodes["10.0.0.4"].Containers[desired.Kubelet]
	kubelet.ID = "recreated"
	o.Nodes["10.0.0.4"].Containers[desired.Kubelet] = kubelet
	diff := Diff(&saved, Compute(d, o))
	if strings.Count(diff, "\n") != 1 || !strings.Contains(diff, "- 10.0.0.4 replace kubelet") || !strings.Contains(diff, "+ 10.0.0.4 replace kubelet recreated@") {
		t.Errorf("diff after a change on the node:\n%s", diff)
	}
	// A different desired spec is a different plan too.
	d2 := build(t, baseYML, func(c *spec.Cluster) { c.Services.Kubelet.Image = "k:newer" })
	if Diff(&saved, Compute(d2, asApplied(build(t, baseYML, nil)))) == "" {
		t.Error("a plan to another image is the same as the saved one")
	}
}
