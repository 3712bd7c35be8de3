package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newEncryptCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "encrypt",
		Short: "Manage the key that encrypts Secrets at rest",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newRotateKeyCommand())
	return cmd
}

func newRotateKeyCommand() *cobra.Command {
	var (
		f        clusterFlags
		yes      bool
		waitLock bool
	)
	cmd := &cobra.Command{
		Use:   "rotate-key",
		Short: "Rotate the secrets encryption key rigger generated (as rke encrypt rotate-key)",
		Long: `Rotate-key plans and applies cluster.yml as "rigger apply" does, and then
rotates the key rigger generated to encrypt Secrets at rest
(services.kube-api.secrets_encryption_config.enabled: true without
custom_config), in the stages of the Kubernetes documentation: the new key
added second on every API server, then made first, every Secret rewritten,
then the old key dropped, the API servers restarted one at a time after each
change of their configuration. It is rotate_encryption_key: true applied
once, without editing cluster.yml; each stage is recorded in the state
directory, and an interrupted rotation goes on at the next apply.

A rotation already in progress is carried on rather than started again.`,
		Example: `  rigger encrypt rotate-key -f cluster.yml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.lockAs, f.waitLock, f.rotateKey = "encrypt rotate-key", waitLock, true
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			pl, err := s.Plan(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			renderPlanned(out, pl)
			if err := pl.Blocked(); err != nil {
				return err
			}
			if !yes {
				if err := confirm(cmd, "Apply these changes and rotate the secrets encryption key?"); err != nil {
					return err
				}
			}
			fmt.Fprintln(out)
			o := applyOnce{flags: f}
			res, err := s.Apply(cmd.Context(), s.lock, pl, o.applyOptions(out, cmd.ErrOrStderr()))
			renderResult(out, "Rotate-key", res, err)
			if err != nil {
				return err
			}
			return unreachableExit(pl)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "rotate without asking")
	cmd.Flags().BoolVar(&waitLock, "wait-lock", false, "when another rigger is changing the cluster, wait for it instead of refusing")
	return cmd
}
