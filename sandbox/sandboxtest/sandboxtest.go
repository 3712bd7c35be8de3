// Package sandboxtest gives tests a real rigger sandbox: nodes with their
// own network and mount namespaces, sshd and Docker engine (see package
// sandbox).
//
// Such tests run only with RIGGER_E2E=1, as root: `make test` does both, or
// `sudo RIGGER_E2E=1 go test ./...`. Without RIGGER_E2E=1 they are skipped
// with a message that says so; with it, a missing prerequisite fails them.
//
// go test runs the packages of ./... in parallel, so every test package
// that starts a sandbox uses a subnet of its own (10.231.<Subnet>.0/24) and
// the sandbox name that goes with it (test<Subnet>):
//
//	Subnet  package
//	0       the default and demo sandbox (`rigger sandbox up`); no test
//	1       sandbox (its own tests)
//	2       transport/sshtun (the SSH transport against real sshd and dockerd)
//	3       reconcile (BenchmarkSandbox)
//	4       reconcile/etcdsnap (snapshots, restore, schedule, snapshotter: one cluster, TestEtcdSandbox)
//	5       gitops
//	6       reconcile/observe
//	7       cmd/rigger (the CLI end to end)
//	8       reconcile/dockerop
//	9       reconcile/kubenode
//	17      reconcile (TestClusterSandbox)
//	21      reconcile/registryauth (TestRegistriesSandbox: private_registries)
//	22      gitops (TestChaosSandbox, the chaos suite: make chaos)
//	23      cmd/rigger (TestAgentSandbox: a node reached through the agent tunnel)
//	24      reconcile/secretsenc (TestEncryptionSandbox: secrets encryption key, rotation)
//	25      reconcile/certrotate (TestCertRotateSandbox: certificate rotation)
//	29      reconcile/coldconverge (TestColdConverges: make test-cold, make test TEST_COLD_RUNS=N)
//	36      reconcile (TestUpgradeSandbox: make test-road)
//	38      reconcile (BenchmarkUpgrade)
//	39      cmd/rigger (BenchmarkNoop)
//	41      cmd/rigger (BenchmarkChanges)
//	44      cmd/rigger/incluster (TestServeInClusterSandbox: serve as pods, deploy/ applied with kubectl; both clusters)
//	51      cmd/rigger/rkeup (TestRKEUpSandbox: RKE's own rke up, adopted and upgraded: make test-long)
//	53      reconcile (TestNewestMinorSandbox: the newest minor's step, make test-long)
//
// Take a free number for a new package and add it here: TestSubnetRegistry
// checks this table against the tests. Within one package,
// tests that start sandboxes one after the other may share the number;
// tests that run in parallel (t.Parallel) may not. They do not run in
// parallel within a package: on two cores the control planes of a few
// sandboxes at once are all the machine can carry.
package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/rigger/rigger/sandbox"
)

// EnvVar turns the real-sandbox tests on when it is "1".
const EnvVar = "RIGGER_E2E"

// upTimeout bounds Up: a cold image cache builds Kubernetes (about 9
// minutes, once per machine).
const upTimeout = 15 * time.Minute

// EnvLong turns the long real-sandbox tests on when it is "1", with
// EnvVar: make test-long (Kubernetes upgrades, which need the sandbox's
// other Kubernetes versions built).
const EnvLong = "RIGGER_LONG"

// Enabled says whether the real-sandbox tests run.
func Enabled() bool { return os.Getenv(EnvVar) == "1" }

// Long says whether the long real-sandbox tests run.
func Long() bool { return Enabled() && os.Getenv(EnvLong) == "1" }

// SkipUnlessLong skips a long test, or part of one, unless make test-long
// runs it.
func SkipUnlessLong(t testing.TB) {
	t.Helper()
	if !Long() {
		t.Skipf("a long real-sandbox test: make test-long runs it (%s=1 %s=1)", EnvVar, EnvLong)
	}
}

