package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// testLeaseTiming keeps the cluster Lease short in tests.
var testLeaseTiming = lock.LeaseTiming{Duration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}

// leaseSession is a session whose log is returned, for leaseCluster.
func leaseSession(t *testing.T) (*Session, *bytes.Buffer) {
	t.Helper()
	c := &spec.Cluster{ClusterName: "c", Nodes: []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleControlPlane}}}}
	spec.SetDefaults(c)
	var logged bytes.Buffer
	s, err := Open(c, Options{StateDir: t.TempDir(), Transport: struct{ transport.Transport }{},
		Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, &logged
}

// answering is an API server that answers every request for the cluster's
// Lease with status code and body.
func answering(t *testing.T, code int, body string) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/namespaces/"+ClusterLeaseNamespace+"/leases/"+ClusterLeaseName) {
			http.NotFound(w, r)
			return
		}
		if strings.HasPrefix(body, "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
}

// statusBody is the body of an API server's refusal.
func statusBody(t *testing.T, err *apierrors.StatusError) string {
	t.Helper()
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	b, jerr := json.Marshal(st)
	if jerr != nil {
		t.Fatal(jerr)
	}
	return string(b)
}

// unreachable is an API server address nothing listens on.
func unreachable(t *testing.T) kubernetes.Interface {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://" + addr})
}

// TestLeaseClusterFailsClosed: an API server that answers but does not
// give the Lease stops the apply, naming the Lease and why; only one that
// does not answer at all lets it go on, saying so in the log.
func TestLeaseClusterFailsClosed(t *testing.T) {
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases").GroupResource()
	forbidden := apierrors.NewForbidden(leases, ClusterLeaseName, errors.New(`User "rigger" cannot get resource "leases"`))
	tests := []struct {
		name    string
		cs      func(t *testing.T) kubernetes.Interface
		down    error
		refused []string
		logged  string
	}{
		{name: "forbidden", cs: func(t *testing.T) kubernetes.Interface {
			return answering(t, http.StatusForbidden, statusBody(t, forbidden))
		}, refused: []string{"lease kube-system/rigger-apply", "forbidden", "cannot get resource"}},
		{name: "server error", cs: func(t *testing.T) kubernetes.Interface {
			return answering(t, http.StatusInternalServerError, "etcdserver: request timed out")
		}, refused: []string{"lease kube-system/rigger-apply", "etcdserver: request timed out"}},
		{name: "API server not answering", cs: unreachable, logged: "does not answer"},
		{name: "no controlplane node reachable", cs: func(*testing.T) kubernetes.Interface { return nil }, logged: "no controlplane node is reachable"},
		// Not asked: one that would refuse the Lease is never reached.
		{name: "no node runs an etcd member", cs: func(t *testing.T) kubernetes.Interface {
			return answering(t, http.StatusForbidden, statusBody(t, forbidden))
		}, down: reach.ErrNoEtcdMember, logged: "no node runs an etcd member"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, logged := leaseSession(t)
			release, err := s.leaseCluster(t.Context(), tt.cs(t), tt.down, "apply", lock.LeaseOptions{Timing: testLeaseTiming})
			if tt.refused == nil {
				if err != nil {
					t.Fatalf("leaseCluster: %v, want the apply to go on", err)
				}
				release()
				if !strings.Contains(logged.String(), tt.logged) || !strings.Contains(logged.String(), "without the cluster's Lease") {
					t.Errorf("log %q does not say %q and that the apply goes on without the Lease", logged.String(), tt.logged)
				}
				return
			}
			if err == nil {
				release()
				t.Fatal("leaseCluster went on without the Lease")
			}
			if reason, stalled := stall.Classify(err); reason != stall.Failed || stalled {
				t.Errorf("classified %s, stalled %v; want %s, retried", reason, stalled, stall.Failed)
			}
			for _, want := range tt.refused {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}

// TestLeaseClusterOnAPIServer: on a real API server the cluster's Lease is
// taken and given up; a user without rights to Leases is refused; a Lease
// held by another rigger is LockHeld, or waited for.
func TestLeaseClusterOnAPIServer(t *testing.T) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	holderOf := func(t *testing.T) string {
		t.Helper()
		l, err := cs.CoordinationV1().Leases(ClusterLeaseNamespace).Get(t.Context(), ClusterLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}

	t.Run("taken and given up", func(t *testing.T) {
		s, _ := leaseSession(t)
		release, err := s.leaseCluster(t.Context(), cs, nil, "apply", lock.LeaseOptions{Timing: testLeaseTiming})
		if err != nil {
			t.Fatal(err)
		}
		if id := holderOf(t); !strings.HasPrefix(id, "rigger apply on ") {
			t.Errorf("Lease held by %q, want this apply", id)
		}
		release()
		if id := holderOf(t); id != "" {
			t.Errorf("Lease held by %q after release", id)
		}
	})

	t.Run("no rights to Leases", func(t *testing.T) {
		cfg := rest.CopyConfig(srv.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-rights"}
		s, _ := leaseSession(t)
		_, err := s.leaseCluster(t.Context(), kubernetes.NewForConfigOrDie(cfg), nil, "apply", lock.LeaseOptions{Timing: testLeaseTiming})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "lease kube-system/rigger-apply") {
			t.Fatalf("leaseCluster as a user without rights: %v, want a refusal naming the Lease, forbidden", err)
		}
	})

	t.Run("held by another rigger", func(t *testing.T) {
		other := lock.Holder{ID: "rigger serve on elsewhere (pid 7)", Host: "elsewhere", PID: 7, Command: "serve", Since: time.Now()}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, release, err := lock.Lease(ctx, cs, ClusterLeaseNamespace, ClusterLeaseName, other, lock.LeaseOptions{Timing: testLeaseTiming})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := leaseSession(t)
		_, err = s.leaseCluster(t.Context(), cs, nil, "apply", lock.LeaseOptions{Timing: testLeaseTiming})
		var held *lock.HeldError
		if reason, _ := stall.Classify(err); !errors.As(err, &held) || reason != stall.LockHeld || held.Holder.ID != other.ID {
			t.Fatalf("leaseCluster while %s holds the Lease: %v (%s)", other.ID, err, reason)
		}

		waiting := make(chan *lock.HeldError, 1)
		done := make(chan error, 1)
		go func() {
			rel, err := s.leaseCluster(t.Context(), cs, nil, "apply", lock.LeaseOptions{Timing: testLeaseTiming, Wait: true,
				Waiting: func(e *lock.HeldError) {
					select {
					case waiting <- e:
					default:
					}
				}})
			if err == nil {
				rel()
			}
			done <- err
		}()
		select {
		case e := <-waiting:
			if e.Holder.ID != other.ID {
				t.Errorf("waiting for %s, want %s", e.Holder.ID, other.ID)
			}
		case err := <-done:
			t.Fatalf("leaseCluster with Wait returned (%v) while %s held the Lease", err, other.ID)
		}
		release()
		if err := <-done; err != nil {
			t.Fatalf("leaseCluster with Wait after the holder finished: %v", err)
		}
	})
}
