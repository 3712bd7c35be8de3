package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/docker/docker/client"
	"github.com/spf13/cobra"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/pki"
)

func newSnapshotterCommand() *cobra.Command {
	var config, sslDir, dockerHost string
	cmd := &cobra.Command{
		Use:   desired.SnapshotterCommand,
		Short: "Take the cluster's scheduled etcd snapshots on this etcd node (the etcd-rolling-snapshots container)",
		Long: `etcd-snapshotter is what the etcd-rolling-snapshots container runs on every
etcd node: the schedule of services.etcd.backup_config without rigger serve.
At each check it reads its configuration file (written by rigger apply), lists
the snapshots of its node and of S3, and, when a scheduled snapshot is due and
it wins the claim of the schedule's slot in etcd, takes it from its node's etcd
member, verifies it, keeps it with its sidecar, uploads it to S3, then applies
the retention: exactly as rigger serve's schedule (docs/etcd-snapshots.md).

It reaches its node's Docker engine (--docker-host) to run etcdctl from the
etcd image, and its etcd member with the node's kube-node certificate (under
--ssl-dir). Logs are JSON lines on stderr. It exits non-zero only when its
configuration cannot be read.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil)).With("component", desired.EtcdRollingSnapshots)
			cli, err := client.NewClientWithOpts(client.WithHost(dockerHost), client.WithAPIVersionNegotiation())
			if err != nil {
				return fmt.Errorf("--docker-host %s: %w", dockerHost, err)
			}
			defer cli.Close()
			l := &snapshotterLoader{config: config, sslDir: sslDir, engine: cli, log: log}
			log.Info("etcd-rolling-snapshots started", "config", config)
			return etcdsnap.RunSnapshotter(cmd.Context(), etcdsnap.SnapshotterOptions{Load: l.load, Now: time.Now, Log: log})
		},
	}
	cmd.Flags().StringVar(&config, "config", desired.SnapshotterConfigFile, "the configuration file rigger writes on the node")
	cmd.Flags().StringVar(&sslDir, "ssl-dir", desired.SSLDir, "the node's certificates (kube-ca.pem, kube-node.pem, kube-node-key.pem)")
	cmd.Flags().StringVar(&dockerHost, "docker-host", "unix:///var/run/docker.sock", "the node's Docker engine")
	return cmd
}

// snapshotterLoader makes the etcdsnap.Cluster of one tick of the
// etcd-rolling-snapshots container: the node alone as its etcd members,
// reached through its own Docker engine and network.
type snapshotterLoader struct {
	config, sslDir string
	engine         dockerop.Engine
	log            *slog.Logger
}

// load reads the configuration and the certificates afresh. A file that
// does not parse is a configuration error (the container exits); one that
// cannot be read yet is tried again.
func (l *snapshotterLoader) load(ctx context.Context) (*etcdsnap.Cluster, func(), error) {
	b, err := os.ReadFile(l.config)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", l.config, err)
	}
	var cfg desired.SnapshotterConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, nil, &etcdsnap.ConfigError{Err: fmt.Errorf("%s: %w; it is rigger's: run rigger apply to write it again", l.config, err)}
	}
	if cfg.Cluster == "" || cfg.Node == "" || cfg.Etcd.Image == "" || cfg.Backup == nil {
		return nil, nil, &etcdsnap.ConfigError{Err: fmt.Errorf("%s lacks cluster_name, node, etcd or backup_config; it is rigger's: run rigger apply to write it again", l.config)}
	}
	set, err := nodePKI(l.sslDir)
	if err != nil {
		return nil, nil, err
	}
	tlsConfig, err := set.ClientTLS()
	if err != nil {
		return nil, nil, &etcdsnap.ConfigError{Err: err}
	}
	d := &desired.Cluster{Name: cfg.Cluster}
	var self *desired.Node
	for _, n := range cfg.Nodes {
		n.Containers = nil
		if n.Address == cfg.Node {
			n.Containers = []desired.Container{cfg.Etcd}
		}
		d.Nodes = append(d.Nodes, n)
	}
	for i := range d.Nodes {
		if d.Nodes[i].Address == cfg.Node {
			self = &d.Nodes[i]
		}
	}
	if self == nil {
		return nil, nil, &etcdsnap.ConfigError{Err: fmt.Errorf("%s: node %s is not among its nodes; run rigger apply to write it again", l.config, cfg.Node)}
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	endpoint := "https://" + net.JoinHostPort(self.InternalAddress, desired.EtcdClientPort)
	cl := &etcdsnap.Cluster{
		Name: cfg.Cluster, KubernetesVersion: cfg.KubernetesVersion,
		Desired: d, Backup: cfg.Backup, PKI: set,
		Engine: func(context.Context, string) (dockerop.Engine, error) { return l.engine, nil },
		Dial: func(ctx context.Context, _, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		HelperImage: cfg.HelperImage,
		MaxParallel: 1,
		Log:         l.log,
		Now:         time.Now,
		Taker:       desired.EtcdRollingSnapshots + " on " + cfg.Node,
		Slots: func(ctx context.Context) (etcdsnap.SlotStore, func(), error) {
			cli, err := etcdmember.Dial(ctx, []string{endpoint}, tlsConfig, func(ctx context.Context, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr)
			})
			if err != nil {
				return nil, nil, err
			}
			return cli, func() { cli.Close() }, nil
		},
	}
	return cl, func() {}, nil
}

// nodePKI reads the certificates the container needs from the node: the
// CA (whose fingerprint goes into every sidecar) and kube-node, which etcd
// accepts. The node has no CA key, so this is not pki.FromFiles.
func nodePKI(dir string) (*pki.Set, error) {
	set := &pki.Set{Certs: map[string]pki.Cert{}}
	var errs []error
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, err)
		}
		return b
	}
	set.Certs[pki.CACertName] = pki.Cert{CertPEM: read(pki.CACertName + ".pem")}
	set.Certs[pki.KubeNodeCertName] = pki.Cert{CertPEM: read(pki.KubeNodeCertName + ".pem"), KeyPEM: read(pki.KubeNodeCertName + "-key.pem")}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("read the node's certificates: %w", err)
	}
	return set, nil
}
