package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// clusterFlags are the flags of every command that works on a cluster's
// nodes: the cluster.yml and where its state lives.
type clusterFlags struct {
	file       string
	stateDir   string
	knownHosts string
	// lockAs, when set, is the command open takes the cluster's lock for
	// (commands that change the cluster); waitLock waits for it.
	lockAs   string
	waitLock bool
	// rotate is a certificate rotation asked for on the command line
	// (rigger cert rotate).
	rotate *pki.Rotation
	// rotateKey asks for a rotation of the secrets encryption key (rigger
	// encrypt rotate-key).
	rotateKey bool
	// teardown plans the removal of the cluster (rigger remove).
	teardown bool
	// allowRemovals lets the plan remove more nodes than
	// rigger.max_removed_nodes allows (--allow-removals).
	allowRemovals bool
	// timings prints where the command's time went (--timings), which
	// timeline records (nil without).
	timings  bool
	timeline *timeline.Timeline
	// ignoreDocker skips the check of the nodes' Docker versions
	// (--ignore-docker-version, as rke up's flag).
	ignoreDocker bool
	// keysPerNode reports a node whose SSH key cannot be used as that
	// node's error (rigger doctor), not the command's.
	keysPerNode bool
}

// startTimings starts the timeline of --timings, and in it the span of
// the whole command, which the func it returns ends.
func (f *clusterFlags) startTimings(command string) (end func()) {
	if f.timings {
		f.timeline = timeline.New()
	}
	return f.timeline.Begin(command)
}

// addTimings adds --timings, for the commands that plan.
func (f *clusterFlags) addTimings(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.timings, "timings", false, "print, on stderr, where the command's time went: each step of the observation (per node: connect, each Docker call, the files), the plan, the add-ons' dry run, the lock and Lease, each phase of the apply and in it each step, wait for health, node before and after its changes, and add-on")
}

func (f *clusterFlags) add(cmd *cobra.Command) {
	addFileFlag(cmd, &f.file)
	cmd.Flags().StringVar(&f.stateDir, "state-dir", "",
		"directory of the cluster's certificates and node record, never in git (default $XDG_STATE_HOME/rigger/<cluster_name> or ~/.local/state/rigger/<cluster_name>)")
	cmd.Flags().StringVar(&f.knownHosts, "known-hosts", "",
		"known_hosts file the nodes' SSH host keys are checked against (default: rigger.ssh.known_hosts_file of cluster.yml)")
	cmd.Flags().BoolVar(&f.ignoreDocker, "ignore-docker-version", false, "skip the check of each node's Docker version against RKE's list for the Kubernetes version (rke up's flag: like rke up, rigger ignores cluster.yml's ignore_docker_version)")
}

// opened is a cluster.yml with a reconcile session on it, and the
// cluster's lock when the command changes the cluster.
type opened struct {
	c *spec.Cluster
	*reconcile.Session
	// lock is held for commands that change the cluster (lockAs); nil
	// otherwise.
	lock *reconcile.Lock
	// dir is the state directory; fresh says that taking the lock made it.
	dir   string
	fresh bool
	// timeline records where the time goes with --timings; nil without.
	timeline *timeline.Timeline
}

// renderTimings writes the timeline of --timings to w, ending the span
// of the whole command first.
func (o *opened) renderTimings(w io.Writer, end func()) {
	if o.timeline == nil {
		return
	}
	end()
	fmt.Fprintln(w, "\nTimings:")
	o.timeline.Render(w)
}

