package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/reconcile/etcdsnap"
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

A restore requested in cluster.yml (restore: {restore: true, snapshot_name,
id}) that was not carried out yet is shown first: apply restores it before
anything else (see rigger apply). One that was is mentioned once.

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
			end := f.startTimings("rigger plan")
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			defer s.renderTimings(cmd.ErrOrStderr(), end)
			req, err := s.restoreRequest()
			if err != nil {
				return err
			}
			pl, err := s.Plan(cmd.Context())
			if err != nil {
				return err
			}
			p := pl.Report()
			if n := restoreNotice(req); n != "" {
				// Not part of the plan's JSON: beside it, for people.
				w := cmd.OutOrStdout()
				if output == "json" {
					w = cmd.ErrOrStderr()
				}
				fmt.Fprintf(w, "%s\n\n", n)
			}
			if out != "" {
				b, err := json.MarshalIndent(p, "", "  ")
				if err != nil {
					return fmt.Errorf("encode plan: %w", err)
				}
				if err := writePrivate(out, append(b, '\n')); err != nil {
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
			if pl.Changes() || req != nil && req.Done == nil {
				return &exitError{code: 2}
			}
			if !pl.Complete() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f.add(cmd)
	f.addTimings(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&out, "out", "", "also write the plan as JSON to this file (mode 0600)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// restoreNotice is what plan and apply say about the restore cluster.yml
// requests; "" when it requests none.
func restoreNotice(req *etcdsnap.RestoreRequest) string {
	if req == nil {
		return ""
	}
	d := req.Done
	if d == nil {
		return fmt.Sprintf("Restore requested: snapshot %s (id %s) — apply restores it first", req.SnapshotName, req.ID)
	}
	at := func(t time.Time) string { return t.UTC().Format(time.DateTime) + " UTC" }
	switch {
	case d.FinishedAt.IsZero():
		return fmt.Sprintf("restore id %s was started at %s and did not finish (rigger stopped during it); it is not tried again: "+
			"check the cluster (rigger status), and give restore.id a new value to restore again", req.ID, at(d.StartedAt))
	case d.Error != "":
		return fmt.Sprintf("restore id %s failed at %s and is not tried again (give restore.id a new value to try again): %s",
			req.ID, at(d.FinishedAt), firstLine(d.Error))
	}
	return fmt.Sprintf("restore id %s was done at %s; nothing to restore", req.ID, at(d.FinishedAt))
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
