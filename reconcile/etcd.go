package reconcile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// etcdClientPort is where etcd members serve clients.
const etcdClientPort = "2379"

// etcdClient connects to the etcd members that run on reachable nodes (of
// cluster.yml or the last apply), each through its own node, with the
// kube-node certificate, which etcd trusts as the API server's.
func (s *Session) etcdClient(ctx context.Context, set *pki.Set, o *observe.Cluster) (*etcdmember.Client, error) {
	internal := map[string]string{} // internal address → node address
	var endpoints []string
	var via []string // nodes that run etcd: they dial members they do not know
	for _, n := range slices.Concat(s.c.Nodes, s.former) {
		internal[n.InternalAddress] = n.Address
		on := o.Nodes[n.Address]
		if on == nil || !on.Reachable {
			continue
		}
		if c, ok := on.Containers[desired.Etcd]; ok && c.State == "running" {
			endpoints = append(endpoints, "https://"+net.JoinHostPort(n.InternalAddress, etcdClientPort))
			via = append(via, n.Address)
		}
	}
	if len(endpoints) == 0 {
		return nil, errors.New("connect to etcd: no reachable node runs an etcd member")
	}
	node := set.Certs[pki.KubeNodeCertName]
	cert, err := tls.X509KeyPair(node.CertPEM, node.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: the kube-node certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(set.Certs[pki.CACertName].CertPEM)
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if n, ok := internal[host]; ok {
			return s.tr.Dial(ctx, n, "tcp", addr)
		}
		// A member rigger does not know the node of: reach it from the
		// nodes that run etcd, which share its network.
		var errs []error
		for _, n := range via {
			conn, err := s.tr.Dial(ctx, n, "tcp", addr)
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	return etcdmember.Dial(ctx, endpoints, tlsConfig, dial)
}

// observeEtcd reads the etcd cluster's membership into o when a member
// answers; without one (a new cluster, or every member down) o.Etcd stays
// nil and the plan makes no membership change.
func (s *Session) observeEtcd(ctx context.Context, set *pki.Set, o *observe.Cluster) {
	if len(s.c.Services.Etcd.ExternalURLs) > 0 {
		return
	}
	cli, err := s.etcdClient(ctx, set, o)
	if err != nil {
		return
	}
	defer cli.Close()
	members, err := cli.Members(ctx)
	if err != nil {
		s.opts.Log.Warn("etcd membership not read", "cluster", s.c.ClusterName, "error", err)
		return
	}
	o.Etcd = &observe.Etcd{Members: members}
}

// etcdWarnings are what the cluster's etcd layout is worth a word about.
func etcdWarnings(c *spec.Cluster) []string {
	var want []etcdmember.Want
	for _, n := range c.Nodes {
		if slices.Contains(n.Role, spec.RoleEtcd) {
			want = append(want, etcdmember.Want{Node: n.Address})
		}
	}
	return etcdmember.Warnings(want)
}
