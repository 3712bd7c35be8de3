package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/agenttun"
)

// TestAgentSandbox is the agent tunnel on real nodes: a mixed cluster of
// two nodes reached over SSH and one, whose sshd is stopped, reached only
// through its agent, started on the node with the docker run line `rigger
// agent command` prints and dialling serve's agent endpoint (in this
// process, on the sandbox's bridge). It converges to a working control
// plane on all three; then the endpoint restarts, the agent comes back
// within its backoff bound, and the next apply and plan go through it.
func TestAgentSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 23, Nodes: 3, Images: true})
	ctx, cancel := reconciletest.UntilTestDeadline(t)
	defer cancel()
	node3 := s.Nodes[2]
	if err := s.StopService(ctx, node3.Name, sandbox.ServiceSSHD); err != nil {
		t.Fatal(err)
	}

	yml := sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, s, reconciletest.Roles(3)))
	yml = strings.Replace(yml, "{address: "+node3.Address+",", "{address: "+node3.Address+", transport: agent,", 1)
	file := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := reconciletest.Load(t, yml)
	if c.Nodes[2].Transport != spec.TransportAgent {
		t.Fatalf("node %s is not declared with transport: agent:\n%s", node3.Address, yml)
	}

	// serve's agent endpoint, where node3 reaches it: the host's address
	// on the sandbox's bridge.
	serveDir := t.TempDir()
	logs := &syncBuffer{}
	t.Cleanup(func() { t.Logf("agent endpoint's log:\n%s", logs) })
	e, url, stop := listenEndpoint(t, serveDir, net.JoinHostPort(s.BridgeAddress, "0"), logs)
	t.Cleanup(func() { stop() })
	a := reconciletest.New(t)
	// A closure, not the method value: e is the endpoint of the moment (a
	// new one after serve restarts below).
	a.Open = func(c *spec.Cluster, o reconcile.Options) (*reconcile.Session, error) { return e.openSession(c, o) }
	// serve admits the cluster's agent nodes when it first reads its
	// cluster.yml.
	a.Session(t, c)

	out, stderr, code := run(t, "agent", "command", "-f", file, "--node", node3.Address, "--server", url,
		"--state-dir", serveDir, "--image", sandbox.RiggerImage)
	if code != 0 {
		t.Fatalf("agent command: exit %d: %s", code, stderr)
	}
	docker := sandboxtest.DockerClient(t, node3)
	sandboxtest.StartAgent(ctx, t, node3, strings.TrimSpace(out))
	connected := func(ctx context.Context) (bool, error) {
		for _, tun := range e.tunnels(c.ClusterName) {
			if tun.Node == node3.Address {
				return tun.Connected, nil
			}
		}
		return false, fmt.Errorf("no tunnel of node %s in %+v", node3.Address, e.tunnels(c.ClusterName))
	}
	reconciletest.Eventually(ctx, t, time.Minute, "node3's agent joined and connected", connected)

	a.Apply(ctx, t, c)
	checkControlPlane(ctx, t, a, c, s)
	a.InSync(ctx, t, c)
	if l := sandboxtest.AgentLogs(ctx, docker, time.Time{}); !strings.Contains(l, "first request from the server received through the tunnel") {
		t.Errorf("the agent's log does not say the server used the tunnel:\n%s", l)
	}

	// serve restarts: its tunnels end, and the agent finds the endpoint
	// gone before it comes back with the same state directory and port.
	stop()
	down := time.Now()
	reconciletest.Eventually(ctx, t, time.Minute, "the agent finds the endpoint down", func(ctx context.Context) (bool, error) {
		return strings.Contains(sandboxtest.AgentLogs(ctx, docker, down), "connection refused"), nil
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(url, "https://"))
	e, _, stop = listenEndpoint(t, serveDir, net.JoinHostPort(s.BridgeAddress, port), logs)
	a.Session(t, c)
	// Any wait of the agent's backoff is at most its bound, so it dials
	// again within that (and the time a dial takes) of the endpoint's
	// return.
	reconciletest.Eventually(ctx, t, agenttun.DefaultBackoffMax+10*time.Second, "node3's agent connected again", connected)
	if l := sandboxtest.AgentLogs(ctx, docker, down); !strings.Contains(l, "tunnel up again") {
		t.Errorf("the agent's log does not say its tunnel came up again:\n%s", l)
	}
	a.Apply(ctx, t, c)
	a.InSync(ctx, t, c)

	// The agent stopped: doctor says where node3's join stands, as the
	// tunnel server saw it.
	if err := docker.ContainerStop(ctx, sandboxtest.AgentContainer, container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	reconciletest.Eventually(ctx, t, time.Minute, "node3's tunnel down", func(ctx context.Context) (bool, error) {
		up, err := connected(ctx)
		return !up, err
	})
	found, err := a.Session(t, c).Doctor(ctx, doctor.RunOptions{Nodes: []string{node3.Address}})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(found, func(f doctor.Finding) bool { return f.Node == node3.Address && f.Check == doctor.CheckAgentConnected })
	if i < 0 || found[i].Level != doctor.Fail || !strings.Contains(found[i].Fix, "its tunnel was lost at") ||
		!strings.Contains(found[i].Found, "the join as the server saw it: ") || !strings.Contains(found[i].Found, "tunnel up") {
		t.Errorf("doctor on node3 with its agent stopped: %+v", found)
	}
}

// checkControlPlane waits until the API server is ready and every node of
// s is a Ready Node.
func checkControlPlane(ctx context.Context, t *testing.T, a *reconciletest.Applier, c *spec.Cluster, s *sandbox.Sandbox) {
	t.Helper()
	cs := a.Client(ctx, t, c)
	reconciletest.Eventually(ctx, t, 3*time.Minute, "the API server ready and every node a Ready Node", func(ctx context.Context) (bool, error) {
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil || string(b) != "ok" {
			return false, fmt.Errorf("API server's /readyz: %q, %v", b, err)
		}
		for _, n := range s.Nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Hostname, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ready := false
			for _, cond := range node.Status.Conditions {
				ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
			}
			if !ready {
				return false, fmt.Errorf("node %s is not Ready: %+v", n.Hostname, node.Status.Conditions)
			}
		}
		return true, nil
	})
}
