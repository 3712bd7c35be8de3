package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/reconcile/etcdsnap"
)

func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, list, delete and restore etcd snapshots",
		Long: `Snapshot works on the cluster's etcd snapshots. A snapshot is taken on one
healthy etcd member, verified (etcdctl snapshot status, size, sha256), kept
under ` + etcdsnap.Dir + ` on every etcd node with a JSON sidecar, and
uploaded to S3 when services.etcd.backup_config.s3backupconfig is set.`,
	}
	cmd.AddCommand(newSnapshotSaveCommand(), newSnapshotListCommand(), newSnapshotDeleteCommand(), newSnapshotRestoreCommand())
	return cmd
}

func newSnapshotSaveCommand() *cobra.Command {
	var (
		f    clusterFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "save",
		Short: "Take an etcd snapshot now",
		Long: `Save takes a snapshot of etcd on the first healthy etcd member (cluster.yml
order) with etcdctl from the cluster's etcd image, checks it (etcdctl snapshot
status, size, sha256), stores it under ` + etcdsnap.Dir + ` on that node with a
sidecar <name>.json, copies it to every other etcd node (checking the sha256
there) and, when s3backupconfig is set, uploads both to S3.

The name is RKE's, rke_etcd_snapshot_<UTC time> (2026-11-22T01:30:00Z, or
2026-11-22T01-30-00Z with backup_config.safe_timestamp), unless --name says
otherwise; an existing snapshot is never overwritten.

Exit status: 0 when the snapshot is on every etcd node (and in S3 when set);
1 otherwise. A snapshot that was taken is kept, whatever failed after it.`,
		Example: `  rigger snapshot save -f cluster.yml
  rigger snapshot save -f cluster.yml --name before-upgrade`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name != "" {
				if err := etcdsnap.CheckName(name); err != nil {
					return err
				}
			}
			f.lockAs = "snapshot save"
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, "==> etcd snapshot")
			start := time.Now()
			ec, err := s.etcd(cmd)
			if err != nil {
				return err
			}
			res, err := etcdsnap.Save(cmd.Context(), ec, etcdsnap.SaveOptions{
				Name:     name,
				Progress: func(node, msg string) { fmt.Fprintf(w, "    %s: %s\n", node, msg) },
			})
			if res == nil || res.Sidecar == nil {
				return err
			}
			renderSaved(w, res, time.Since(start))
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&name, "name", "", "name of the snapshot (default rke_etcd_snapshot_<UTC time>)")
	return cmd
}

// renderSaved writes the closing summary of a save.
func renderSaved(w io.Writer, res *etcdsnap.SaveResult, took time.Duration) {
	sc := res.Sidecar
	var on, failed []string
	for _, c := range res.Copies {
		if c.Err != nil {
			failed = append(failed, c.Node)
			fmt.Fprintf(w, "    %s: FAILED copy: %s\n", c.Node, indent(c.Err.Error()))
		} else {
			on = append(on, c.Node)
		}
	}
	if res.S3Err != nil {
		fmt.Fprintf(w, "    s3: FAILED: %s\n", indent(res.S3Err.Error()))
	}
	fmt.Fprintf(w, "\nSnapshot %s saved in %s: %d bytes, sha256 %s, revision %d, on %d of %d etcd node(s) under %s",
		sc.Name, took.Round(100*time.Millisecond), sc.Size, sc.SHA256, sc.Revision, len(on), len(res.Copies), etcdsnap.Dir)
	switch {
	case res.S3 != "":
		fmt.Fprintf(w, ", and in %s", res.S3)
	case res.S3Err != nil:
		fmt.Fprint(w, "; NOT uploaded to S3")
	}
	fmt.Fprintln(w, ".")
	if len(failed) > 0 {
		fmt.Fprintf(w, "Not on %s: run rigger snapshot save again when they answer.\n", strings.Join(failed, ", "))
	}
}

