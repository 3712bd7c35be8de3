package observe

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/go-units"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/transport"
)

// fakeTransport is a transport.Transport whose Docker is DockerFn.
type fakeTransport struct {
	DockerFn func(ctx context.Context, node string) (*client.Client, error)
}

var _ transport.Transport = (*fakeTransport)(nil)

func (f *fakeTransport) Docker(ctx context.Context, node string) (*client.Client, error) {
	return f.DockerFn(ctx, node)
}

func (f *fakeTransport) Dial(context.Context, string, string, string) (net.Conn, error) {
	return nil, errors.New("fakeTransport: Dial not implemented")
}

func (f *fakeTransport) Close() error { return nil }

// fakeEngine serves the two calls Observe makes of a Docker engine API
// (GET /version and GET /containers/json) with httptest. A nil listFn
// answers the list with list, after checking that Observe asked for every
// container, in every state.
type fakeEngine struct {
	t       *testing.T
	version string
	list    []container.Summary
	listFn  http.HandlerFunc
	// inspect are the answers to GET /containers/{id}/json, by ID; the
	// IDs asked are recorded in inspected.
	inspect   map[string]container.InspectResponse
	mu        sync.Mutex
	inspected []string
}

func (e *fakeEngine) client() *client.Client {
	e.t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/version"):
			json.NewEncoder(w).Encode(map[string]string{"Version": e.version, "ApiVersion": "1.41"})
		case strings.HasSuffix(r.URL.Path, "/containers/json") && e.listFn != nil:
			e.listFn(w, r)
		case strings.Contains(r.URL.Path, "/containers/") && strings.HasSuffix(r.URL.Path, "/json") && !strings.HasSuffix(r.URL.Path, "/containers/json"):
			id := strings.TrimSuffix(r.URL.Path[strings.Index(r.URL.Path, "/containers/")+len("/containers/"):], "/json")
			e.mu.Lock()
			e.inspected = append(e.inspected, id)
			e.mu.Unlock()
			in, ok := e.inspect[id]
			if !ok {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				w.Write([]byte(`{"message":"No such container: ` + id + `"}`))
				return
			}
			json.NewEncoder(w).Encode(in)
		case strings.HasSuffix(r.URL.Path, "/containers/json"):
			if r.URL.Query().Get("all") != "1" {
				http.Error(w, "want all=1", http.StatusBadRequest)
				return
			}
			if f := r.URL.Query().Get("filters"); f != "" {
				// RKE's containers have no label to filter on.
				http.Error(w, fmt.Sprintf("want every container, got the filter %q", f), http.StatusBadRequest)
				return
			}
			json.NewEncoder(w).Encode(e.list)
		default:
			http.NotFound(w, r)
		}
	}))
	e.t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()),
		client.WithHTTPClient(srv.Client()), client.WithVersion("1.41"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cli.Close() })
	return cli
}

func labels(component, hash string) map[string]string {
	return map[string]string{
		desired.LabelCluster:   "prod",
		desired.LabelComponent: component,
		desired.LabelSpecHash:  hash,
		desired.LabelSpec:      `{"name":"` + component + `"}`,
	}
}

