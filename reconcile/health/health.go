// Package health probes the components of a node through the transport:
// etcd's /health, the API server's /healthz, the controller manager's and
// the scheduler's healthz, the kubelet's healthz, kube-proxy's healthz and
// its first programming of the Services (its metrics), and an API server
// through nginx-proxy.
// Each probe is an HTTP request dialled from the node (its loopback or
// internal address), so that it checks what the node's own components see
// and needs no port open to rigger.
package health

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/transport"
)

// Dialer dials addr as seen from node (transport.Transport.Dial).
type Dialer func(ctx context.Context, node, network, addr string) (net.Conn, error)

// Ports the probes use, the components' defaults as rigger runs them.
const (
	APIServerPort         = "6443"
	EtcdClientPort        = "2379"
	ControllerManagerPort = "10257"
	SchedulerPort         = "10259"
	KubeletHealthzPort    = "10248"
	KubeProxyHealthzPort  = "10256"
	KubeProxyMetricsPort  = "10249"
)

// Timing of Wait.
const (
	// probeTimeout bounds one probe.
	probeTimeout = 5 * time.Second
	// firstInterval and maxInterval bound the pause between probes.
	firstInterval = 500 * time.Millisecond
	maxInterval   = 5 * time.Second
)

// Checker probes components. Its zero value is not usable: Dial, and for
// etcd and the API server TLS, must be set.
type Checker struct {
	Dial Dialer
	// TLS verifies etcd's and the API server's certificates (RootCAs) and
	// authenticates to them (Certificates): pki.Set.ClientTLS, the
	// kube-node certificate, which both accept.
	TLS *tls.Config
	// Log, when set, gets each failed probe of Wait at debug level: what
	// a long wait for a component was waiting on.
	Log *slog.Logger
}

// Target is one component of one node to probe.
type Target struct {
	// Node is the node's address, as the transport names it.
	Node string
	// InternalAddress is where etcd listens on the node.
	InternalAddress string
	// Component is the container name (desired.Etcd, …).
	Component string
}

func (t Target) String() string { return t.Node + " " + t.Component }

// Probes reports whether Check knows how to probe a component.
func Probes(component string) bool {
	switch component {
	case desired.Etcd, desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler,
		desired.Kubelet, desired.KubeProxy, desired.NginxProxy:
		return true
	}
	return false
}

// Check probes the target once. A component it does not know is healthy.
func (c *Checker) Check(ctx context.Context, t Target) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	switch t.Component {
	case desired.Etcd:
		body, err := c.get(ctx, t.Node, "https://"+net.JoinHostPort(t.InternalAddress, EtcdClientPort)+"/health", c.verified(t.InternalAddress))
		if err != nil {
			return err
		}
		return parseEtcdHealth(body)
	case desired.KubeAPIServer:
		_, err := c.get(ctx, t.Node, "https://127.0.0.1:"+APIServerPort+"/healthz", c.verified("127.0.0.1"))
		return err
	case desired.KubeControllerManager:
		_, err := c.get(ctx, t.Node, "https://127.0.0.1:"+ControllerManagerPort+"/healthz", selfSigned())
		return err
	case desired.KubeScheduler:
		_, err := c.get(ctx, t.Node, "https://127.0.0.1:"+SchedulerPort+"/healthz", selfSigned())
		return err
	case desired.Kubelet:
		_, err := c.get(ctx, t.Node, "http://127.0.0.1:"+KubeletHealthzPort+"/healthz", nil)
		return err
	case desired.KubeProxy:
		if _, err := c.get(ctx, t.Node, "http://127.0.0.1:"+KubeProxyHealthzPort+"/healthz", nil); err != nil {
			return err
		}
		return c.kubeProxySynced(ctx, t.Node)
	case desired.NginxProxy:
		// Something answers TLS on the proxy's port: an API server
		// through it. Its certificate is the API server's.
		_, err := c.get(ctx, t.Node, "https://127.0.0.1:"+APIServerPort+"/healthz", c.verified("127.0.0.1"))
		return err
	}
	return nil
}

// kubeProxySyncMetric is when kube-proxy last programmed the Services'
// rules (seconds since the epoch; 0 before the first time).
const kubeProxySyncMetric = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"

