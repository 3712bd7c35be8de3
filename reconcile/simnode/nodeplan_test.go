package simnode_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/simnode"
	"github.com/rigger/rigger/spec"
)

// TestPlanOfConvergedNodes plans two simulated nodes through rigger's
// transport: the node Converge gave what rigger's desired state says has
// no step, the one left empty has its containers to create; once both
// are converged, the plan is empty and its apply succeeds.
func TestPlanOfConvergedNodes(t *testing.T) {
	c, keyPEM, kh := start(t, 2)
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var yml strings.Builder
	fmt.Fprintf(&yml, "cluster_name: sim\nssh_key_path: %s\nrigger:\n  ssh:\n    known_hosts_file: %s\nnodes:\n", keyPath, kh)
	for i, n := range c.Nodes {
		fmt.Fprintf(&yml, "  - {address: %s, port: \"%d\", user: root, role: [etcd, controlplane, worker], hostname_override: sim-%d}\n", n.Address, n.Port, i)
	}
	file := filepath.Join(dir, "cluster.yml")
	if err := os.WriteFile(file, []byte(yml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, diags, err := spec.Load(file)
	if err != nil {
		t.Fatalf("%v\n%v", err, diags)
	}
	set, _, err := pki.Ensure(nil, pki.RequestFor(cl), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d, err := simnode.Desired(cl, set)
	if err != nil {
		t.Fatal(err)
	}
	simnode.Converge(c.Nodes[0].Engine, cl, d.Nodes[0])

	ctx := context.Background()
	tr, err := reach.Transport(cl, nil, nil, false, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	pl, err := simnode.Plan(ctx, tr, cl, set)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.Plan
	if len(p.Unreachable) > 0 || !pl.Observed.Nodes[c.Nodes[0].Address].Reachable {
		t.Fatalf("unreachable: %v", p.Unreachable)
	}
	perNode := map[string]int{}
	for _, s := range p.Steps {
		perNode[s.Node]++
	}
	if perNode[c.Nodes[0].Address] != 0 || perNode[c.Nodes[1].Address] == 0 {
		t.Fatalf("steps per node = %v: want none on the converged %s, some on the empty %s", perNode, c.Nodes[0].Address, c.Nodes[1].Address)
	}

	// Both converged: an empty plan, carried out.
	simnode.Converge(c.Nodes[1].Engine, cl, d.Nodes[1])
	if pl, err = simnode.Plan(ctx, tr, cl, set); err != nil || !pl.Plan.Empty() {
		t.Fatalf("plan of the converged nodes: %v, %v", pl, err)
	}
	if _, err := simnode.Apply(ctx, tr, cl, pl, plan.Hooks{}, reconcile.MaxPlanAge); err != nil {
		t.Fatalf("apply of an empty plan: %v", err)
	}
}

// TestServeDelay asks Serve, as a parent process does, to make a node slow
// and then fast again, and checks the Docker API's answers wait as asked.
func TestServeDelay(t *testing.T) {
	c, key, kh := start(t, 1)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- simnode.Serve(c, inR, outW, time.Second) }()
	lines := make(chan string)
	go func() {
		buf := make([]byte, 256)
		var acc string
		for {
			n, err := outR.Read(buf)
			acc += string(buf[:n])
			for {
				i := strings.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				lines <- acc[:i]
				acc = acc[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	ask := func(req string) string {
		t.Helper()
		if req != "" {
			if _, err := io.WriteString(inW, req+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to %q", req)
			return ""
		}
	}
	if l := ask(""); l != simnode.Ready {
		t.Fatalf("first line %q, want %q", l, simnode.Ready)
	}
	n := c.Nodes[0]
	ctx := context.Background()
	cli, err := transportTo(t, c, "root", key, kh).Docker(ctx, n.Address)
	if err != nil {
		t.Fatal(err)
	}
	const delay = 300 * time.Millisecond
	if l := ask("delay " + n.Address + " " + delay.String()); l != "ok" {
		t.Fatalf("delay: %q", l)
	}
	if l := ask("delay 127.0.99.99 1s"); !strings.HasPrefix(l, "no simulated node") {
		t.Errorf("delay of an unknown node: %q", l)
	}
	begin := time.Now()
	if _, err := cli.ContainerList(ctx, container.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < delay {
		t.Errorf("a slow node answered in %s, want at least %s", took, delay)
	}
	if l := ask("delay " + n.Address + " 0s"); l != "ok" {
		t.Fatalf("delay 0s: %q", l)
	}
	begin = time.Now()
	if _, err := cli.ContainerList(ctx, container.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took >= delay {
		t.Errorf("a node made fast again answered in %s", took)
	}
	if l := ask("bogus"); !strings.HasPrefix(l, "unknown request") {
		t.Errorf("bogus: %q", l)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
