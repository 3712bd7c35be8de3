package gitops_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/reconcile/simnode"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/agenttun"
)

// The shape of BenchmarkServeHostileNodes.
const (
	// hostileHonest clusters of simNodesPerClus honest nodes each are
	// followed beside the hostile ones.
	hostileHonest = 10
	// hostilePort keeps the benchmark's nodes apart from the others'.
	hostilePort = 22324
	// hostileDrift is the drift interval: short, so that the hostile
	// nodes are read again and again during the run (a failed reconcile
	// is retried after 15 s, doubling).
	hostileDrift = 20 * time.Second
	// hostileRun is how long the attacks go on.
	hostileRun = 3 * time.Minute
	// hostileSlowClients connections send the agent endpoint their
	// request a byte a second, again 10 s after one is closed;
	// hostileTokens joins try made-up tokens.
	hostileSlowClients = 4000
	hostileTokens      = 2000
	// hostileLimit is the memory limit deploy/deployment.yaml gives serve.
	hostileLimit = 512 << 20
	// hostileDirEnv names the directory a TestHostileClustersProcess
	// child finds the clusters in.
	hostileDirEnv = "RIGGER_HOSTILESERVE_DIR"
)

// hostileWays are the attacks, each by every node of a cluster of its own.
var hostileWays = []simnode.Hostile{simnode.HostilePull, simnode.HostileList, simnode.HostileLabels, simnode.HostileVersion}

// BenchmarkServeHostileNodes measures serve's memory under every attack on
// it at once, as docs/agent.md reports: one in-process `rigger serve`
// (gitops.Server, with the pool of answers serve shares among its
// clusters) follows 20 clusters of honest simulated nodes and one cluster
// per attack whose 3 nodes answer, over SSH, as a compromised node can
// (simnode.Hostile: an endless pull, 31 MiB container lists of empty
// containers or of labels, a 31 MiB version), reconciled again every 20 s
// or as their retries come; meanwhile the agent tunnel's endpoint
// (agenttun, as serve runs it) is held by 4,000 connections that send
// their request a byte a second and reconnect when closed, and 2,000 joins
// try made-up tokens. The nodes and the attackers run in a child process:
// the memory measured is serve's alone. It reports serve's peak RSS (VmHWM)
// and heap, and fails past deploy/'s limit of 512 MiB. Run it with the
// GOMEMLIMIT deploy/ sets (GOMEMLIMIT=400MiB) to measure serve as
// deployed.
func BenchmarkServeHostileNodes(b *testing.B) {
	if lim, err := simnode.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	} else if lim < 3*hostileSlowClients {
		b.Skipf("the open files limit is %d; %d slow clients need about %d", lim, hostileSlowClients, 3*hostileSlowClients)
	}
	for b.Loop() {
		benchServeHostile(b)
	}
}

