package pki

import (
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec"
)

// Request is what the cluster needs certificates for, independent of
// cluster.yml's layout.
type Request struct {
	// ClusterName names the cluster in kubeconfigs.
	ClusterName string
	// Nodes of the cluster, with their roles.
	Nodes []Node
	// ServiceClusterIPRange is the Service CIDR (or two, comma-separated, for
	// dual stack); the first IP of each is an API server SAN.
	ServiceClusterIPRange string
	// ClusterDomain is the cluster's DNS domain, e.g. cluster.local.
	ClusterDomain string
	// SANs are the extra names and IPs of the API server (authentication.sans).
	SANs []string
	// Rotate, when set, asks Ensure to reissue certificates that are
	// still good (a certificate rotation). RequestFor leaves it nil: a
	// rotation is requested once, and who asks decides when it is done.
	Rotate *Rotation
}

// Node is one machine of the cluster as the PKI sees it.
type Node struct {
	// Name identifies the node in messages: its address in cluster.yml.
	Name string
	// Address rigger reaches the node at.
	Address string
	// InternalAddress the components talk to each other on.
	InternalAddress string
	// Hostname is the node's name in Kubernetes.
	Hostname string

	Etcd, ControlPlane, Worker bool
}

// RequestFor is the Request of a cluster as spec.Load returns it, defaults
// applied: spec alone decides what an empty key means.
func RequestFor(c *spec.Cluster) Request {
	r := Request{
		ClusterName:           c.ClusterName,
		ServiceClusterIPRange: c.Services.KubeAPI.ServiceClusterIPRange,
		ClusterDomain:         c.Services.Kubelet.ClusterDomain,
		SANs:                  slices.Clone(c.Authentication.SANs),
	}
	for _, n := range c.Nodes {
		r.Nodes = append(r.Nodes, Node{
			Name:            n.Address,
			Address:         n.Address,
			InternalAddress: n.InternalAddress,
			Hostname:        n.HostnameOverride,
			Etcd:            slices.Contains(n.Role, spec.RoleEtcd),
			ControlPlane:    slices.Contains(n.Role, spec.RoleControlPlane),
			Worker:          slices.Contains(n.Role, spec.RoleWorker),
		})
	}
	return r
}

// Names of the certificates, as RKE names them (and their files on the nodes).
const (
	CACertName                 = "kube-ca"
	RequestHeaderCACertName    = "kube-apiserver-requestheader-ca"
	KubeAPICertName            = "kube-apiserver"
	KubeControllerCertName     = "kube-controller-manager"
	KubeSchedulerCertName      = "kube-scheduler"
	KubeProxyCertName          = "kube-proxy"
	KubeNodeCertName           = "kube-node"
	KubeAdminCertName          = "kube-admin"
	APIProxyClientCertName     = "kube-apiserver-proxy-client"
	ServiceAccountTokenKeyName = "kube-service-account-token"
	etcdCertPrefix             = "kube-etcd-"

	// The external etcd's CA and client certificate
	// (services.etcd.ca_cert, cert and key), written beside the PKI's
	// files on controlplane nodes. They are the user's, not the PKI's:
	// FromFiles leaves them out.
	ExternalEtcdCACertName     = "kube-etcd-client-ca"
	ExternalEtcdClientCertName = "kube-etcd-client"
)

// EtcdCertName is the name of an etcd node's certificate, RKE's rule: its
// internal address (its address when they are equal), in lower case, with
// dots (and an IPv6 address's colons) turned into dashes: kube-etcd-10-0-0-1.
func EtcdCertName(n Node) string {
	return HostCertName(strings.TrimSuffix(etcdCertPrefix, "-"), n.Address, n.InternalAddress)
}

// HostCertName is RKE's name of a per-node certificate: prefix, a dash and
// the node's internal address (its address when they are equal), lower case,
// with dots and colons turned into dashes: kube-etcd-10-0-0-1.
func HostCertName(prefix, address, internal string) string {
	a := address
	if internal != "" && internal != address {
		a = internal
	}
	return prefix + "-" + strings.NewReplacer(".", "-", ":", "-").Replace(strings.ToLower(a))
}

