package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/spec"
)

// loadCluster loads the cluster.yml a command works on. Errors are printed
// as by validate and end the command with exit status 1; warnings are
// printed to stderr and the command goes on.
func loadCluster(cmd *cobra.Command, file string) (*spec.Cluster, error) {
	c, diags, err := spec.Load(file)
	if err != nil {
		if diags == nil {
			return nil, err // the file could not be read
		}
		_ = printDiagnostics(cmd.ErrOrStderr(), "text", file, diags)
		return nil, &exitError{code: 1}
	}
	for _, d := range diags {
		fmt.Fprintln(cmd.ErrOrStderr(), d)
	}
	return c, nil
}
