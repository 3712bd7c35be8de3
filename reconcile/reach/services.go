package reach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// Services reaches the API server, the etcd members and the components'
// health endpoints of a cluster through the transport to its nodes.
type Services struct {
	Transport transport.Transport
	// Nodes are cluster.yml's nodes; Former those of the last apply it no
	// longer has (etcd members may still run there).
	Nodes, Former []spec.Node
	Log           *slog.Logger
}

// apiServerLocal is the API server as seen from a controlplane node.
const apiServerLocal = "127.0.0.1:" + pki.APIServerPort

// KubeClient returns a client-go client of the cluster's API server as the
// admin (kube-admin), connected through the transport to the loopback of
// a reachable controlplane node: the API server need not be reachable from
// where rigger runs. The first reachable controlplane node of o in
// cluster.yml order serves, the others when its connection fails.
func (s Services) KubeClient(set *pki.Set, o *observe.Cluster) (*kubernetes.Clientset, error) {
	cfg, err := s.RESTConfig(set, o)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	return cs, nil
}

// RESTConfig is the client configuration of KubeClient: the admin, through
// the transport to a reachable controlplane node's loopback.
func (s Services) RESTConfig(set *pki.Set, o *observe.Cluster) (*rest.Config, error) {
	var cps []string
	for _, n := range s.Nodes {
		if slices.Contains(n.Role, spec.RoleControlPlane) {
			if on := o.Nodes[n.Address]; on != nil && on.Reachable {
				cps = append(cps, n.Address)
			}
		}
	}
	if len(cps) == 0 {
		return nil, errors.New("connect to the API server: no controlplane node is reachable")
	}
	admin := set.Certs[pki.KubeAdminCertName]
	cfg := &rest.Config{
		// The name the API server's certificate holds for its loopback.
		Host: "https://" + apiServerLocal,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: set.Trusted(pki.CACertName), CertData: admin.CertPEM, KeyData: admin.KeyPEM,
		},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var errs []error
			for _, node := range cps {
				conn, err := s.Transport.Dial(ctx, node, network, apiServerLocal)
				if err == nil {
					return conn, nil
				}
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		},
		UserAgent: "rigger",
		// client-go's defaults (5 a second, bursts of 10) make the
		// add-ons' plan, two calls an object, take 14 s on a converged
		// cluster; rigger is one client of its own cluster (Flux's
		// controllers default to 50 and bursts of 300).
		QPS:   50,
		Burst: 100,
	}
	return cfg, nil
}

// ErrNoEtcdMember is NoEtcdMember's answer when no etcd member runs.
var ErrNoEtcdMember = errors.New("no node runs an etcd member: the API servers cannot answer")

// NoEtcdMember returns ErrNoEtcdMember when every node of cluster.yml and
// of the last apply answered and none runs an etcd member (a remove
// stopped half-way, a restore under way): the API servers cannot answer,
// and a plan or an apply does not wait for them. nil when a node did not
// answer or one runs etcd; for a cluster on external etcd, whose members
// no node runs, the caller does not ask.
func (s Services) NoEtcdMember(o *observe.Cluster) error {
	for _, n := range slices.Concat(s.Nodes, s.Former) {
		on := o.Nodes[n.Address]
		if on == nil || !on.Reachable {
			return nil
		}
		if c, ok := on.Containers[desired.Etcd]; ok && c.State == "running" {
			return nil
		}
	}
	return ErrNoEtcdMember
}

// EtcdClient connects to the etcd members that run on reachable nodes (of
// cluster.yml or the last apply), each through its own node, with the
// kube-node certificate, which etcd trusts as the API server's.
func (s Services) EtcdClient(ctx context.Context, set *pki.Set, o *observe.Cluster) (*etcdmember.Client, error) {
	internal := map[string]string{} // internal address → node address
	var endpoints []string
	var via []string // nodes that run etcd: they dial members they do not know
	for _, n := range slices.Concat(s.Nodes, s.Former) {
		internal[n.InternalAddress] = n.Address
		on := o.Nodes[n.Address]
		if on == nil || !on.Reachable {
			continue
		}
		if c, ok := on.Containers[desired.Etcd]; ok && c.State == "running" {
			endpoints = append(endpoints, "https://"+net.JoinHostPort(n.InternalAddress, health.EtcdClientPort))
			via = append(via, n.Address)
		}
	}
	if len(endpoints) == 0 {
		return nil, errors.New("connect to etcd: no reachable node runs an etcd member")
	}
	tlsConfig, err := set.ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if n, ok := internal[host]; ok {
			return s.Transport.Dial(ctx, n, "tcp", addr)
		}
		// A member rigger does not know the node of: reach it from the
		// nodes that run etcd, which share its network.
		var errs []error
		for _, n := range via {
			conn, err := s.Transport.Dial(ctx, n, "tcp", addr)
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	return etcdmember.Dial(ctx, endpoints, tlsConfig, dial)
}

// Checker probes components through the transport with the kube-node
// certificate, which etcd and the API server accept.
func (s Services) Checker(set *pki.Set) (*health.Checker, error) {
	cfg, err := set.ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("health checks: %w", err)
	}
	return &health.Checker{Dial: s.Transport.Dial, TLS: cfg, Log: s.Log}, nil
}
