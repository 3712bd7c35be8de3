package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/termsafe"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/sopsfile"
)

// load reads cluster.yml as spec.LoadContext does, decrypting a file
// encrypted with SOPS (sopsfile, keys where the sops CLI takes them), and, when it has no errors,
// makes the refusals a plan would make of it (decide.CheckSpec), so that
// they come before any connection. err is set when the file cannot be read
// (diags is then nil) or has errors.
func load(ctx context.Context, file string) (*spec.Cluster, spec.Diagnostics, error) {
	c, diags, err := spec.LoadWith(ctx, file, sopsfile.Decrypter{}.Options())
	if err == nil {
		diags = append(diags, decide.CheckSpec(c, file)...)
		err = diags.Err()
	}
	return c, diags, err
}

// loadCluster loads the cluster.yml a command works on (load). Errors are
// printed as by validate and end the command with exit status 1; warnings
// are printed to stderr and the command goes on.
func loadCluster(cmd *cobra.Command, file string) (*spec.Cluster, error) {
	ctx := cmd.Context()
	if ctx == nil { // a command that is not executed (tests)
		ctx = context.Background()
	}
	c, diags, err := load(ctx, file)
	if err != nil {
		if diags == nil {
			return nil, err // the file could not be read
		}
		_ = printDiagnostics(cmd.ErrOrStderr(), "text", file, diags)
		return nil, &exitError{code: 1}
	}
	for _, d := range diags {
		fmt.Fprintln(cmd.ErrOrStderr(), termsafe.String(d.String()))
	}
	return c, nil
}
