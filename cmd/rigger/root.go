package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rigger/rigger/internal/crashpoint"
)

// envPrefix is the prefix of the environment variables that stand in for
// flags: --output is also read from RIGGER_OUTPUT, -f/--file from
// RIGGER_FILE. A flag given on the command line wins over the variable.
const envPrefix = "RIGGER_"

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "rigger",
		Short: "Declarative GitOps reconciler for RKE-style Kubernetes clusters",
		Long: `rigger makes a Kubernetes cluster converge to the cluster.yml (RKE's format)
kept in git. It observes the live nodes, computes a plan and pushes each
node's containers and files over SSH (the Docker socket tunnelled, as RKE
does), in an order that keeps the cluster serving; it takes, verifies and
restores etcd snapshots. "rigger serve" follows a git repository: every
cluster.yml in it is reconciled when pushed and checked for drift, its etcd
snapshots are taken on schedule, and its status is committed back.

Start with: rigger validate, rigger plan, rigger apply (see docs/operations.md);
for GitOps, rigger serve (see docs/gitops.md); to take over a cluster RKE runs,
rigger adopt (see docs/migrating-from-rke.md).

Every flag can also be set from the environment: RIGGER_ followed by the
flag's long name in upper case with dashes as underscores (--file: RIGGER_FILE).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := crashpoint.Check(); err != nil {
				return err
			}
			return applyEnvOverrides(cmd.Flags(), os.LookupEnv)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newVersionCommand(),
		newValidateCommand(),
		newConfigCommand(),
		newPlanCommand(),
		newApplyCommand(),
		newRemoveCommand(),
		newAdoptCommand(),
		newKubeconfigCommand(),
		newCertCommand(),
		newStatusCommand(),
		newStateCommand(),
		newDoctorCommand(),
		newSnapshotCommand(),
		newEncryptCommand(),
		newServeCommand(),
		newAgentCommand(),
		newNginxProxyCommand(),
		newSnapshotterCommand(),
		newSandboxCommand(),
	)
	return root
}

// applyEnvOverrides sets every flag the user did not give on the command line
// from its RIGGER_* environment variable, if that is set.
func applyEnvOverrides(flags *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if serr := flags.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment variable %s: %w", name, serr)
		}
	})
	return err
}

func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}
