package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/termsafe"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/rkestate"
)

func newAdoptCommand() *cobra.Command {
	var (
		f                    clusterFlags
		rkeState, kubeconfig string
	)
	cmd := &cobra.Command{
		Use:   "adopt",
		Short: "Take over a running RKE cluster's certificates, keys and encryption config",
		Long: `Adopt takes over a cluster that RKE runs, in place: it imports RKE's CA,
the certificates and keys rigger uses (RKE's names are rigger's), the
service-account signing key, the requestheader CA and proxy client
certificate, and the secrets encryption configuration into rigger's state
directory. It never makes a new CA, and refuses a state directory that holds
another one. It changes nothing on the nodes.

RKE's state is read from cluster.rkestate (--rkestate); or through the API
server from the full-cluster-state Secret (or ConfigMap) RKE keeps in
kube-system, with the credentials of RKE's kube_config_cluster.yml
(--kubeconfig); or, with neither, from the first reachable controlplane
node's /etc/kubernetes/ssl, which holds every certificate and key RKE made
but the admin's (rigger issues that one, signed by RKE's CA). Each line of
the output says where it came from.

RKE's state must be of this cluster.yml: the same cluster_name, and each
of its nodes in cluster.yml with the same roles, internal address and
hostname. Adopt the cluster as RKE last deployed it, then change
cluster.yml with rigger. A node of cluster.yml that RKE's state lacks is
one RKE did not provision (rke up drops a node it cannot reach, with a
warning): adopt lists it, and the next apply adds it. Read from the nodes,
RKE's state says only which nodes run etcd and kube-apiserver: a
cluster.yml that takes the etcd or controlplane role from such a node is
refused.

Then rigger plan shows RKE's containers (same names) being replaced by
rigger's, node by node with etcd's data and members kept, and rigger apply
does it (see docs/migrating-from-rke.md).

What is printed are names and expiry dates; cluster.rkestate holds every
private key of the cluster and none is ever printed.`,
		Example: `  rigger adopt -f cluster.yml --rkestate cluster.rkestate
  rigger adopt -f cluster.yml --kubeconfig kube_config_cluster.yml
  rigger adopt -f cluster.yml
  rigger plan -f cluster.yml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rkeState != "" && kubeconfig != "" {
				return &exitError{code: 2, msg: "give --rkestate or --kubeconfig, not both"}
			}
			opts := reconcile.AdoptOptions{Kubeconfig: kubeconfig}
			if rkeState != "" {
				st, err := readRKEState(rkeState)
				if err != nil {
					return err
				}
				opts.RKEState = st
			}
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			t, err := s.Adopt(cmd.Context(), opts)
			if err != nil {
				s.dropFreshStateDir()
				return err
			}
			renderTaken(cmd.OutOrStdout(), t)
			return nil
		},
	}
	f.lockAs = "adopt"
	f.add(cmd)
	cmd.Flags().StringVar(&rkeState, "rkestate", "", "RKE's cluster.rkestate of the cluster (the file rke up wrote beside cluster.yml)")
	_ = cmd.MarkFlagFilename("rkestate", "rkestate")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "RKE's kube_config_cluster.yml: read RKE's state from the full-cluster-state Secret through the API server")
	return cmd
}

// readRKEState opens and parses RKE's state file.
func readRKEState(path string) (*rkestate.State, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read RKE's state: %w", err)
	}
	defer fh.Close()
	return rkestate.Parse(path, fh)
}

// renderTaken lists what adopt took over: names, what became of each,
// expiry dates and sources; never a key.
func renderTaken(w io.Writer, t *rkestate.Taken) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tEXPIRES\tWHAT\tFROM")
	for _, it := range t.Items {
		exp := "-"
		if !it.NotAfter.IsZero() {
			exp = it.NotAfter.UTC().Format(time.DateOnly)
		}
		from := it.Source
		if from == "" {
			from = "-"
		}
		// Names and sources come from RKE's state: escaped, newlines and
		// tabs too, so that none forges a line or a column.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", termsafe.Field(it.Name), exp, it.Action, termsafe.Field(from))
	}
	_ = tw.Flush()
	if t.EncryptionConfig != nil {
		fmt.Fprintf(w, "\nSecrets encryption configuration: imported (%s in the state directory).\n", rkestate.EncryptionFile)
	} else {
		fmt.Fprintln(w, "\nSecrets encryption: RKE's state has none.")
	}
	if len(t.ToAdd) > 0 {
		fmt.Fprintf(w, "\nIn cluster.yml, not in RKE's state (RKE did not provision them: rke up drops a node it cannot reach, with a warning): %s.\n"+
			"rigger adds them on the next apply, as nodes added to cluster.yml.\n", strings.Join(t.ToAdd, ", "))
	}
	fmt.Fprintln(w, "\nNext: rigger plan -f cluster.yml shows RKE's containers being replaced by rigger's, node by node.")
}
