package reconciletest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/sshtun"
)

// HoldKubeProxyTimeout bounds how long HoldKubeProxy holds kube-proxy back.
const HoldKubeProxyTimeout = 3 * time.Minute

// HoldKubeProxy is an Applier.Open for fault injection: sessions reach the
// nodes over SSH as usual, but on the node at address the creation of the
// kube-proxy container is held back until flannel there holds the node's
// subnet lease (the Node named hostname carries sysaddons.FlannelPublicIP),
// at most HoldKubeProxyTimeout. So the network plugin's pod on that node
// always starts before kube-proxy has programmed the `kubernetes` Service
// there: the race a cold converge otherwise meets by chance. held (may be
// nil) is closed once a kube-proxy creation there was held back and let
// through.
//
// The transports it makes are closed when the test ends.
func HoldKubeProxy(t testing.TB, address, hostname string, held chan<- struct{}) func(*spec.Cluster, reconcile.Options) (*reconcile.Session, error) {
	var once sync.Once
	return func(c *spec.Cluster, opts reconcile.Options) (*reconcile.Session, error) {
		cfg, err := reach.SSHConfig(c, opts.Log)
		if err != nil {
			return nil, err
		}
		ssh, err := sshtun.New(cfg)
		if err != nil {
			return nil, err
		}
		plain := opts
		h := &holdBack{Transport: ssh, node: address, until: func(ctx context.Context) error {
			err := leaseOf(ctx, c, plain, hostname)
			if err == nil && held != nil {
				once.Do(func() { close(held) })
			}
			return err
		}}
		t.Cleanup(func() { h.Close() })
		opts.Transport = h
		return reconcile.Open(c, opts)
	}
}

// leaseOf waits until the Node hostname carries flannel's lease
// annotation, asking the API server through c's admin kubeconfig.
func leaseOf(ctx context.Context, c *spec.Cluster, opts reconcile.Options, hostname string) error {
	opts.Log = slog.New(slog.DiscardHandler)
	sess, err := reconcile.Open(c, opts)
	if err != nil {
		return err
	}
	defer sess.Close()
	cs, err := adminClient(ctx, sess, c)
	if err != nil {
		return fmt.Errorf("hold kube-proxy back: %w", err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, HoldKubeProxyTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, hostname, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "no " + sysaddons.FlannelPublicIP + " annotation"
		return n.Annotations[sysaddons.FlannelPublicIP] != "", nil
	})
	if err != nil {
		return fmt.Errorf("kube-proxy held back on %s for %s: flannel there got no subnet lease (%s): the network plugin depends on kube-proxy", hostname, HoldKubeProxyTimeout, last)
	}
	return nil
}

// holdBack is a transport whose Docker client for node holds the
// creation of kube-proxy back until until returns.
type holdBack struct {
	transport.Transport
	node  string
	until func(ctx context.Context) error

	mu  sync.Mutex
	cli *client.Client
}

func (h *holdBack) Docker(ctx context.Context, node string) (*client.Client, error) {
	if node != h.node {
		return h.Transport.Docker(ctx, node)
	}
	// The transport's own client first: it checks that the engine answers.
	if _, err := h.Transport.Docker(ctx, node); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cli != nil {
		return h.cli, nil
	}
	rt := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return h.Transport.Dial(ctx, node, "unix", "/var/run/docker.sock")
	}}
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///var/run/docker.sock"),
		client.WithHTTPClient(&http.Client{Transport: &holdRoundTripper{next: rt, until: h.until}}),
		client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	h.cli = cli
	return cli, nil
}

func (h *holdBack) Close() error {
	h.mu.Lock()
	if h.cli != nil {
		h.cli.Close()
	}
	h.mu.Unlock()
	return h.Transport.Close()
}

// holdRoundTripper holds a request that creates the kube-proxy container
// until until returns; its error fails the request.
type holdRoundTripper struct {
	next  http.RoundTripper
	until func(ctx context.Context) error
}

func (h *holdRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/containers/create") && req.URL.Query().Get("name") == desired.KubeProxy {
		if err := h.until(req.Context()); err != nil {
			return nil, err
		}
	}
	return h.next.RoundTrip(req)
}