func benchServeHostile(b *testing.B) {
	var names []string
	for i := range hostileHonest {
		names = append(names, fmt.Sprintf("honest-%02d", i))
	}
	for _, way := range hostileWays {
		names = append(names, "hostile-"+string(way))
	}
	fleet := startFleet(b, names, hostilePort, "TestHostileClustersProcess", hostileDirEnv)
	for k, name := range names {
		way, ok := strings.CutPrefix(name, "hostile-")
		if !ok {
			continue
		}
		for i := range simNodesPerClus {
			fleet.ask(b, fmt.Sprintf("hostile %s %s", simnode.Address(k*simNodesPerClus+i), way))
		}
	}
	mem := startMemSampler()
	defer mem.stop()

	// serve: the clusters, and the agent tunnel's endpoint.
	answers := transport.NewAnswerPool(transport.DefaultAnswerPool)
	rec := &eventLog{wake: make(chan struct{}, 1)}
	o := newOrigin(b, freePort(b))
	repo, err := gitrepo.Open(context.Background(), filepath.Join(b.TempDir(), "clone"), "file://"+o.bare, gitrepo.Auth{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := gitops.New(gitops.Config{Repo: repo, Branch: "main", Path: "clusters", StateDir: b.TempDir(),
		Interval: time.Hour, DriftInterval: hostileDrift, Answers: answers,
		Author: object.Signature{Name: "rigger-bench", Email: "rigger@example.test"},
		Open:   fleet.open, Events: rec.add})
	if err != nil {
		b.Fatal(err)
	}
	endpoint := startAgentEndpoint(b, answers)

	files := map[string]string{}
	for _, name := range names {
		files[clusterFile(name)] = fleet.yml[name]
	}
	o.commit(b, "clusters, honest and hostile", files)
	o.push(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	fleet.ask(b, "slowclients "+endpoint+" "+strconv.Itoa(hostileSlowClients))
	fleet.ask(b, "tokens "+endpoint+" "+strconv.Itoa(hostileTokens))
	start := time.Now()
	<-time.After(hostileRun)
	slow, err := fleet.nodes.Ask("stop", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	peakHeap, rss := mem.peakHeap(), peakRSS()

	// What the reconciles found: their ends, and the status.yml of each
	// cluster (a node's answer refused makes it unreachable, with the
	// refusal as its error).
	ends, failed := map[string]int{}, map[string]int{}
	for _, e := range rec.snapshot() {
		if e.Kind == gitops.EventReconcileEnd {
			ends[e.Path]++
			if e.Err != nil {
				failed[e.Path]++
			}
		}
	}
	refused := func(name string) bool {
		out, err := bareGit(o, "show", "main:clusters/"+name+"/status.yml")
		return err == nil && (strings.Contains(out, "more than rigger reads of any engine") || strings.Contains(out, "of rigger's memory"))
	}
	var honestDone, honestFailed, honestRefused int
	for _, name := range names[:hostileHonest] {
		if ends[clusterFile(name)] > failed[clusterFile(name)] {
			honestDone++
		}
		honestFailed += failed[clusterFile(name)]
		if refused(name) {
			honestRefused++
		}
	}
	// The endpoint still serves.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the CA is public
	resp, err := hc.Get("https://" + endpoint + agenttun.PathCACerts)
	if err != nil {
		b.Fatalf("the agent endpoint after the attacks: %v", err)
	}
	resp.Body.Close()

	const mb = 1 << 20
	b.ReportMetric(float64(rss)/mb, "hostile-peak-rss-MB")
	b.ReportMetric(float64(peakHeap)/mb, "hostile-peak-heap-MB")
	fmt.Printf("\nserve under every attack at once for %s (GOMEMLIMIT %s), %d honest clusters of %d nodes and %d hostile ones:\n\n",
		time.Since(start).Round(time.Second), memLimit(), hostileHonest, simNodesPerClus, len(hostileWays))
	fmt.Printf("| | measured | bound |\n|---|---|---|\n")
	fmt.Printf("| peak RSS of the serve process (VmHWM) | %.0f MB | < %d MB (deploy/) |\n", float64(rss)/mb, hostileLimit/mb)
	fmt.Printf("| peak heap (HeapInuse) | %.0f MB | |\n", float64(peakHeap)/mb)
	fmt.Printf("| honest clusters reconciled without error at least once | %d of %d | all |\n", honestDone, hostileHonest)
	fmt.Printf("| honest reconciles that failed; honest status.yml with a node refused | %d; %d | 0; 0 |\n", honestFailed, honestRefused)
	for _, way := range hostileWays {
		name := "hostile-" + string(way)
		fmt.Printf("| cluster of hostile %s: reconciles ended (failed); its nodes refused in status.yml | %d (%d); %v | refused |\n",
			way, ends[clusterFile(name)], failed[clusterFile(name)], refused(name))
	}
	fmt.Printf("| slow clients on the agent endpoint | %s | closed within 15 s |\n\n", slow)
	if rss > hostileLimit {
		b.Errorf("serve's peak RSS was %d MB, past deploy/'s limit of %d MB", rss/mb, hostileLimit/mb)
	}
	if honestDone < hostileHonest {
		b.Errorf("%d of %d honest clusters reconciled without error", honestDone, hostileHonest)
	}
}

// memLimit is the process's GOMEMLIMIT, for the report.
func memLimit() string {
	if lim := debug.SetMemoryLimit(-1); lim < 1<<62 {
		return fmt.Sprintf("%d MiB", lim>>20)
	}
	return "none"
}

// startAgentEndpoint serves an agent tunnel endpoint as serve does (a
// TLS listener of agenttun.NewHTTPServer, a Server of one cluster), until
// the benchmark ends; it returns its address.
func startAgentEndpoint(b *testing.B, answers *transport.AnswerPool) string {
	b.Helper()
	store, err := agenttun.OpenStore("", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	srv, err := agenttun.NewServer(agenttun.Config{Cluster: "edge", Store: store, Answers: answers,
		Nodes: []agenttun.Node{{Name: "n1", DockerSocket: "/var/run/docker.sock"}}})
	if err != nil {
		b.Fatal(err)
	}
	tlsConfig, err := store.CA().TLSConfig([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := agenttun.NewHTTPServer(srv, tlsConfig)
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	b.Cleanup(func() { srv.Close(); hs.Close() })
	return ln.Addr().String()
}

// TestHostileClustersProcess is the child process of
// BenchmarkServeHostileNodes: the nodes of every cluster.yml under
// $RIGGER_HOSTILESERVE_DIR/clusters (converged, but for the cluster of
// hostile pulls, whose first reconcile pulls every image), and the
// attackers of the agent endpoint:
//
//   - "slowclients ADDRESS N": N connections to the endpoint at ADDRESS,
//     each sending a join, or a fetch of the CA with a body, a byte a
//     second, and again when the endpoint closes it; "ok".
//   - "tokens ADDRESS N": N joins with made-up tokens; "ok".
//   - "stop": stops them, and answers how long the endpoint held a slow
//     client at most, and how many connections it closed.
func TestHostileClustersProcess(t *testing.T) {
	dir := os.Getenv(hostileDirEnv)
	if dir == "" {
		t.Skip("the child process of BenchmarkServeHostileNodes")
	}
	a := &attackers{stop: make(chan struct{})}
	serveFleet(t, dir, hostilePort, func(c string) bool { return c != "hostile-"+string(simnode.HostilePull) }, a.request)
}

// attackers are the agent endpoint's attackers of the hostile benchmark.
type attackers struct {
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	closed  atomic.Int64 // connections the endpoint closed
	longest atomic.Int64 // the longest a connection was held, ns
}

func (a *attackers) request(f []string) (string, bool) {
	switch {
	case len(f) == 3 && f[0] == "slowclients":
		n, _ := strconv.Atoi(f[2])
		for i := range n {
			a.wg.Add(1)
			go func() { defer a.wg.Done(); a.slowClient(f[1], i) }()
		}
		return "ok", true
	case len(f) == 3 && f[0] == "tokens":
		n, _ := strconv.Atoi(f[2])
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.tokens(f[1], n) }()
		return "ok", true
	case len(f) == 1 && f[0] == "stop":
		a.once.Do(func() { close(a.stop) })
		a.wg.Wait()
		return fmt.Sprintf("%d connections closed by the endpoint, the longest held %s",
			a.closed.Load(), time.Duration(a.longest.Load()).Round(time.Second)), true
	}
	return "", false
}

// slowClient sends its request a byte a second, again and again, until
// stopped; every 2nd is a fetch of the CA with a body.
func (a *attackers) slowClient(addr string, i int) {
	head := "POST " + agenttun.PathJoin + "?node=n1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rgt_" + strings.Repeat("s", 43) +
		"\r\nContent-Length: 1048576\r\n\r\n"
	if i%2 == 1 {
		head = "GET " + agenttun.PathCACerts + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n"
	}
	for {
		select {
		case <-a.stop:
			return
		default:
		}
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}} //nolint:gosec // nothing secret
		c, err := d.Dial("tcp", addr)
		if err != nil {
			select {
			case <-a.stop:
				return
			case <-time.After(time.Second):
				continue
			}
		}
		opened := time.Now()
		closed := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
		_, _ = io.WriteString(c, head)
		tick := time.NewTicker(time.Second)
	trickle:
		for {
			select {
			case <-a.stop:
				tick.Stop()
				c.Close()
				return
			case <-closed:
				break trickle
			case <-tick.C:
				_, _ = c.Write([]byte("x"))
			}
		}
		tick.Stop()
		c.Close()
		a.closed.Add(1)
		held := int64(time.Since(opened))
		for {
			old := a.longest.Load()
			if held <= old || a.longest.CompareAndSwap(old, held) {
				break
			}
		}
		// Again, a while later: the attack is on memory and file
		// descriptors, not the CPU of TLS handshakes.
		select {
		case <-a.stop:
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// tokens tries n joins with made-up tokens.
func (a *attackers) tokens(addr string, n int) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, //nolint:gosec // nothing secret
		ClientSessionCache: tls.NewLRUClientSessionCache(8)}}}
	defer hc.CloseIdleConnections()
	for i := range n {
		select {
		case <-a.stop:
			return
		default:
		}
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+agenttun.PathJoin+"?node=n1", strings.NewReader(`{"node":"n1"}`))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", fmt.Sprintf("Bearer rgt_%043d", i))
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}
