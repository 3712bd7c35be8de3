package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/termsafe"
	"github.com/rigger/rigger/spec"
)

// defaultClusterFile is the cluster.yml read when -f is not given, as RKE.
const defaultClusterFile = "cluster.yml"

func addFileFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVarP(path, "file", "f", defaultClusterFile, "the cluster.yml to read")
	_ = cmd.MarkFlagFilename("file", "yml", "yaml")
}

func newValidateCommand() *cobra.Command {
	var file, output string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a cluster.yml and print every problem in it",
		Long: `Validate decodes cluster.yml strictly, as RKE v1.8.14 reads it, and checks it
as a whole, before any connection to a node: misspelled or misplaced keys,
values of the wrong type, missing or duplicate nodes, roles, CIDRs, labels and
taints, etcd backup settings, upgrade budgets and the Kubernetes version. Every
problem is printed at once with its file:line:column and field path (the first
100 in file order, then a count of the others). Then it makes what a plan would
refuse of the file alone (a network plugin rigger does not deploy, add-on
options RKE's manifests cannot take, inline add-ons that are not Kubernetes
objects), so that every command refuses it before connecting.

Exit status: 0 when the file is valid (warnings allowed), 1 otherwise, also
when interrupted (SIGINT, SIGTERM) before the end.`,
		Example: `  rigger validate -f cluster.yml
  rigger validate -f cluster.yml -o json | jq '.diagnostics[] | .summary'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, diags, err := load(cmd.Context(), file)
			if cmd.Context().Err() != nil {
				return fmt.Errorf("validation of %s stopped before the end: %w", file, err)
			}
			if diags == nil && err != nil {
				return err // the file could not be read
			}
			if err := printDiagnostics(cmd.OutOrStdout(), output, file, diags); err != nil {
				return err
			}
			if diags.HasErrors() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	addFileFlag(cmd, &file)
	addOutputFlag(cmd, &output)
	return cmd
}

// printDiagnostics writes diags as text (one per problem and a closing count)
// or as one JSON object.
func printDiagnostics(w io.Writer, format, file string, diags spec.Diagnostics) error {
	errs, warns := diags.Count()
	switch format {
	case "json":
		if diags == nil {
			diags = spec.Diagnostics{}
		}
		return printJSON(w, struct {
			File        string           `json:"file"`
			Valid       bool             `json:"valid"`
			Errors      int              `json:"errors"`
			Warnings    int              `json:"warnings"`
			Diagnostics spec.Diagnostics `json:"diagnostics"`
		}{file, errs == 0, errs, warns, diags})
	case "text":
		// A diagnostic quotes the file: its control characters are
		// escaped, so that none forges a line (a "valid" one).
		file = termsafe.String(file)
		for _, d := range diags {
			fmt.Fprintln(w, termsafe.String(d.String()))
		}
		switch {
		case errs > 0:
			fmt.Fprintf(w, "%s: %s, %s\n", file, plural(errs, "error"), plural(warns, "warning"))
		case warns > 0:
			fmt.Fprintf(w, "%s: valid, %s\n", file, plural(warns, "warning"))
		default:
			fmt.Fprintf(w, "%s: valid\n", file)
		}
		return nil
	}
	return fmt.Errorf("unknown output format %q: use text or json", format)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
