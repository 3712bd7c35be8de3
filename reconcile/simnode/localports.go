package simnode

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/health"
)

// localPort is a node-local TCP port a component serves: it answers only
// while the engine runs a container of that name, as the component's own
// listener does.
type localPort struct {
	component string
	// answer is the status and body of a GET of path, the container having
	// started at started.
	answer func(path string, started time.Time) (int, string)
}

// localPorts are the node-local ports a simulated node answers, with what
// the real components answer there (the kubelet's and kube-proxy's
// health, kube-proxy's metrics): what rigger's health checks read after a
// container is replaced (package health). Every other port (etcd, the API
// server, the controller manager's and the scheduler's TLS endpoints) is
// refused: nothing simulates them.
var localPorts = map[uint32]localPort{
	port(health.KubeletHealthzPort): {component: desired.Kubelet, answer: func(p string, _ time.Time) (int, string) {
		if p == "/healthz" {
			return http.StatusOK, "ok"
		}
		return http.StatusNotFound, "404 page not found\n"
	}},
	port(health.KubeProxyHealthzPort): {component: desired.KubeProxy, answer: func(p string, started time.Time) (int, string) {
		if p == "/healthz" || p == "/livez" {
			now := time.Now().UTC().Format(time.RFC3339Nano)
			return http.StatusOK, fmt.Sprintf(`{"lastUpdated": %q,"currentTime": %q, "nodeEligible": true}`,
				started.UTC().Format(time.RFC3339Nano), now)
		}
		return http.StatusNotFound, "404 page not found\n"
	}},
	// kube-proxy programs the Services' rules once as it starts; the
	// simulation says it did at the container's start.
	port(health.KubeProxyMetricsPort): {component: desired.KubeProxy, answer: func(p string, started time.Time) (int, string) {
		if p == "/metrics" {
			return http.StatusOK, "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced\n" +
				"# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n" +
				"kubeproxy_sync_proxy_rules_last_timestamp_seconds " + strconv.FormatFloat(float64(started.UnixMilli())/1e3, 'f', 3, 64) + "\n"
		}
		return http.StatusNotFound, "404 page not found\n"
	}},
}

func port(s string) uint32 {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		panic(err)
	}
	return uint32(p)
}

// localTCP answers a direct-tcpip channel as sshd on a node would: the
// port of a component whose container runs is connected to it, every
// other is refused.
func (n *Node) localTCP(nc ssh.NewChannel) {
	var msg struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "bad request")
		return
	}
	lp, known := localPorts[msg.Port]
	if !known || !n.local(msg.Host) {
		// OpenSSH sends strerror(errno).
		_ = nc.Reject(ssh.ConnectionFailed, "Connection refused")
		return
	}
	if _, up := n.Engine.running(lp.component); !up {
		_ = nc.Reject(ssh.ConnectionFailed, "Connection refused")
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	go n.serveLocal(ch, lp)
}

// local reports whether host is the node's own: its loopback or its
// address.
func (n *Node) local(host string) bool {
	if host == "localhost" || host == n.Address {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveLocal answers HTTP requests on ch for the component of lp, and
// closes ch when the client is done or the component's container no
// longer runs (its process gone, its connections close).
func (n *Node) serveLocal(ch ssh.Channel, lp localPort) {
	defer ch.Close()
	br := bufio.NewReaderSize(ch, copyBuffer)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
		started, up := n.Engine.running(lp.component)
		if !up {
			return
		}
		status, body := http.StatusMethodNotAllowed, "method not allowed\n"
		if req.Method == http.MethodGet {
			status, body = lp.answer(req.URL.Path, started)
		}
		resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Request: req, Close: req.Close,
			Header:        http.Header{"Content-Type": {contentType(body)}},
			ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
		if err := resp.Write(ch); err != nil || req.Close {
			return
		}
	}
}

func contentType(body string) string {
	if strings.HasPrefix(body, "{") {
		return "application/json"
	}
	return "text/plain; charset=utf-8"
}