// kubeProxySynced checks that kube-proxy has programmed the Services'
// rules at least once: its /healthz answers 200 while it starts, before
// it has (kube-proxy counts a proxier "healthy while it's starting up"),
// and until then nothing on the node reaches a Service (the `kubernetes`
// one included). Its metrics say so, where RKE's kube-proxy serves them
// (KubeProxyMetricsPort on the node's loopback); where nothing listens
// there (metrics-bind-address moved by extra_args), only /healthz counts.
func (c *Checker) kubeProxySynced(ctx context.Context, node string) error {
	body, err := c.get(ctx, node, "http://127.0.0.1:"+KubeProxyMetricsPort+"/metrics", nil)
	if err != nil {
		if refused(err) {
			return nil
		}
		return err
	}
	if synced(string(body)) {
		return nil
	}
	return fmt.Errorf("kube-proxy has not programmed the Services' rules yet (%s is 0 or missing)", kubeProxySyncMetric)
}

// synced reports whether the metrics text has kubeProxySyncMetric, and
// every sample of it (one per IP family from Kubernetes 1.33 on:
// `{ip_family="IPv4"}`) is after the epoch.
func synced(metrics string) bool {
	samples := 0
	for line := range strings.Lines(metrics) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), kubeProxySyncMetric)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "{"):
			_, rest, ok = strings.Cut(rest, "}")
		case !strings.HasPrefix(rest, " "):
			ok = false // another metric whose name begins alike
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return false
		}
		if v, err := strconv.ParseFloat(f[0], 64); err != nil || v <= 0 {
			return false
		}
		samples++
	}
	return samples > 0
}

// refused reports whether err is a dial that nothing answered.
func refused(err error) bool {
	var de *transport.DialError
	return errors.As(err, &de) || errors.Is(err, syscall.ECONNREFUSED)
}

// Bounds of parseEtcdHealth: etcd answers about 30 bytes, and the error
// ends up in status.yml.
const (
	maxEtcdHealthSize  = 64 << 10
	maxHealthErrorSize = 512
)

// parseEtcdHealth reads etcd's answer to /health: nil when it reports
// itself healthy, otherwise an error with its health and reason (clipped).
func parseEtcdHealth(body []byte) error {
	if len(body) > maxEtcdHealthSize {
		return fmt.Errorf("etcd /health: answered more than %d KiB, not etcd's answer", maxEtcdHealthSize>>10)
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("etcd /health: %w", err)
	}
	if h.Health != "true" {
		return fmt.Errorf("etcd reports health %q: %s", clip.Ellipsis(h.Health, 40), clip.Ellipsis(h.Reason, 200))
	}
	return nil
}

// EtcdMetrics reads the Prometheus metrics of the etcd member of t (its
// client port's /metrics).
func (c *Checker) EtcdMetrics(ctx context.Context, t Target) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return c.get(ctx, t.Node, "https://"+net.JoinHostPort(t.InternalAddress, EtcdClientPort)+"/metrics", c.verified(t.InternalAddress))
}

// verified is the TLS configuration for etcd and the API server: their
// certificate verified against the cluster CA for the address dialled, and
// the client certificate.
func (c *Checker) verified(serverName string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLS != nil {
		cfg = c.TLS.Clone()
	}
	cfg.ServerName = serverName
	return cfg
}

// selfSigned is the TLS configuration for the controller manager and the
// scheduler: they serve a certificate they made for themselves, which
// nothing can verify; the probe runs over the transport to the node's
// loopback, so the peer is the node's own process.
func selfSigned() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // see above
}

// get fetches url from the node and returns the body of a 200 answer.
func (c *Checker) get(ctx context.Context, node, url string, tlsConfig *tls.Config) ([]byte, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return c.Dial(ctx, node, network, addr)
		},
		TLSClientConfig:   tlsConfig,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s: %s", url, resp.Status, firstLines(string(answer), 5))
	}
	return answer, nil
}

// Wait probes the target until it is healthy, ctx ends or timeout passes,
// pausing longer between probes each time. The error holds the last
// probe's failure.
func (c *Checker) Wait(ctx context.Context, t Target, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	interval := firstInterval
	for probes := 1; ; probes++ {
		err := c.Check(ctx, t)
		if err == nil {
			return nil
		}
		if c.Log != nil {
			c.Log.Debug("not healthy yet", "node", t.Node, "component", t.Component, "probes", probes, "error", err)
		}
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return &UnhealthyError{Target: t, Waited: timeout, Err: err}
			}
			return ctx.Err()
		case <-timer.C:
		}
		interval = min(interval*2, maxInterval)
	}
}

// UnhealthyError is a component that did not become healthy in time.
type UnhealthyError struct {
	Target Target
	Waited time.Duration
	// Err is the last probe's failure.
	Err error
}

func (e *UnhealthyError) Error() string {
	return fmt.Sprintf("node %s: %s not healthy after %s: %v", e.Target.Node, e.Target.Component, e.Waited, e.Err)
}

func (e *UnhealthyError) Unwrap() error { return e.Err }

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " ")
}
