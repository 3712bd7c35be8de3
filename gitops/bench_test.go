package gitops_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// BenchmarkServeSandbox measures, for a one-flag change of a one-node
// cluster on the sandbox, the time from `git push` to the start of the
// reconcile, with the webhook (the post-receive hook calls it) and with
// polling every second, and from the push to the cluster converged.
func BenchmarkServeSandbox(b *testing.B) {
	sb := sandboxtest.Start(b, sandbox.Options{Subnet: subnet, Nodes: 1, Images: true})
	yml := sandboxtest.NetworkOnly(sandboxtest.ClusterYML(b, sb, map[int][]string{0: {spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}}))
	for _, mode := range []string{"webhook", "poll"} {
		b.Run(mode, func(b *testing.B) {
			events := make(chan gitops.Event, 64)
			srv, o := startBenchServer(b, mode, events)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Run(ctx) }()
			defer func() { cancel(); <-done }()

			o.commit(b, "the cluster", map[string]string{clusterPath: yml})
			o.push(b)
			waitEvent(b, events, gitops.EventReconcileEnd, 10*time.Minute)

			var toStart, toConverged time.Duration
			flag := false
			for b.Loop() {
				flag = !flag
				content := yml
				if flag {
					content = strings.Replace(yml, oneFlag, withFlag, 1)
				}
				o.pull(b)
				o.commit(b, "flip a kube-proxy flag", map[string]string{clusterPath: content})
				drain(events)
				pushed := time.Now()
				o.push(b)
				waitEvent(b, events, gitops.EventReconcileStart, time.Minute)
				toStart += time.Since(pushed)
				if e := waitEvent(b, events, gitops.EventReconcileEnd, 5*time.Minute); e.Err != nil {
					b.Fatalf("reconcile: %v", e.Err)
				}
				toConverged += time.Since(pushed)
			}
			b.ReportMetric(float64(toStart.Milliseconds())/float64(b.N), "ms-push-to-start/op")
			b.ReportMetric(float64(toConverged.Milliseconds())/float64(b.N), "ms-push-to-converged/op")
		})
	}
}

// startBenchServer is an in-process server on a fresh origin: with
// "webhook", the origin's hook calls its webhook and it never polls; with
// "poll", it fetches every second.
func startBenchServer(b *testing.B, mode string, events chan gitops.Event) (*gitops.Server, *origin) {
	b.Helper()
	var srv *gitops.Server
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	b.Cleanup(ts.Close)
	var port int
	fmt.Sscanf(ts.URL[strings.LastIndex(ts.URL, ":")+1:], "%d", &port)
	o := newOrigin(b, port)
	repo, err := gitrepo.Open(context.Background(), filepath.Join(b.TempDir(), "clone"), "file://"+o.bare, gitrepo.Auth{})
	if err != nil {
		b.Fatal(err)
	}
	interval := time.Second
	if mode == "webhook" {
		interval = time.Hour
	}
	srv, err = gitops.New(gitops.Config{Repo: repo, Branch: "main", Path: "clusters", StateDir: b.TempDir(),
		Interval: interval, DriftInterval: time.Hour,
		Author: object.Signature{Name: "rigger-bench", Email: "rigger@example.test"},
		Events: func(e gitops.Event) {
			select {
			case events <- e:
			default:
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	if mode == "webhook" {
		h, err := webhook.New(webhook.Config{Secret: []byte(secret), Branch: "main", Trigger: func(webhook.Event) { srv.Trigger() }})
		if err != nil {
			b.Fatal(err)
		}
		mux.Handle(webhook.Path([]byte(secret)), h)
	}
	return srv, o
}

func drain(events chan gitops.Event) {
	for {
		select {
		case <-events:
		default:
			return
		}
	}
}
