package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newPlanCommand() *cobra.Command {
	var (
		f           clusterFlags
		output, out string
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what must change on the nodes to match cluster.yml",
		Long: `Plan checks cluster.yml, connects to every node (SSH, with host keys
checked), reads what rigger runs there and prints what must change and why:
containers to create, replace, restart or remove. It changes nothing.

Unreachable nodes are listed with the reason and nothing is planned for them;
a node is only ever removed when it is gone from cluster.yml.

Exit status: 2 when there are changes; otherwise 1 when a node of
cluster.yml could not be checked (or on any error), and 0 when every node was
checked and nothing must change.`,
		Example: `  rigger plan -f cluster.yml
  rigger plan -f cluster.yml -o json --out plan.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			_, s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			pl, err := s.Plan(cmd.Context())
			if err != nil {
				return err
			}
			p := pl.Plan
			if out != "" {
				b, err := json.MarshalIndent(p, "", "  ")
				if err != nil {
					return fmt.Errorf("encode plan: %w", err)
				}
				if err := os.WriteFile(out, append(b, '\n'), 0o600); err != nil {
					return fmt.Errorf("write plan: %w", err)
				}
			}
			switch output {
			case "json":
				if err := printJSON(cmd.OutOrStdout(), p); err != nil {
					return err
				}
			default:
				renderPlanned(cmd.OutOrStdout(), pl)
			}
			if !p.Empty() || len(pl.NodeChanges) > 0 {
				return &exitError{code: 2}
			}
			for _, u := range p.Unreachable {
				if !u.Removed {
					return &exitError{code: 1}
				}
			}
			return nil
		},
	}
	f.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&out, "out", "", "also write the plan as JSON to this file")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