// Start makes a fresh sandbox for the test and registers a cleanup that
// takes it down, also when the test fails. opts.Name defaults to
// "test<Subnet>". Any sandbox of that name left by an earlier, killed run
// is taken down first.
//
// Without RIGGER_E2E=1 the test is skipped; with it, Start fails the test
// with the reason when the sandbox cannot be made (not root, a missing
// prerequisite, the subnet in use).
func Start(t testing.TB, opts sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	if !Enabled() {
		t.Skipf("real sandbox test: run `make test`, or `sudo %s=1 go test ./...` as root", EnvVar)
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("test%d", opts.Subnet)
	}
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	if err := sandbox.Precheck(ctx); err != nil {
		t.Fatalf("%s=1 asks for the real sandbox, and it cannot run here: %v", EnvVar, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := sandbox.Down(ctx, opts.Name); err != nil {
			t.Errorf("take sandbox %s down: %v", opts.Name, err)
		}
	})
	if err := sandbox.Down(ctx, opts.Name); err != nil {
		t.Fatalf("take down what an earlier run left of sandbox %s: %v", opts.Name, err)
	}
	var log strings.Builder
	s, err := sandbox.Up(ctx, opts, &log)
	if err != nil {
		// The error last, under the progress that led to it: a failure's
		// excerpt shows its last lines.
		t.Fatalf("sandbox up:\n%ssandbox up: %v", log.String(), err)
	}
	t.Logf("sandbox up:\n%s", log.String())
	return s
}

// ExampleCluster is the cluster.yml `make demo` applies to the default
// sandbox, relative to the repository root.
const ExampleCluster = "examples/clusters/sandbox/cluster.yml"

// ClusterYML is examples/clusters/sandbox/cluster.yml (found from the
// test's directory upwards) moved to sandbox s: its SSH key and known_hosts,
// and as nodes those of s that roles names, by index, with their roles.
// The example's settings (images, cri-dockerd, add-ons) stay as they are.
func ClusterYML(t testing.TB, s *sandbox.Sandbox, roles map[int][]string) string {
	t.Helper()
	var b []byte
	dir, err := os.Getwd()
	for err == nil {
		if b, err = os.ReadFile(filepath.Join(dir, ExampleCluster)); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no %s above the test's directory", ExampleCluster)
		}
		dir, err = parent, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "- {address:"):
			continue // the example's own nodes
		case trimmed == "nodes:":
			out = append(out, line)
			for i, n := range s.Nodes {
				if r, ok := roles[i]; ok {
					out = append(out, fmt.Sprintf("  - {address: %s, user: %s, role: [%s], hostname_override: %s}",
						n.Address, n.User, strings.Join(r, ", "), n.Hostname))
				}
			}
			continue
		}
		out = append(out, strings.ReplaceAll(line, "/var/lib/rigger-sandbox/rigger/", "/var/lib/rigger-sandbox/"+s.Name+"/"))
	}
	return strings.Join(out, "\n")
}

// NetworkOnly turns off the add-ons of a cluster.yml from ClusterYML but
// the network plugin (which the Nodes need to be Ready): for the tests of
// the engine, where CoreDNS's and metrics-server's rollouts only cost time
// (reconcile's TestClusterSandbox runs them).
func NetworkOnly(yml string) string {
	return yml + "\ndns:\n  provider: none\nmonitoring:\n  provider: none\n"
}

// DockerClient is a client of node n's Docker engine, through its socket
// on the host; it is closed when the test ends.
func DockerClient(t testing.TB, n sandbox.Node) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+n.DockerSocket), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Partition cuts node name of s off the network until the test ends (or
// heal is called, which may be called more than once).
func Partition(ctx context.Context, t testing.TB, s *sandbox.Sandbox, name string) (heal func()) {
	t.Helper()
	if err := s.Partition(ctx, name); err != nil {
		t.Fatal(err)
	}
	heal = sync.OnceFunc(func() {
		if err := s.Heal(context.Background(), name); err != nil {
			t.Errorf("heal node %s: %v", name, err)
		}
	})
	t.Cleanup(heal)
	return heal
}
