package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/watch"
)

func newApplyCommand() *cobra.Command {
	var (
		f         clusterFlags
		yes       bool
		planFile  string
		watchFile bool
		waitLock  bool
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Make the nodes run what cluster.yml says",
		Long: `Apply plans as "rigger plan" does, shows the plan, asks for confirmation
(unless --yes) and carries it out in phases:

  1. certificates and files on every node;
  2. etcd: a new cluster's members together, otherwise one member at a time,
     each healthy before the next;
  3. control plane: the nodes where it is only created (nothing of it runs
     there yet: a new cluster, a node that joins) at once, then one node at
     a time, its API server, controller manager and scheduler healthy before
     the next; then the kubelets' authorization,
     the Nodes of removed machines drained and deleted, the state Secret;
  4. workers: the nodes where they are only created at once, then
     upgrade_strategy.max_unavailable_worker nodes at a time (nodes already
     down count against it), each kubelet healthy and its Node Ready before
     the next batch; nodes are cordoned (drained with
     upgrade_strategy.drain) around their changes;
  5. nodes removed from cluster.yml: containers removed, files cleaned.

Unreachable nodes are reported and skipped; the rest converges. A node is
removed only when it is gone from cluster.yml, and removing more nodes than
rigger.max_removed_nodes allows needs --allow-removals.

The cluster's certificates live in the state directory (--state-dir) and on
the controlplane nodes. If the state directory is lost, apply recovers them
from a controlplane node; it never makes a new CA for a running cluster.

With --plan, apply carries out a plan saved by "rigger plan --out" without
asking, and refuses if the nodes changed since it was made.

A restore requested in cluster.yml (restore: {restore: true, snapshot_name:
NAME, id: ID}) comes first: apply checks the snapshot, asks (unless --yes),
restores it as "rigger snapshot restore" does, then plans and applies as
usual. Each id is restored once (recorded in the state directory, also when
the restore fails after it began to stop containers); to restore again,
give restore.id a new value. A restore refused before anything stopped is
not recorded and is tried again on the next apply.

With --watch (and --yes), apply stays running and plans and applies again
each time cluster.yml is saved (editors that replace the file included); a
file that does not validate is reported and nothing changes until it does.

One rigger at a time changes a cluster: apply holds the cluster's lock in
the state directory while it runs. When another apply, or "rigger serve"
with the same state directory, holds it, apply refuses and says who holds
it, or with --wait-lock waits until it is free. Once the cluster's API server
answers, apply also holds the Lease kube-system/rigger-apply in it while it
changes the cluster, so that riggers with other state directories (another
machine, a serve elsewhere) are excluded too; --wait-lock waits for the
Lease as well, saying who holds it. After a crash (kill -9), the lock is free
at once; so is the Lease when the rigger that crashed ran on this machine,
while one that crashed elsewhere holds it until it expires (a minute). An
API server that answers but does not give the Lease (no rights, a lasting
server error) stops the apply; one that does not answer at all (a new cluster, a
control plane down) lets it go on with the state directory's lock alone.

Exit status: 0 when the cluster converged, 1 on failure or when a node of
cluster.yml could not be reached.`,
		Example: `  rigger apply -f cluster.yml
  rigger plan -f cluster.yml --out plan.json && rigger apply -f cluster.yml --plan plan.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.lockAs, f.waitLock = "apply", waitLock
			o := applyOnce{flags: f, yes: yes, planFile: planFile}
			if !watchFile {
				return o.run(cmd)
			}
			if !yes || planFile != "" {
				return errors.New("--watch applies every saved change without asking: give --yes (and no --plan)")
			}
			out := cmd.OutOrStdout()
			return watch.File(cmd.Context(), f.file, watch.DefaultDebounce, func(ctx context.Context) {
				if err := o.run(cmd); err != nil {
					var ex *exitError
					if !errors.As(err, &ex) || ex.msg != "" {
						fmt.Fprintln(cmd.ErrOrStderr(), "error:", err)
					}
				}
				fmt.Fprintf(out, "\nWatching %s: every save is planned and applied (Ctrl-C to stop).\n", f.file)
			})
		},
	}
	f.add(cmd)
	f.addTimings(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "apply without asking")
	cmd.Flags().StringVar(&planFile, "plan", "", "carry out this plan (from rigger plan --out); refused if the nodes changed since")
	cmd.Flags().BoolVar(&f.allowRemovals, "allow-removals", false, "remove more nodes than rigger.max_removed_nodes allows")
	cmd.Flags().BoolVar(&waitLock, "wait-lock", false, "when another rigger (an apply, or serve) is changing the cluster, wait for it (its lock, then its Lease) instead of refusing")
	cmd.Flags().BoolVar(&watchFile, "watch", false, "after applying, apply again each time cluster.yml is saved (with --yes)")
	return cmd
}

// applyOnce is one plan and apply of the command.
type applyOnce struct {
	flags    clusterFlags
	yes      bool
	planFile string
}

func (o applyOnce) run(cmd *cobra.Command) error {
	end := o.flags.startTimings("rigger apply")
	s, err := o.flags.open(cmd)
	if err != nil {
		return err
	}
	defer s.Close()
	defer s.renderTimings(cmd.ErrOrStderr(), end)
	out := cmd.OutOrStdout()
	if err := o.restoreFirst(cmd, s); err != nil {
		return err
	}
	pl, err := s.Plan(cmd.Context())
	if err != nil {
		return err
	}
	renderPlanned(out, pl)
	if o.planFile != "" {
		if err := checkSavedPlan(o.planFile, pl.Plan); err != nil {
			return err
		}
	}
	if err := pl.Blocked(); err != nil {
		return err
	}
	if !pl.Changes() {
		return unreachableExit(pl)
	}
	if !o.yes && o.planFile == "" {
		if err := confirm(cmd, "Apply these changes?"); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	res, err := s.Apply(cmd.Context(), s.lock, pl, o.applyOptions(out, cmd.ErrOrStderr()))
	renderResult(out, "Apply", res, err)
	if err != nil {
		return err
	}
	return unreachableExit(pl)
}

// applyOptions are the options of the apply: progress and the plan of
// each next stage on out, and
// --wait-lock's wait for the cluster's Lease told on errOut. The Lease is
// waited for whether the state directory's lock was free or not.
func (o applyOnce) applyOptions(out, errOut io.Writer) reconcile.ApplyOptions {
	return reconcile.ApplyOptions{Hooks: progressHooks(out),
		WaitLease: o.flags.waitLock, LeaseWaiting: leaseWaiting(errOut),
		Pass: func(pass int, pl *decide.Planned) {
			fmt.Fprintf(out, "\nPlan %d, for the next stage:\n\n", pass)
			renderPlanned(out, pl)
			fmt.Fprintln(out)
		}}
}

// restoreFirst carries out the restore cluster.yml requests, when its id
// was not carried out yet, before anything is planned: with the output
// and the question of rigger snapshot restore. A request done already is
// mentioned, nothing more.
func (o applyOnce) restoreFirst(cmd *cobra.Command, s *opened) error {
	req, err := s.restoreRequest()
	if err != nil || req == nil {
		return err
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s\n\n", restoreNotice(req))
	if req.Done != nil {
		return nil
	}
	if o.planFile != "" {
		return fmt.Errorf("cluster.yml requests a restore of snapshot %s (id %s), which changes what a saved plan was made for: "+
			"run rigger apply without --plan (it restores first), or remove restore from cluster.yml", req.SnapshotName, req.ID)
	}
	start := time.Now()
	ec, err := s.Etcd(cmd.Context(), s.lock)
	if err != nil {
		return err
	}
	res, err := etcdsnap.RunRestoreRequest(cmd.Context(), ec, s.dir, req, etcdsnap.RestoreOptions{
		Phase:    func(title string) { fmt.Fprintf(w, "==> %s\n", title) },
		Progress: func(node, msg string) { fmt.Fprintf(w, "    %s: %s\n", node, msg) },
		Hooks:    progressHooks(w),
		Checked: func(chk *etcdsnap.RestoreCheck) error {
			renderRestoreCheck(w, chk)
			if o.yes {
				return nil
			}
			return confirm(cmd, "Restore etcd from "+req.SnapshotName+withoutSidecarNote(chk)+" as cluster.yml requests (id "+req.ID+")? "+
				"Every write since it was taken is lost, and the API servers are down meanwhile.")
		},
	})
	if err != nil {
		return err
	}
	if res != nil {
		renderRestored(w, res, time.Since(start))
		fmt.Fprintln(w)
	}
	return nil
}

// unreachableExit is exit status 1 when a node of cluster.yml could not be
// reached: the cluster did not fully converge.
func unreachableExit(pl *decide.Planned) error {
	if pl.Complete() {
		return nil
	}
	nodes := pl.Unreachable()
	return &exitError{code: 1, msg: fmt.Sprintf("%d node(s) of cluster.yml could not be reached and were left as they are: %v", len(nodes), nodes)}
}

// checkSavedPlan refuses a saved plan that is not the plan the nodes call
// for now.
func checkSavedPlan(path string, now *plan.Plan) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read saved plan: %w", err)
	}
	defer f.Close()
	saved, err := plan.ReadSaved(f)
	if err != nil {
		return fmt.Errorf("read saved plan %s: %w", path, err)
	}
	if diff := plan.Diff(saved, now); diff != "" {
		return &exitError{code: 1, msg: fmt.Sprintf("the nodes changed since %s was saved (at %s), nothing was applied:\n%s\nplan again",
			path, saved.ObservedAt.Format("2006-01-02 15:04:05 MST"), diff)}
	}
	return nil
}

// leaseWaiting prints on w who holds the cluster's Lease while apply
// --wait-lock waits for it, and when it is taken over if its holder stops
// renewing it.
func leaseWaiting(w io.Writer) func(*lock.HeldError) {
	return func(e *lock.HeldError) {
		msg := fmt.Sprintf("Waiting for the cluster's %s, held by %s", e.Lock, e.Holder.ID)
		if !e.Holder.Since.IsZero() {
			msg += " since " + e.Holder.Since.Local().Format("15:04:05")
		}
		if !e.Expires.IsZero() && !e.At.IsZero() {
			msg += fmt.Sprintf("; taken over at %s (in %s) unless its holder renews it", e.Expires.Local().Format("15:04:05"),
				max(e.Expires.Sub(e.At).Round(time.Second), 0))
		}
		fmt.Fprintln(w, msg+" (Ctrl-C to stop waiting)…")
	}
}
