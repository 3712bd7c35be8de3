package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/reconcile/pki"
)

func newCertCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Manage the cluster's certificates",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newCertRotateCommand(), newCertListCommand())
	return cmd
}

func newCertListCommand() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's certificates and when each expires",
		Long: `List prints every certificate of the cluster's PKI (the state directory's,
or a controlplane node's when the state directory is lost) with its expiry
and the days left, soonest first. It changes nothing. rigger reissues a
certificate 30 days before it expires; "rigger cert rotate" reissues them now.`,
		Example: `  rigger cert list -f cluster.yml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			set, err := s.PKI(cmd.Context())
			if err != nil {
				return err
			}
			exp := pki.Expiry(set)
			names := slices.Collect(maps.Keys(exp))
			slices.SortFunc(names, func(a, b string) int {
				if c := exp[a].Compare(exp[b]); c != 0 {
					return c
				}
				return strings.Compare(a, b)
			})
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tDAYS LEFT")
			now := time.Now()
			for _, n := range names {
				fmt.Fprintf(tw, "%s\t%s\t%d\n", n, exp[n].UTC().Format(time.DateOnly), int(exp[n].Sub(now).Hours()/24))
			}
			return tw.Flush()
		},
	}
	f.add(cmd)
	return cmd
}

func newCertRotateCommand() *cobra.Command {
	var (
		f        clusterFlags
		yes      bool
		services []string
		rotateCA bool
		waitLock bool
	)
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Reissue the cluster's certificates and restart the components that use them",
		Long: `Rotate reissues certificates, as "rke cert rotate" does, and applies:
the new certificates are written to the nodes and every component that reads
one restarts, node by node, in apply's order (etcd members one at a time,
each healthy before the next; then the controlplane nodes one at a time;
then the workers in batches of upgrade_strategy.max_unavailable_worker), so
that the API answers throughout.

  --service S   rotate only the certificates of S (repeat it for more):
                etcd, kubelet, kube-apiserver, kube-proxy, kube-scheduler,
                kube-controller-manager. Without it: every certificate
                (the CAs and the service-account token key are kept).
  --rotate-ca   also a new CA (and request-header CA), every certificate
                reissued under it. The service-account token key is kept,
                as RKE keeps it: service-account tokens issued before stay
                valid. The nodes go through three stages, each restarting
                every component node by node: both CAs trusted, then every
                certificate the new CA's, then the new CA alone; after the
                first, the system pods RKE restarts (network plugin, DNS,
                metrics-server, ingress) are deleted so that they trust the
                new CA. Afterwards, "rigger kubeconfig" gives a kubeconfig
                with the new CA; one with the old CA no longer works.

It is the same as applying with rotate_certificates in cluster.yml (plan shown,
asks unless --yes, holds the cluster's lock like apply), except that it
rotates whenever it is run, while cluster.yml's request rotates once. The
state directory records the rotation until every node runs it: an apply that
stops half way is resumed by the next apply or rotate, without issuing again.
It also applies whatever else cluster.yml changes. See docs/certificates.md.`,
		Example: `  rigger cert rotate -f cluster.yml
  rigger cert rotate -f cluster.yml --service etcd --service kubelet
  rigger cert rotate -f cluster.yml --rotate-ca --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := pki.Rotation{CA: rotateCA, Services: services}
			if err := r.Check(); err != nil {
				return fmt.Errorf("--service: %w", err)
			}
			f.lockAs, f.waitLock, f.rotate = "cert rotate", waitLock, &r
			return applyOnce{flags: f, yes: yes}.run(cmd)
		},
	}
	f.add(cmd)
	cmd.Flags().StringSliceVar(&services, "service", nil, "rotate the certificates of this service only (repeatable): etcd, kubelet, kube-apiserver, kube-proxy, kube-scheduler, kube-controller-manager")
	cmd.Flags().BoolVar(&rotateCA, "rotate-ca", false, "rotate the CAs too, and every certificate under them (--service is then ignored, as RKE ignores it)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "rotate without asking")
	cmd.Flags().BoolVar(&waitLock, "wait-lock", false, "when another rigger is changing the cluster, wait for it instead of refusing")
	cmd.Flags().BoolVar(&f.allowRemovals, "allow-removals", false, "remove more nodes than rigger.max_removed_nodes allows (when cluster.yml removes nodes too)")
	return cmd
}