// kind says how a name's material is made.
type kind int

const (
	kindLeaf kind = iota
	kindCA
	kindKeyPair // a bare key pair: the service-account token signing key
)

// identity is what a certificate must say; a certificate that says anything
// else is reissued.
type identity struct {
	kind   kind
	signer string // name of the CA that signs a leaf
	cn     string
	orgs   []string
	dns    []string // sorted, unique
	ips    []string // sorted, unique, canonical form
	usages []x509.ExtKeyUsage
}

// sans is the identity's SANs in one sorted list, for messages.
func (id identity) sans() []string {
	s := append(slices.Clone(id.dns), id.ips...)
	slices.Sort(s)
	return s
}

// desired is every name the request needs, with its identity.
func desired(req Request) (map[string]identity, error) {
	serverClient := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	clientOnly := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	client := func(cn string, orgs ...string) identity {
		return identity{kind: kindLeaf, signer: CACertName, cn: cn, orgs: orgs, usages: clientOnly}
	}
	out := map[string]identity{
		CACertName:                 {kind: kindCA, cn: CACertName},
		RequestHeaderCACertName:    {kind: kindCA, cn: RequestHeaderCACertName},
		ServiceAccountTokenKeyName: {kind: kindKeyPair},
		KubeControllerCertName:     client("system:kube-controller-manager"),
		KubeSchedulerCertName:      client("system:kube-scheduler"),
		KubeProxyCertName:          client("system:kube-proxy"),
		KubeNodeCertName:           client("system:node", "system:nodes"),
		KubeAdminCertName:          client("kube-admin", "system:masters"),
		APIProxyClientCertName: {
			kind: kindLeaf, signer: RequestHeaderCACertName,
			cn: APIProxyClientCertName, usages: clientOnly,
		},
	}

	apiSANs := []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if req.ClusterDomain != "" {
		apiSANs = append(apiSANs, "kubernetes.default.svc."+req.ClusterDomain)
	}
	for cidr := range strings.SplitSeq(req.ServiceClusterIPRange, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(cidr))
		if err != nil {
			return nil, fmt.Errorf("parse service cluster IP range %q: %w", req.ServiceClusterIPRange, err)
		}
		apiSANs = append(apiSANs, p.Masked().Addr().Next().String())
	}
	for _, n := range req.Nodes {
		if n.ControlPlane {
			apiSANs = append(apiSANs, n.Address, n.InternalAddress, n.Hostname)
		}
	}
	apiSANs = append(apiSANs, req.SANs...)
	api := identity{kind: kindLeaf, signer: CACertName, cn: KubeAPICertName, usages: serverClient}
	api.dns, api.ips = splitSANs(apiSANs)
	out[KubeAPICertName] = api

	for _, n := range req.Nodes {
		if !n.Etcd {
			continue
		}
		name := EtcdCertName(n)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("name etcd certificate of node %s: another node's is named %s too", n.Name, name)
		}
		id := identity{kind: kindLeaf, signer: CACertName, cn: name, usages: serverClient}
		id.dns, id.ips = splitSANs([]string{n.Address, n.InternalAddress, n.Hostname, "127.0.0.1", "localhost"})
		out[name] = id
	}
	return out, nil
}

// splitSANs sorts names into DNS names and IPs, canonical, sorted and unique.
func splitSANs(sans []string) (dns, ips []string) {
	for _, s := range sans {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip.String())
			continue
		}
		dns = append(dns, strings.ToLower(s))
	}
	slices.Sort(dns)
	slices.Sort(ips)
	return slices.Compact(dns), slices.Compact(ips)
}

// Names are the names of every certificate and key the request needs,
// sorted: what rigger takes over from another PKI (RKE's) and what Ensure
// keeps.
func (r Request) Names() ([]string, error) {
	want, err := desired(r)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(want)), nil
}
