package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/atomicfile"
)

// Output formats of the commands that print a result.
const (
	outputText = "text"
	outputJSON = "json"
)

// addOutputFlag adds -o/--output (text or json) to cmd.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", outputText, "output format: text or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputText, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput refuses an output format other than text and json, before
// the command connects anywhere.
func checkOutput(output string) error {
	if output != outputText && output != outputJSON {
		return fmt.Errorf("unknown output format %q: use text or json", output)
	}
	return nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writePrivate writes b to the file a user named with --out, mode 0600
// whatever mode a file already there had (a kubeconfig holds the admin's
// key; a plan, the cluster's settings), replacing it whole. A symbolic
// link is followed, so that a linked ~/.kube/config stays a link.
func writePrivate(path string, b []byte) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	return atomicfile.Write(path, b, 0o600)
}
