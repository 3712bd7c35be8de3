package desired

import (
	"strconv"
	"strings"

	"github.com/rigger/rigger/reconcile/pki"
)

// etcd's bootstrap settings.
const (
	// EtcdClusterToken is RKE's --initial-cluster-token, kept so that
	// members RKE created and members rigger adds form one cluster.
	EtcdClusterToken = "etcd-cluster-1"
	// InitialClusterNew bootstraps a new etcd cluster.
	InitialClusterNew = "new"
	// InitialClusterExisting joins a member to a running etcd cluster.
	InitialClusterExisting = "existing"
	// etcdCipherSuites are RKE's TLS cipher suites of etcd (v3.4.15 and
	// later) with their ECDSA counterparts first: rigger's certificates
	// (reconcile/pki) have ECDSA keys, which the RSA suites cannot serve.
	etcdCipherSuites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384," +
		"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
)

// Peer is one member of an etcd cluster's --initial-cluster.
type Peer struct {
	// Name is the member name, EtcdMemberName of the node's hostname.
	Name string
	// PeerURL is https://<internal address>:2380.
	PeerURL string
}

// EtcdPeerURL is the peer URL of the etcd member of a node with this
// internal address.
func EtcdPeerURL(internal string) string { return "https://" + joinHostPort(internal, EtcdPeerPort) }

// EtcdMemberName is the etcd member name of the node with this hostname.
func EtcdMemberName(hostname string) string { return "etcd-" + hostname }

// EtcdBootstrapArgs are the flags an etcd member reads on its first start:
// the members it starts with and whether the cluster is new or existing.
//
// Build gives every etcd node the arguments that bootstrap a new cluster of
// all etcd nodes of cluster.yml. To add a member to a running cluster, the
// planner creates it with EtcdBootstrapArgs(running members plus the new
// one, InitialClusterExisting) after `etcdctl member add`, one member at a
// time; the args it used do not matter afterwards, so they are not part of
// the spec hash.
func EtcdBootstrapArgs(peers []Peer, state string) []string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.Name + "=" + p.PeerURL
	}
	return []string{
		"--initial-cluster=" + strings.Join(parts, ","),
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=" + EtcdClusterToken,
	}
}

func (b *builder) etcdPeers() []Peer {
	peers := make([]Peer, 0, len(b.etcd))
	for _, h := range b.etcd {
		peers = append(peers, Peer{Name: EtcdMemberName(h.hostname), PeerURL: EtcdPeerURL(h.internal)})
	}
	return peers
}

// etcdContainer is RKE's BuildEtcdProcess for an etcd image of v3.4.15 or later
// (client URL without port 4001, strict cipher suites).
func (b *builder) etcdContainer(h *host) Container {
	s := b.c.Services.Etcd
	cert := pki.HostCertName(CertEtcd, h.address, h.internal)
	// A node whose internal address is its address may sit behind NAT
	// (a cloud's public IP), where binding to it fails: RKE listens on
	// every address then.
	listen := h.internal
	endpoint := joinHostPort(h.internal, EtcdClientPort)
	if h.address == h.internal {
		listen = "0.0.0.0"
		endpoint = "127.0.0.1:" + EtcdClientPort
	}
	f := flags{}
	f.set("name", EtcdMemberName(h.hostname))
	f.set("data-dir", EtcdDataDir)
	f.set("listen-client-urls", "https://"+joinHostPort(listen, EtcdClientPort))
	f.set("listen-peer-urls", "https://"+joinHostPort(listen, EtcdPeerPort))
	f.set("advertise-client-urls", "https://"+joinHostPort(h.internal, EtcdClientPort))
	f.set("initial-advertise-peer-urls", EtcdPeerURL(h.internal))
	f.set("trusted-ca-file", certPath(CertCA))
	f.set("peer-trusted-ca-file", certPath(CertCA))
	f.set("cert-file", certPath(cert))
	f.set("key-file", keyPath(cert))
	f.set("peer-cert-file", certPath(cert))
	f.set("peer-key-file", keyPath(cert))
	f.set("cipher-suites", etcdCipherSuites)
	f.options(b.rel.opts.Etcd)
	f.extra(s.BaseService)
	// RKE's old defaults, when neither its options nor extra_args set them.
	for _, name := range []string{"client-cert-auth", "peer-client-cert-auth"} {
		if _, ok := f[name]; !ok {
			f.set(name, "true")
		}
	}

	env := []string{
		"ETCDCTL_API=3",
		"ETCDCTL_CACERT=" + certPath(CertCA),
		"ETCDCTL_CERT=" + certPath(cert),
		"ETCDCTL_KEY=" + keyPath(cert),
		"ETCDCTL_ENDPOINTS=https://" + endpoint,
	}
	var user string
	if s.UID != 0 && s.GID != 0 {
		user = strconv.Itoa(s.UID) + ":" + strconv.Itoa(s.GID)
	}
	return Container{
		Name:       Etcd,
		Image:      s.Image,
		Entrypoint: []string{binDir + "etcd"},
		Args:       f.render(),
		Env:        uniq(append(env, s.ExtraEnv...)),
		Binds: uniq(append([]string{
			hostPath(b.prefix, EtcdHostDataDir) + ":" + EtcdDataDir,
			b.kubernetesBind(),
		}, s.ExtraBinds...)),
		User:          user,
		NetworkMode:   NetworkModeHost,
		RestartPolicy: RestartAlways,
		BootstrapArgs: EtcdBootstrapArgs(b.peers, InitialClusterNew),
	}
}