func TestObserve(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)
	healthyEngine := &fakeEngine{t: t, version: "20.10.24", list: []container.Summary{
		{ID: "e1", Names: []string{"/etcd"}, Image: "etcd:v3", State: container.StateRunning,
			Status: "Up 3 minutes (healthy)", Labels: labels("etcd", "h1")},
		// A container linked to kubelet shows its alias among kubelet's names.
		{ID: "k1", Names: []string{"/other/kl", "/kubelet"}, Image: "hyperkube:v1", State: container.StateExited,
			Status: "Exited (1) 2 seconds ago", Labels: labels("kubelet", "h2")},
		// RKE's, without rigger's labels: observed, marked.
		{ID: "r1", Names: []string{"/kube-proxy"}, Image: "rancher/hyperkube:v1.31.4-rancher1", State: container.StateRunning,
			Status: "Up 2 days", Labels: map[string]string{"io.rancher.rke.container.name": "kube-proxy"}},
		{ID: "r2", Names: []string{"/etcd-rolling-snapshots"}, Image: "rancher/rke-tools:v0.1.100", State: container.StateRunning, Status: "Up 2 days"},
		// Not the cluster's: a workload's, another cluster's.
		{ID: "w1", Names: []string{"/web"}, Image: "nginx", State: container.StateRunning},
		{ID: "o1", Names: []string{"/kube-scheduler"}, Image: "hyperkube:v1", State: container.StateRunning,
			Labels: map[string]string{desired.LabelCluster: "other", desired.LabelComponent: "kube-scheduler"}},
		// A crash loop: inspected for its restart count.
		{ID: "s1", Names: []string{"/kube-scheduler"}, Image: "hyperkube:v1", State: container.StateRestarting,
			Status: "Restarting (1) 3 seconds ago", Labels: labels("kube-scheduler", "h3")},
		// Restarting, and gone before it is inspected: as the list said.
		{ID: "a1", Names: []string{"/kube-apiserver"}, Image: "hyperkube:v1", State: container.StateRestarting,
			Status: "Restarting (255) Less than a second ago", Labels: labels("kube-apiserver", "h4")},
	}, inspect: map[string]container.InspectResponse{
		"s1": {ContainerJSONBase: &container.ContainerJSONBase{ID: "s1", RestartCount: 14,
			State: &container.State{Status: container.StateRestarting, Running: true, Restarting: true, ExitCode: 1}}},
	}}
	healthy := healthyEngine.client()
	empty := (&fakeEngine{t: t, version: "28.0.1"}).client()
	failingList := (&fakeEngine{t: t, version: "24.0.0", listFn: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"message":"engine is shutting down"}`))
	}}).client()
	unreachable := &transport.UnreachableError{Node: "10.0.0.2", Addr: "10.0.0.2:22", Op: transport.OpConnect,
		Timeout: 3 * time.Second, Err: errors.New("i/o timeout")}
	// A client handed out earlier whose connection is lost: its next
	// request redials, and the transport cannot reach the node.
	lost := &transport.UnreachableError{Node: "10.0.0.5", Addr: "10.0.0.5:22", Op: transport.OpConnect,
		Timeout: 3 * time.Second, Err: errors.New("i/o timeout")}
	lostClient, err := client.NewClientWithOpts(client.WithHost("unix:///var/run/docker.sock"), client.WithVersion("1.41"),
		client.WithDialContext(func(context.Context, string, string) (net.Conn, error) { return nil, lost }))
	if err != nil {
		t.Fatal(err)
	}
	tr := &fakeTransport{DockerFn: func(ctx context.Context, node string) (*client.Client, error) {
		switch node {
		case "10.0.0.5":
			return lostClient, nil
		case "10.0.0.1":
			return healthy, nil
		case "10.0.0.2":
			return nil, unreachable
		case "10.0.0.3":
			return failingList, nil
		case "10.0.0.4":
			return empty, nil
		}
		return nil, fmt.Errorf("node %s: %w", node, transport.ErrUnknownNode)
	}}

	got := Observe(context.Background(), tr, Request{Cluster: "prod",
		Nodes:       []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.1"},
		MaxParallel: 2, Now: func() time.Time { return at }})

	want := &Cluster{At: at, Nodes: map[string]*Node{
		"10.0.0.1": {Address: "10.0.0.1", Reachable: true, DockerVersion: "20.10.24", DockerAPIVersion: "1.41",
			Containers: map[string]Container{
				"etcd": {ID: "e1", Name: "etcd", Image: "etcd:v3", State: "running", Health: "healthy",
					Component: "etcd", SpecHash: "h1", Spec: `{"name":"etcd"}`},
				"kubelet": {ID: "k1", Name: "kubelet", Image: "hyperkube:v1", State: "exited", ExitCode: ptr(1),
					Component: "kubelet", SpecHash: "h2", Spec: `{"name":"kubelet"}`},
				"kube-scheduler": {ID: "s1", Name: "kube-scheduler", Image: "hyperkube:v1", State: "restarting", ExitCode: ptr(1), RestartCount: 14,
					Component: "kube-scheduler", SpecHash: "h3", Spec: `{"name":"kube-scheduler"}`},
				"kube-apiserver": {ID: "a1", Name: "kube-apiserver", Image: "hyperkube:v1", State: "restarting", ExitCode: ptr(255),
					Component: "kube-apiserver", SpecHash: "h4", Spec: `{"name":"kube-apiserver"}`},
				"kube-proxy":             {ID: "r1", Name: "kube-proxy", Image: "rancher/hyperkube:v1.31.4-rancher1", State: "running", RKE: true},
				"etcd-rolling-snapshots": {ID: "r2", Name: "etcd-rolling-snapshots", Image: "rancher/rke-tools:v0.1.100", State: "running", RKE: true},
			}},
		"10.0.0.2": {Address: "10.0.0.2", Error: unreachable.Error()},
		"10.0.0.3": {Address: "10.0.0.3", Error: "node 10.0.0.3: list containers: Error response from daemon: engine is shutting down"},
		"10.0.0.4": {Address: "10.0.0.4", Reachable: true, DockerVersion: "28.0.1", DockerAPIVersion: "1.41",
			Containers: map[string]Container{}},
		"10.0.0.5": {Address: "10.0.0.5", Error: lost.Error()},
	}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Node{}, "Err")); diff != "" {
		t.Errorf("Observe (-want +got)\n%s", diff)
	}
	for addr, want := range map[string]*transport.UnreachableError{"10.0.0.2": unreachable, "10.0.0.5": lost} {
		var ue *transport.UnreachableError
		if err := got.Nodes[addr].Err; !errors.As(err, &ue) || ue != want {
			t.Errorf("node %s: Err = %v, want the transport's *UnreachableError", addr, err)
		}
	}
	if diff := cmp.Diff([]string{"a1", "s1"}, sorted(healthyEngine.inspected)); diff != "" {
		t.Errorf("containers inspected (-want +got), want the restarting ones only:\n%s", diff)
	}
	if err := got.Nodes["10.0.0.3"].Err; err == nil {
		t.Errorf("node 10.0.0.3: Err is nil, want the list's error")
	}
	for _, addr := range []string{"10.0.0.1", "10.0.0.4"} {
		if err := got.Nodes[addr].Err; err != nil {
			t.Errorf("node %s: Err = %v, want nil", addr, err)
		}
	}
}

// TestObserveStartedSince: with the time since the last apply known, a
// running container whose uptime the list shows shorter was started since
// (not by rigger): it is inspected for its restart count and marked. One
// that has run at least as long, or that the list shows without an uptime,
// costs no call.
func TestObserveStartedSince(t *testing.T) {
	e := &fakeEngine{t: t, version: "20.10.24", list: []container.Summary{
		{ID: "e1", Names: []string{"/etcd"}, State: container.StateRunning, Status: "Up 3 minutes (healthy)", Labels: labels("etcd", "h1")},
		{ID: "s1", Names: []string{"/kube-scheduler"}, State: container.StateRunning, Status: "Up 40 seconds", Labels: labels("kube-scheduler", "h2")},
		{ID: "a1", Names: []string{"/kube-apiserver"}, State: container.StateRunning, Status: "Up 2 minutes", Labels: labels("kube-apiserver", "h3")},
		{ID: "p1", Names: []string{"/kube-proxy"}, State: container.StateRunning, Status: "Up About a minute", Labels: labels("kube-proxy", "h4")},
	}, inspect: map[string]container.InspectResponse{
		"s1": {ContainerJSONBase: &container.ContainerJSONBase{ID: "s1", RestartCount: 3,
			State: &container.State{Status: container.StateRunning, Running: true}}},
		"p1": {ContainerJSONBase: &container.ContainerJSONBase{ID: "p1",
			State: &container.State{Status: container.StateRunning, Running: true}}},
	}}
	cli := e.client()
	tr := &fakeTransport{DockerFn: func(context.Context, string) (*client.Client, error) { return cli, nil }}
	// The last apply ended 2½ minutes ago: the API server (up 2 to 3
	// minutes) may have started during it; the scheduler (under 41 s) and
	// kube-proxy (under 2 minutes) started since.
	got := Observe(t.Context(), tr, Request{Cluster: "prod", Nodes: []string{"10.0.0.1"}, SinceApply: 150 * time.Second})
	cs := got.Nodes["10.0.0.1"].Containers
	for name, want := range map[string]struct {
		since    bool
		restarts int
	}{"etcd": {}, "kube-apiserver": {}, "kube-scheduler": {true, 3}, "kube-proxy": {true, 0}} {
		if c := cs[name]; c.StartedSince != want.since || c.RestartCount != want.restarts {
			t.Errorf("%s: started since %v, restarts %d; want %v, %d", name, c.StartedSince, c.RestartCount, want.since, want.restarts)
		}
	}
	if diff := cmp.Diff([]string{"p1", "s1"}, sorted(e.inspected)); diff != "" {
		t.Errorf("containers inspected (-want +got):\n%s", diff)
	}
}

func TestUpAtMost(t *testing.T) {
	for status, want := range map[string]time.Duration{
		"Up Less than a second":          time.Second,
		"Up 1 second":                    2 * time.Second,
		"Up 59 seconds (healthy)":        time.Minute,
		"Up About a minute":              2 * time.Minute,
		"Up 59 minutes (Paused)":         time.Hour,
		"Up About an hour":               90 * time.Minute,
		"Up 47 hours (health: starting)": 47*time.Hour + 30*time.Minute,
		"Up 13 days":                     14*24*time.Hour - 30*time.Minute,
		"Up 8 weeks":                     9*7*24*time.Hour - 30*time.Minute,
		"Up 23 months":                   24*30*24*time.Hour - 30*time.Minute,
		"Up 3 years":                     4 * 365 * 24 * time.Hour,
	} {
		if got, ok := upAtMost(status); !ok || got != want {
			t.Errorf("upAtMost(%q) = %s, %v; want %s", status, got, ok, want)
		}
	}
	for _, status := range []string{"", "Exited (0) 3 minutes ago", "Restarting (1) 2 seconds ago", "Up", "Up x minutes", "Up -3 minutes", "Up 3 fortnights", "Created"} {
		if got, ok := upAtMost(status); ok {
			t.Errorf("upAtMost(%q) = %s, true; want false", status, got)
		}
	}
	// What the engine writes, for every uptime up to three years by
	// steps: never longer than upAtMost says.
	for d := time.Duration(0); d < 3*365*24*time.Hour; d = d*5/4 + 700*time.Millisecond {
		status := "Up " + units.HumanDuration(d)
		if got, ok := upAtMost(status); !ok || got <= d {
			t.Fatalf("upAtMost(%q) = %s, %v; the container has run %s", status, got, ok, d)
		}
	}
}

// TestObserveLimit checks that no more than maxParallel nodes are observed
// at once.
func TestObserveLimit(t *testing.T) {
	const limit = 3
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	tr := &fakeTransport{DockerFn: func(ctx context.Context, node string) (*client.Client, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		if n == limit {
			once.Do(func() { close(release) })
		}
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return nil, errors.New("no engine")
	}}
	nodes := make([]string, 10)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("10.0.0.%d", i+1)
	}
	got := Observe(context.Background(), tr, Request{Cluster: "prod", Nodes: nodes, MaxParallel: limit})
	if m := most.Load(); m != limit {
		t.Errorf("at most %d nodes were observed at once, want %d", m, limit)
	}
	if len(got.Nodes) != len(nodes) {
		t.Errorf("observed %d nodes, want %d", len(got.Nodes), len(nodes))
	}
	if got.At.IsZero() {
		t.Error("At is zero with a nil clock, want time.Now")
	}
}

// TestObserveCancel checks that cancelling ctx stops Observe promptly,
// both while the transport connects and while an engine answers slowly,
// and that every node is still in the result.
func TestObserveCancel(t *testing.T) {
	slowList := (&fakeEngine{t: t, version: "20.10.24", listFn: func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}}).client()
	var calls atomic.Int32
	tr := &fakeTransport{DockerFn: func(ctx context.Context, node string) (*client.Client, error) {
		calls.Add(1)
		if node == "slow-engine" {
			return slowList, nil
		}
		<-ctx.Done() // a connection that never completes
		return nil, fmt.Errorf("node %s: connect: %w", node, ctx.Err())
	}}
	nodes := []string{"slow-engine"}
	for i := range 20 {
		nodes = append(nodes, fmt.Sprintf("10.0.0.%d", i+1))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	got := Observe(ctx, tr, Request{Cluster: "prod", Nodes: nodes, MaxParallel: 4})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Observe took %s after ctx was cancelled", took)
	}
	if n := calls.Load(); n > 4 {
		t.Errorf("the transport was asked for %d nodes after cancellation, want only the 4 started before", n)
	}
	if len(got.Nodes) != len(nodes) {
		t.Fatalf("observed %d nodes, want %d", len(got.Nodes), len(nodes))
	}
	for _, addr := range nodes {
		n := got.Nodes[addr]
		if n == nil || n.Reachable || !errors.Is(n.Err, context.Canceled) || n.Error == "" {
			t.Errorf("node %s: %+v, want unreachable with context.Canceled", addr, n)
		}
	}
}

func TestHealthFromStatus(t *testing.T) {
	for _, tc := range []struct{ status, want string }{
		{"Up 3 minutes (healthy)", "healthy"},
		{"Up 1 second (unhealthy)", "unhealthy"},
		{"Up 2 seconds (health: starting)", "starting"},
		{"Up About an hour", ""},
		{"Up 5 minutes (Paused)", ""},
		{"Exited (0) 2 seconds ago", ""},
		{"Exited (1) 2 seconds ago (healthy)", ""}, // not a form the engine writes
		{"Restarting (1) 3 seconds ago", ""},
		{"Created", ""},
		{"", ""},
		{"Up )", ""},
	} {
		t.Run(tc.status, func(t *testing.T) {
			if got := healthFromStatus(tc.status); got != tc.want {
				t.Errorf("healthFromStatus(%q) = %q, want %q", tc.status, got, tc.want)
			}
		})
	}
}

func FuzzHealthFromStatus(f *testing.F) {
	for _, s := range []string{"Up 3 minutes (healthy)", "Up 2 seconds (health: starting)", "Up )", "Up (", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, status string) {
		switch h := healthFromStatus(status); h {
		case "", "healthy", "unhealthy", "starting":
		default:
			t.Errorf("healthFromStatus(%q) = %q, not a health status", status, h)
		}
	})
}

func TestContainerName(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"/etcd"}, "etcd"},
		{[]string{"/web/db", "/db"}, "db"},
		{nil, "id1"},
	} {
		if got := containerName(container.Summary{ID: "id1", Names: tc.names}); got != tc.want {
			t.Errorf("containerName(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}

func ptr(i int) *int { return &i }

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestExitFromStatus(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   *int
	}{
		{"Restarting (1) 3 seconds ago", ptr(1)},
		{"Exited (137) 2 minutes ago", ptr(137)},
		{"Exited (0) Less than a second ago", ptr(0)},
		{"Up 3 minutes (healthy)", nil},
		{"Created", nil},
		{"Exited (x) 2 minutes ago", nil},
		{"Restarting (1", nil},
		{"", nil},
	} {
		if diff := cmp.Diff(tc.want, exitFromStatus(tc.status)); diff != "" {
			t.Errorf("exitFromStatus(%q) (-want +got):\n%s", tc.status, diff)
		}
	}
}

// TestObserveFilesVia: the files under FilesDir are read through a
// container of the cluster's that bind-mounts the directory, in one call
// and without the helper image; when that container is gone by then, the
// helper's path is taken (here: its image is not on the node, so no files
// are read and the plan writes them all).
func TestObserveFilesVia(t *testing.T) {
	var buf strings.Builder
	tw := tar.NewWriter(&buf)
	body := "apiVersion: v1\n"
	tw.WriteHeader(&tar.Header{Name: "kubernetes/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "kubernetes/admission.yaml", Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(body))})
	tw.Write([]byte(body))
	tw.Close()
	for _, tc := range []struct {
		name      string
		gone      bool
		wantFiles bool
	}{{"through the kubelet's container", false, true}, {"the container gone since the list", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			var mu sync.Mutex
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls = append(calls, r.Method+" "+r.URL.Path[strings.Index(r.URL.Path[1:], "/")+1:])
				mu.Unlock()
				switch {
				case strings.HasSuffix(r.URL.Path, "/version"):
					json.NewEncoder(w).Encode(map[string]string{"Version": "27.5.1", "ApiVersion": "1.41"})
				case strings.HasSuffix(r.URL.Path, "/containers/json"):
					json.NewEncoder(w).Encode([]container.Summary{{
						ID: "k1", Names: []string{"/kubelet"}, Image: "hyperkube", State: "running", Labels: labels("kubelet", "h"),
						Mounts: []container.MountPoint{{Type: mount.TypeBind, Source: "/etc/kubernetes", Destination: "/etc/kubernetes"}},
					}})
				case strings.HasSuffix(r.URL.Path, "/containers/k1/archive") && !tc.gone && r.URL.Query().Get("path") == "/etc/kubernetes":
					w.Header().Set("X-Docker-Container-Path-Stat", "e30=")
					w.Write([]byte(buf.String()))
				default:
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusNotFound)
					w.Write([]byte(`{"message":"not found"}`))
				}
			}))
			defer srv.Close()
			cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithHTTPClient(srv.Client()), client.WithVersion("1.41"))
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			tr := &fakeTransport{DockerFn: func(context.Context, string) (*client.Client, error) { return cli, nil }}
			o := Observe(context.Background(), tr, Request{Cluster: "prod", Nodes: []string{"n1"}, FilesImage: "busybox", FilesDir: "/etc/kubernetes"})
			n := o.Nodes["n1"]
			if !n.Reachable {
				t.Fatalf("not reachable: %v", n.Err)
			}
			if n.FilesRead != tc.wantFiles || tc.wantFiles && n.Files["/etc/kubernetes/admission.yaml"] != FileHash([]byte(body)) {
				t.Errorf("FilesRead %v, files %v; calls %v", n.FilesRead, n.Files, calls)
			}
			helper := slices.ContainsFunc(calls, func(c string) bool { return strings.Contains(c, "/images/") })
			if helper == tc.wantFiles {
				t.Errorf("the helper's image asked for: %v, want %v (calls %v)", helper, !tc.wantFiles, calls)
			}
		})
	}
}
