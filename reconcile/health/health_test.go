package health

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/transport"
)

// cluster issues a real PKI for one node.
func cluster(t *testing.T) *pki.Set {
	t.Helper()
	req := pki.Request{ClusterName: "t", ServiceClusterIPRange: "10.43.0.0/16", ClusterDomain: "cluster.local",
		Nodes: []pki.Node{{Name: "10.0.0.1", Address: "10.0.0.1", InternalAddress: "10.0.0.1", Hostname: "n1", Etcd: true, ControlPlane: true, Worker: true}}}
	set, _, err := pki.Ensure(nil, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func pair(t *testing.T, set *pki.Set, name string) tls.Certificate {
	t.Helper()
	c := set.Certs[name]
	kp, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// server starts a TLS server with the named certificate that requires a
// client certificate of the cluster CA and answers h.
func server(t *testing.T, set *pki.Set, cert string, h http.HandlerFunc) *httptest.Server {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(set.Certs[pki.CACertName].CertPEM)
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair(t, set, cert)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// checker dials addresses "as seen from the node" through a table.
func checker(t *testing.T, set *pki.Set, routes map[string]string) (*Checker, *[]string) {
	var dialed []string
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(set.Certs[pki.CACertName].CertPEM)
	return &Checker{
		Dial: func(ctx context.Context, node, network, addr string) (net.Conn, error) {
			dialed = append(dialed, node+">"+addr)
			to, ok := routes[addr]
			if !ok {
				// As the transports say it of a port nothing listens on.
				return nil, &transport.DialError{Node: node, Network: network, Addr: addr, Err: errors.New("connection refused")}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		},
		TLS: &tls.Config{Certificates: []tls.Certificate{pair(t, set, pki.KubeNodeCertName)}, RootCAs: pool},
	}, &dialed
}

func TestCheck(t *testing.T) {
	set := cluster(t)
	etcdCert := pki.EtcdCertName(pki.Node{Address: "10.0.0.1", InternalAddress: "10.0.0.1"})
	etcdHealthy := server(t, set, etcdCert, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"health":"true","reason":""}`))
	})
	etcdSick := server(t, set, etcdCert, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"health":"false","reason":"RAFT NO LEADER"}`))
	})
	api := server(t, set, pki.KubeAPICertName, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
		w.Write([]byte("ok"))
	})
	kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "[-]syncloop failed", http.StatusInternalServerError)
	}))
	defer kubelet.Close()
	proxyHealthz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"lastUpdated": "2026-11-28T12:00:00Z","currentTime": "2026-11-28T12:00:00Z", "nodeEligible": true}`))
	}))
	defer proxyHealthz.Close()
	metrics := func(body string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }))
		t.Cleanup(s.Close)
		return s
	}
	proxySynced := metrics("# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced\n" +
		"# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\nkubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7643312e+09\n")
	proxyStarting := metrics("# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\nkubeproxy_sync_proxy_rules_last_timestamp_seconds 0\n")
	impostor := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer impostor.Close()
	host := func(s *httptest.Server) string { return s.Listener.Addr().String() }

	for _, tc := range []struct {
		name      string
		routes    map[string]string
		component string
		wantErr   string
	}{
		{"etcd healthy", map[string]string{"10.0.0.1:2379": host(etcdHealthy)}, desired.Etcd, ""},
		{"etcd without leader", map[string]string{"10.0.0.1:2379": host(etcdSick)}, desired.Etcd, "RAFT NO LEADER"},
		{"api server", map[string]string{"127.0.0.1:6443": host(api)}, desired.KubeAPIServer, ""},
		{"nginx-proxy reaches an API server", map[string]string{"127.0.0.1:6443": host(api)}, desired.NginxProxy, ""},
		{"api server down", nil, desired.KubeAPIServer, "connection refused"},
		{"kubelet unhealthy", map[string]string{"127.0.0.1:10248": host(kubelet)}, desired.Kubelet, "500 Internal Server Error: [-]syncloop failed"},
		{"server not of the cluster CA", map[string]string{"10.0.0.1:2379": host(impostor)}, desired.Etcd, "failed to verify certificate"},
		{"unknown component", nil, "calico-node", ""},
		{"kube-proxy synced", map[string]string{"127.0.0.1:10256": host(proxyHealthz), "127.0.0.1:10249": host(proxySynced)}, desired.KubeProxy, ""},
		{"kube-proxy healthy but not synced yet", map[string]string{"127.0.0.1:10256": host(proxyHealthz), "127.0.0.1:10249": host(proxyStarting)},
			desired.KubeProxy, "kube-proxy has not programmed the Services' rules yet"},
		{"kube-proxy's metrics not on the node's loopback: its healthz counts", map[string]string{"127.0.0.1:10256": host(proxyHealthz)}, desired.KubeProxy, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, dialed := checker(t, set, tc.routes)
			err := c.Check(context.Background(), Target{Node: "10.0.0.1", InternalAddress: "10.0.0.1", Component: tc.component})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
			}
			for _, d := range *dialed {
				if !strings.HasPrefix(d, "10.0.0.1>") {
					t.Errorf("dialed %s, not through node 10.0.0.1", d)
				}
			}
		})
	}
}

func TestWaitTimesOut(t *testing.T) {
	set := cluster(t)
	c, dialed := checker(t, set, nil)
	var logged bytes.Buffer
	c.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	err := c.Wait(context.Background(), Target{Node: "10.0.0.1", Component: desired.KubeAPIServer}, 1200*time.Millisecond)
	var ue *UnhealthyError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "kube-apiserver not healthy after 1.2s") {
		t.Fatalf("got %v, want an UnhealthyError", err)
	}
	if len(*dialed) < 2 {
		t.Errorf("probed %d times in 1.2s, want a retry", len(*dialed))
	}
	// Each failed probe is logged, with its error: what a wait waits on.
	if lines := strings.Count(logged.String(), `msg="not healthy yet" node=10.0.0.1 component=kube-apiserver probes=`); lines < 2 {
		t.Errorf("%d failed probes logged, want each:\n%s", lines, logged.String())
	}
}

// TestKubeProxySynced reads kube-proxy's sync metric as 1.32 and earlier
// write it and as 1.33 and later do (a sample per IP family).
func TestKubeProxySynced(t *testing.T) {
	const m = kubeProxySyncMetric
	for _, tc := range []struct {
		metrics string
		want    bool
	}{
		{"# TYPE " + m + " gauge\n" + m + " 1.7643312e+09\n", true},
		{m + " 0\n", false},
		{"", false},
		{m + `{ip_family="IPv4"} 1.7643312e+09` + "\n" + m + `{ip_family="IPv6"} 1.7643312e+09` + "\n", true},
		{m + `{ip_family="IPv4"} 1.7643312e+09` + "\n" + m + `{ip_family="IPv6"} 0` + "\n", false},
		{m + "_count 3\n", false},
		{m + "{broken 5\n", false},
	} {
		if got := synced(tc.metrics); got != tc.want {
			t.Errorf("synced(%q) = %v, want %v", tc.metrics, got, tc.want)
		}
	}
}
