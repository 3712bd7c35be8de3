package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/spec"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show how rigger reads a cluster.yml",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newConfigDefaultsCommand(), newConfigVersionsCommand())
	return cmd
}

func newConfigDefaultsCommand() *cobra.Command {
	var file string
	var showSecrets bool
	cmd := &cobra.Command{
		Use:   "defaults",
		Short: "Print the cluster.yml with every default filled in",
		Long: `Defaults prints cluster.yml as rigger will apply it: every key left empty
is shown with its default (RKE's defaults for RKE's keys), images are resolved
from kubernetes_version, and keys are in schema order. Secret values (SSH keys,
passwords, S3 keys) are shown as "` + spec.Redacted + `" unless --show-secrets is given.

The file must be valid; otherwise the problems are printed as by validate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(cmd, file)
			if err != nil {
				return err
			}
			out, err := spec.Marshal(c, showSecrets)
			if err != nil {
				return fmt.Errorf("write cluster.yml: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	addFileFlag(cmd, &file)
	cmd.Flags().BoolVar(&showSecrets, "show-secrets", false, "print secret values instead of "+spec.Redacted)
	return cmd
}

func newConfigVersionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "versions",
		Short: "List the Kubernetes versions whose images rigger knows",
		Long: `Versions lists the kubernetes_version values rigger fills system_images for.
Other versions work when system_images names every image they need.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, v := range spec.KubernetesVersions() {
				mark := ""
				if v == spec.DefaultKubernetesVersion {
					mark = " (default)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s%s\n", v, mark)
			}
			return nil
		},
	}
}