func newSnapshotListCommand() *cobra.Command {
	var (
		f      clusterFlags
		output string
		noS3   bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the etcd snapshots on the etcd nodes and in S3",
		Long: `List shows every snapshot under ` + etcdsnap.Dir + ` on the etcd nodes and,
when s3backupconfig is set, in S3: name, time, size, sha256 (from its
sidecar) and where it is. A copy whose size differs from its sidecar's is
marked damaged.

Exit status: 1 when a node or S3 could not be listed (the rest is shown).`,
		Example: `  rigger snapshot list -f cluster.yml
  rigger snapshot list -f cluster.yml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			ec, err := s.etcd(cmd)
			if err != nil {
				return err
			}
			list, err := etcdsnap.List(cmd.Context(), ec, !noS3)
			if list == nil {
				return err
			}
			if output == "json" {
				snaps := list.Snapshots
				if snaps == nil {
					snaps = []etcdsnap.Info{}
				}
				if err := printJSON(cmd.OutOrStdout(), snaps); err != nil {
					return err
				}
			} else {
				renderSnapshots(cmd.OutOrStdout(), list.Snapshots)
			}
			if err != nil {
				return &exitError{code: 1, msg: "some snapshots could not be listed: " + err.Error()}
			}
			return nil
		},
	}
	f.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVar(&noS3, "no-s3", false, "list the etcd nodes only, not S3")
	return cmd
}

func renderSnapshots(w io.Writer, snaps []etcdsnap.Info) {
	if len(snaps) == 0 {
		fmt.Fprintln(w, "No snapshots.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTAKEN (UTC)\tSIZE\tSHA256\tWHERE")
	for _, si := range snaps {
		sum := "(no sidecar)"
		if si.Sidecar != nil {
			sum = si.Sidecar.SHA256[:16] + "…"
		}
		where := slices.Clone(si.Nodes)
		for _, d := range si.Damaged {
			where = append(where, d+" (DAMAGED: size differs)")
		}
		if si.S3 != "" {
			where = append(where, si.S3)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", si.Name, si.TakenAt.UTC().Format(time.DateTime), si.Size, sum, strings.Join(where, ", "))
	}
	tw.Flush()
}

func newSnapshotDeleteCommand() *cobra.Command {
	var (
		f    clusterFlags
		inS3 bool
	)
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete an etcd snapshot from every etcd node (and S3 with --s3)",
		Long: `Delete removes the snapshot NAME and its sidecar from every etcd node of
cluster.yml and, with --s3, from S3.

Exit status: 1 when the snapshot was found nowhere, or a node or S3 did not
answer (it may still hold the snapshot).`,
		Example: `  rigger snapshot delete -f cluster.yml rke_etcd_snapshot_2026-11-22T01:30:00Z
  rigger snapshot delete -f cluster.yml --s3 before-upgrade`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := etcdsnap.CheckName(args[0]); err != nil {
				return err
			}
			f.lockAs = "snapshot delete"
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			ec, err := s.etcd(cmd)
			if err != nil {
				return err
			}
			res, err := etcdsnap.Delete(cmd.Context(), ec, args[0], inS3)
			if res != nil {
				for _, d := range res.Deleted {
					fmt.Fprintf(cmd.OutOrStdout(), "    %s: deleted %s\n", d, args[0])
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Snapshot %s deleted from %d place(s).\n", args[0], len(res.Deleted))
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&inS3, "s3", false, "delete it from S3 too (s3backupconfig)")
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	var (
		f        clusterFlags
		yes      bool
		fromNode string
	)
	cmd := &cobra.Command{
		Use:   "restore NAME",
		Short: "Restore etcd from a snapshot, checking it everywhere before anything stops",
		Long: `Restore brings the cluster's etcd back to the snapshot NAME.

It checks first and changes nothing until every check has passed: every
etcd node of cluster.yml answers and holds the snapshot with its sidecar's
size and sha256 (computed on each node; a missing copy is copied from a node
with a verified one, or from S3, and verified there; a copy that differs from
its sidecar is refused, not replaced), the sidecar's CA fingerprint is the
cluster's CA, and etcdctl snapshot status agrees with the sidecar on every
node.

A snapshot without a sidecar (one RKE took, e.g. rke etcd snapshot-save
--name NAME, or a file put there by hand) is restored too. Its copies differ
from node to node (each is its own member's), so one copy is restored on
every member: that of --from-node, else of the first etcd node of
cluster.yml that has one. Before anything stops, that copy must pass etcd's
own integrity hash (the sha256 etcdctl snapshot save appends), checked by
rigger; a damaged copy is refused, naming the node and the file. It is
fetched to the other etcd nodes into /opt/rke/etcd-snapshots/.rigger-restore/
(their own copies of NAME are never written or removed) and removed there
once restored. Without a sidecar, rigger cannot check which cluster's CA the
snapshot belongs to: restore it only into the cluster it was taken from.

RKE's snapshots are zip files (NAME.zip, as rke-tools writes them; rigger
snapshot list shows them so): restore NAME and restore NAME.zip are the
same. A node with NAME.zip and no NAME has a copy; when the chosen copy is
the zip, rigger reads it through the node's Docker API, unzips it on the
machine it runs on (in $TMPDIR: room for the zip and the snapshot), checks
it is one snapshot as rke-tools zips it (the entry /backup/NAME, beside RKE's
cluster state /etc/kubernetes/NAME.rkestate, which is not read; any other
entry is refused) of at most 8 GiB, checks etcd's integrity hash, and writes
it to every etcd node's .rigger-restore/, that node's too. The zip files are
only read: never unzipped in place, overwritten or removed.

Then, after asking (unless --yes), it stops and removes kube-apiserver on
every controlplane node and etcd on every etcd node, moves each etcd data
directory aside (/var/lib/etcd/member → member.before-restore-<UTC time>,
kept), restores the snapshot on every member with etcdctl, runs the normal
apply (every etcd member at once, then the API servers) and checks that etcd
and the API servers are healthy.

Exit status: 0 when the cluster runs on the snapshot and is healthy; 1
otherwise. A failure after the first container stopped says what was done on
each node, where its old data is, and the commands to put it back.`,
		Example: `  rigger snapshot restore -f cluster.yml rke_etcd_snapshot_2026-11-22T01:30:00Z
  rigger snapshot restore -f cluster.yml --yes before-upgrade
  rigger snapshot restore -f cluster.yml --from-node 10.231.0.12 before-rigger
  rigger snapshot restore -f cluster.yml 2026-11-21T19:30:00Z_etcd.zip`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := etcdsnap.CheckName(name); err != nil {
				return err
			}
			f.lockAs = "snapshot restore"
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			w := cmd.OutOrStdout()
			start := time.Now()
			ec, err := s.etcd(cmd)
			if err != nil {
				return err
			}
			res, err := etcdsnap.Restore(cmd.Context(), ec, name, etcdsnap.RestoreOptions{
				Phase:    func(title string) { fmt.Fprintf(w, "==> %s\n", title) },
				Progress: func(node, msg string) { fmt.Fprintf(w, "    %s: %s\n", node, msg) },
				Hooks:    progressHooks(w),
				FromNode: fromNode,
				Checked: func(chk *etcdsnap.RestoreCheck) error {
					renderRestoreCheck(w, chk)
					if yes {
						return nil
					}
					return confirm(cmd, "Restore etcd from "+name+withoutSidecarNote(chk)+"? Every write since it was taken is lost, and the API servers are down meanwhile.")
				},
			})
			if err != nil {
				return err
			}
			renderRestored(w, res, time.Since(start))
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "restore without asking")
	cmd.Flags().StringVar(&fromNode, "from-node", "", "for a snapshot without a sidecar (RKE's): the etcd node (address) whose copy is restored on every member (default: the first in cluster.yml with one)")
	return cmd
}

// renderRestoreCheck writes what the check found and what the restore
// will do.
func renderRestoreCheck(w io.Writer, chk *etcdsnap.RestoreCheck) {
	if sc := chk.Sidecar; sc != nil {
		fmt.Fprintf(w, "\nSnapshot %s: taken %s on %s, %d bytes, revision %d, %d keys, etcd %s; verified on %d etcd node(s).\n",
			sc.Name, sc.TakenAt.UTC().Format(time.DateTime), sc.Node, sc.Size, sc.Revision, sc.TotalKeys, sc.EtcdVersion, len(chk.Members))
	} else {
		fmt.Fprintf(w, "\nSnapshot %s: taken without rigger (RKE's?): it has no sidecar, so rigger cannot check which cluster's CA it belongs to "+
			"(restore it only into the cluster it was taken from); restoring %s's copy on every member, verified by etcd's own hash: "+
			"%d bytes, sha256 %s, revision %d, %d keys.\n",
			chk.Name, chk.Source, chk.Size, chk.SHA256, chk.Status.Revision, chk.Status.TotalKeys)
	}
	fmt.Fprintf(w, "The restore stops the control plane (kube-apiserver, kube-controller-manager, kube-scheduler) on %s and etcd on", strings.Join(chk.ControlPlane, ", "))
	for i, m := range chk.Members {
		if i > 0 {
			fmt.Fprint(w, ",")
		}
		fmt.Fprintf(w, " %s", m.Node)
	}
	fmt.Fprintln(w, ", moves each etcd data directory aside (kept), restores the snapshot on every member and applies cluster.yml.")
}

// withoutSidecarNote is what the question before a restore adds for a
// snapshot without a sidecar: "" for one with a sidecar.
func withoutSidecarNote(chk *etcdsnap.RestoreCheck) string {
	if chk.Sidecar != nil {
		return ""
	}
	return fmt.Sprintf(", taken without rigger (RKE's?), whose CA cannot be checked, restoring %s's copy, verified by etcd's own hash", chk.Source)
}

// renderRestored writes the closing summary of a restore.
func renderRestored(w io.Writer, res *etcdsnap.RestoreResult, took time.Duration) {
	fmt.Fprintf(w, "\nSnapshot %s restored in %s on %d etcd member(s); etcd and the API servers are healthy.\n",
		res.Check.Name, took.Round(100*time.Millisecond), len(res.Restored))
	if res.AddonsErr != nil {
		fmt.Fprintf(w, "The add-ons are not ready yet (their pods restart on their own now that the API servers are back; `rigger status` shows them): %v\n", res.AddonsErr)
	}
	if len(res.MovedAside) > 0 {
		fmt.Fprintln(w, "The data etcd had before is kept (remove it when you no longer need it):")
		for _, m := range res.Check.Members {
			if a, ok := res.MovedAside[m.Node]; ok {
				fmt.Fprintf(w, "  %s: %s\n", m.Node, a)
			}
		}
	}
}