// dropFreshStateDir removes the state directory the lock made, when it
// holds nothing but the lock file: a refused command (an adopt) leaves no
// trace. It releases the lock.
func (o *opened) dropFreshStateDir() {
	if !o.fresh || o.lock == nil {
		return
	}
	entries, err := os.ReadDir(o.dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != reconcile.LockFileName {
		return
	}
	// Removed while held: nobody else can have opened a directory that
	// this process has just made.
	os.Remove(filepath.Join(o.dir, reconcile.LockFileName))
	o.lock.Release()
	os.Remove(o.dir)
}

// restoreRequest is the restore cluster.yml requests (restore:), with the
// record of its id when it was carried out already; nil when it requests
// none.
func (o *opened) restoreRequest() (*etcdsnap.RestoreRequest, error) {
	return etcdsnap.RequestedRestore(o.dir, o.c.Restore)
}

// kubeconfig is the admin kubeconfig: the API server of the first
// controlplane node, with the kube-admin certificate of the cluster's PKI.
func (o *opened) kubeconfig(ctx context.Context) ([]byte, error) {
	set, err := o.PKI(ctx)
	if err != nil {
		return nil, err
	}
	return pki.AdminKubeconfig(set, pki.RequestFor(o.c))
}

// Close releases the lock and closes the session.
func (o *opened) Close() {
	if o.lock != nil {
		o.lock.Release()
	}
	o.Session.Close()
}

// etcd is the session's value for the etcd snapshot operations.
func (o *opened) etcd(cmd *cobra.Command) (*etcdsnap.Cluster, error) {
	return o.Etcd(cmd.Context(), o.lock)
}

// open loads cluster.yml and opens a reconcile session on it; with lockAs
// set it takes the cluster's lock too.
func (f *clusterFlags) open(cmd *cobra.Command) (*opened, error) {
	c, err := loadCluster(cmd, f.file)
	if err != nil {
		return nil, err
	}
	if f.knownHosts != "" {
		c.Rigger.SSH.KnownHostsFile = f.knownHosts
	}
	dir := f.stateDir
	if dir == "" {
		if dir, err = statedir.Default(c.ClusterName); err != nil {
			return nil, err
		}
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	tl := f.timeline
	s, err := reconcile.Open(c, reconcile.Options{StateDir: dir, Log: log, ConfigDir: filepath.Dir(f.file), Rotate: f.rotate,
		RotateKey: f.rotateKey, Teardown: f.teardown, AllowRemovals: f.allowRemovals, IgnoreDockerVersion: f.ignoreDocker, Timeline: tl,
		KeysPerNode: f.keysPerNode})
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(dir)
	o := &opened{c: c, Session: s, dir: dir, fresh: errors.Is(statErr, fs.ErrNotExist), timeline: tl}
	if f.lockAs != "" {
		end := tl.Begin("take the cluster's lock")
		o.lock, err = lockSession(cmd, s, f.lockAs, f.waitLock)
		end()
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return o, nil
}

// lockSession takes the cluster's lock (in the state directory) for the
// session. When another rigger holds it (an apply, or serve reconciling
// the cluster), it refuses naming the holder, or with wait says who it
// waits for and waits.
func lockSession(cmd *cobra.Command, s *reconcile.Session, command string, wait bool) (*reconcile.Lock, error) {
	lk, err := s.Lock(cmd.Context(), command, false)
	var held *lock.HeldError
	if !wait || !errors.As(err, &held) {
		return lk, err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Waiting for the cluster's lock, held by %s since %s (Ctrl-C to stop waiting)…\n",
		held.Holder.ID, held.Holder.Since.Local().Format("15:04:05"))
	return s.Lock(cmd.Context(), command, true)
}

// renderPlanned writes the plan and where the certificates come from.
func renderPlanned(w io.Writer, pl *decide.Planned) {
	var newCA *pkisource.NewCAError
	if err := pl.Blocked(); errors.As(err, &newCA) {
		fmt.Fprintf(w, "Certificates: new, for this plan only: %v", err)
	} else {
		fmt.Fprintf(w, "Certificates: %s", pl.PKISource)
	}
	if n := len(pl.PKIChanges); n > 0 {
		fmt.Fprintf(w, "; %d to issue:", n)
		for _, c := range pl.PKIChanges {
			fmt.Fprintf(w, "\n  %s %s (%s)", c.Action, c.Name, c.Reason)
		}
	}
	fmt.Fprint(w, "\n\n")
	renderRotation(w, pl)
	renderEncryption(w, pl)
	if next := pl.Next(); next != "" {
		fmt.Fprintf(w, "After this plan's stage: %s, in a plan of its own (an apply goes on with it).\n\n", next)
	}
	for _, warn := range pl.Warnings {
		fmt.Fprintf(w, "Warning: %s\n\n", warn)
	}
	renderAddonPlan(w, pl)
	renderBlocked(w, pl)
	if len(pl.NodeChanges) > 0 {
		kubenode.RenderPending(w, pl.NodeChanges)
		fmt.Fprintln(w)
		if pl.Plan.Empty() && len(pl.Plan.Unreachable) == 0 {
			fmt.Fprintln(w, "No changes to the containers and files on the nodes.")
			return
		}
	}
	pl.Plan.Render(w)
}

// renderBlocked writes the rolling phases the plan's budgets stop
// (workers down already) and the removal guard's refusal: what an apply
// of the plan would stop at.
func renderBlocked(w io.Writer, pl *decide.Planned) {
	blocked := pl.Budgets.Blocked(pl.Plan)
	for _, ph := range slices.Sorted(maps.Keys(blocked)) {
		fmt.Fprintf(w, "Phase %s blocked, nothing changes there: %v\n\n", ph, blocked[ph])
	}
	if err := pl.Blocked(); err != nil {
		var refused *etcdmember.RefusedError
		if reason, _ := stall.Classify(err); reason == stall.RemovalGuard || errors.As(err, &refused) {
			fmt.Fprintf(w, "Blocked: %v\n\n", err)
		}
	}
}

// renderRotation writes the certificate rotation the plan carries out,
// one that waits for it, and a record that goes.
func renderRotation(w io.Writer, pl *decide.Planned) {
	if r := pl.Rotation(); r != nil {
		how := "started now"
		if r.Resumed {
			how = "resumed: an earlier apply began it and did not finish; nothing is issued again"
		}
		fmt.Fprintf(w, "Certificate rotation (asked on the %s), %s:\n  reissues %s\n", r.From, how, r.Rotation.String())
		if r.CA {
			fmt.Fprintf(w, "  stage %s of %s", r.Stage, strings.Join(stageNames(), ", "))
			fmt.Fprintln(w, "; each stage restarts every component, node by node, and the next follows once every node runs it")
		}
		fmt.Fprintf(w, "  certificates: %s\n", strings.Join(r.Names, ", "))
		fmt.Fprintln(w, "  the components that read them restart, node by node (see the restarts below)")
		fmt.Fprintln(w)
	}
	if r := pl.RotationWaiting(); r != nil {
		fmt.Fprintf(w, "Certificate rotation of %s: waits until the rotation under way is done; the next apply after it starts it.\n\n", r.String())
	}
	if pl.RotationRecordCleared() {
		fmt.Fprint(w, "rotate_certificates is no longer in cluster.yml: the record of the rotation it asked for is dropped, so that adding it again rotates again.\n\n")
	}
}

func stageNames() []string {
	var out []string
	for _, st := range pki.CAStages {
		out = append(out, string(st))
	}
	return out
}

// renderEncryption writes where the generated secrets encryption key comes
// from, the keys' names (never their secrets) and the stages an apply runs.
func renderEncryption(w io.Writer, pl *decide.Planned) {
	e := pl.Encryption
	if e == nil {
		return
	}
	blocked := pl.Blocked()
	if reason, _ := stall.Classify(blocked); blocked != nil && reason == stall.NewKeyBlocked {
		fmt.Fprintf(w, "Secrets encryption: new key, for this plan only: %v\n", blocked)
	} else {
		source := e.Source.String()
		if e.Source.Kind == pkisource.New {
			source = "new: no controlplane node has a key yet"
		}
		fmt.Fprintf(w, "Secrets encryption: keys %s (%s)", strings.Join(e.Keys, ", "), source)
		if !e.LastRotated.IsZero() {
			fmt.Fprintf(w, "; last rotated %s to %s", e.LastRotated.Format(time.RFC3339), e.LastRotatedKey)
		}
		fmt.Fprintln(w)
	}
	if op := e.Op; op != nil {
		what := map[secretsenc.Kind]string{
			secretsenc.KindRotate:  "key rotation",
			secretsenc.KindEncrypt: "encryption of the Secrets written before",
		}[op.Kind]
		state := "pending (rotate_encryption_key)"
		if !op.StartedAt.IsZero() {
			state = "in progress since " + op.StartedAt.Format(time.RFC3339)
		}
		stages := make([]string, len(e.Stages))
		for i, st := range e.Stages {
			stages[i] = string(st)
		}
		fmt.Fprintf(w, "  %s %s; this plan carries out stage %s, an apply then plans each next one: %s\n", what, state, op.Stage, strings.Join(stages, " -> "))
	}
	fmt.Fprintln(w)
}

// renderAddonPlan writes what applying the add-ons would change.
func renderAddonPlan(w io.Writer, pl *decide.Planned) {
	switch {
	case pl.AddonsErr != nil:
		fmt.Fprintf(w, "Add-ons: not planned (%v); apply applies them after the nodes' changes.\n\n", pl.AddonsErr)
	case pl.Addons == nil:
		fmt.Fprint(w, "Add-ons: not planned, the API server did not answer; apply applies them once the control plane runs.\n\n")
	case pl.Addons.Empty():
		fmt.Fprint(w, "Add-ons: no changes.\n\n")
	default:
		fmt.Fprintln(w, "Add-ons (server-side dry run):")
		pl.Addons.Render(w)
		fmt.Fprintln(w)
	}
}

// confirm asks on stdin; only "yes" goes on.
func confirm(cmd *cobra.Command, question string) error {
	fmt.Fprintf(cmd.OutOrStdout(), "\n%s\n  Only 'yes' will be accepted: ", question)
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if strings.TrimSpace(line) == "yes" {
		return nil
	}
	if err != nil && line == "" {
		return &exitError{code: 1, msg: "no answer on stdin: pass --yes to go on without asking"}
	}
	return &exitError{code: 1, msg: "cancelled: nothing was changed"}
}

// progressHooks print the executor's progress as k0sctl does: a title per
// phase and a line per node.
func progressHooks(w io.Writer) plan.Hooks {
	return plan.Hooks{
		Phase: func(_ plan.Phase, title string) { fmt.Fprintf(w, "==> %s\n", title) },
		Step: func(node, msg string, err error) {
			if err != nil {
				fmt.Fprintf(w, "    %s: FAILED %s: %s\n", node, msg, indent(err.Error()))
				return
			}
			fmt.Fprintf(w, "    %s: %s\n", node, msg)
		},
	}
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n        ") }

// renderResult writes the closing summary of an apply or remove.
func renderResult(w io.Writer, verb string, res *reconcile.Result, err error) {
	counts := map[plan.Action]int{}
	for _, o := range res.Done {
		if o.Err == nil {
			counts[o.Step.Action]++
		}
	}
	summary := fmt.Sprintf("%d created, %d replaced, %d restarted, %d removed, files written on %d node(s)",
		counts[plan.Create], counts[plan.Replace], counts[plan.Restart], counts[plan.Remove], counts[plan.WriteFiles])
	took := res.Duration.Round(100 * time.Millisecond)
	if err == nil {
		fmt.Fprintf(w, "\n%s complete in %s: %s.\n", verb, took, summary)
		return
	}
	fmt.Fprintf(w, "\n%s FAILED after %s: %s; %d failed, %d not run.\n", verb, took, summary, len(res.Failed()), len(res.NotRun))
	for _, s := range res.NotRun {
		fmt.Fprintf(w, "  not run: %s %s %s\n", s.Node, s.Action, s.Component)
	}
}
