package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newKubeconfigCommand() *cobra.Command {
	var (
		f   clusterFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the cluster's admin kubeconfig",
		Long: `Kubeconfig prints a kubeconfig for the cluster's administrator: the API
server of the first controlplane node and the kube-admin client certificate
(cluster-admin). It holds a private key: keep it as you keep an SSH key.

The certificates come from the state directory, or from a controlplane node
when the state directory is lost.`,
		Example: `  rigger kubeconfig -f cluster.yml > kube_config_cluster.yml
  rigger kubeconfig -f cluster.yml --out ~/.kube/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			b, err := s.kubeconfig(cmd.Context())
			if err != nil {
				return err
			}
			if out != "" {
				if err := writePrivate(out, b); err != nil {
					return fmt.Errorf("write kubeconfig: %w", err)
				}
				return nil
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&out, "out", "", "write the kubeconfig to this file (mode 0600) instead of stdout")
	return cmd
}
