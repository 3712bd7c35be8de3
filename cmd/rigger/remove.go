package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/reconcile"
)

func newRemoveCommand() *cobra.Command {
	var (
		f   clusterFlags
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "Tear the cluster down on every node that answers",
		Long: `Remove stops and removes every container of the cluster (those labelled with
its cluster_name) on every node of cluster.yml and every node of the last
apply, and empties rigger's directories there (/etc/kubernetes,
/var/lib/etcd, /var/log/kube-audit) and, as "rke remove" does, the network
plugin's (/etc/cni, /opt/cni, /var/lib/cni, /var/run/calico). etcd's data
is gone afterwards: take a snapshot first if you may want it back.

Nodes that do not answer are listed and left as they are. The state
directory is kept.`,
		Example: `  rigger remove -f cluster.yml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.lockAs, f.teardown = "remove", true
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			pl, err := s.Plan(cmd.Context())
			if err != nil {
				return err
			}
			pl.Plan.Render(out)
			if len(pl.Plan.RemovedNodes) == 0 {
				return unreachableExit(pl)
			}
			if !yes {
				if err := confirm(cmd, fmt.Sprintf("Remove cluster %s from %d node(s)? Its etcd data is deleted.", s.c.ClusterName, len(pl.Plan.RemovedNodes))); err != nil {
					return err
				}
			}
			fmt.Fprintln(out)
			res, err := s.Apply(cmd.Context(), s.lock, pl, reconcile.ApplyOptions{Hooks: progressHooks(out)})
			renderResult(out, "Remove", res, err)
			if err != nil {
				return err
			}
			return unreachableExit(pl)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "remove without asking")
	return cmd
}
