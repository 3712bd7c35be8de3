package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/termsafe"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/report"
)

func newStatusCommand() *cobra.Command {
	var (
		f      clusterFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes, containers, Kubernetes Nodes and certificates",
		Long: `Status connects to every node and to the API server (through a controlplane
node) and shows, per node: whether it answers, its containers and whether they
match cluster.yml, and its Kubernetes Node's Ready condition; then how many
changes a plan has and when the certificates expire. It changes nothing.

Nodes that no node of cluster.yml owns (stale), addresses several Nodes
claim and nodes without a Node are listed after the nodes. Then the
problems that rigger doctor's checks find in what status read (a node not
reached and why, a container in a crash loop, an etcd member down, a Node
missing, duplicated or NotReady), each with its fix; rigger doctor walks
each node further.

Exit status: 0 when every node answers, every container is in sync, every
Node is Ready and none is stale; 1 otherwise.`,
		Example: `  rigger status -f cluster.yml
  rigger status -f cluster.yml -o json`,
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
			pl, err := s.Plan(cmd.Context())
			if err != nil {
				return err
			}
			st := pl.Status()
			if output == "json" {
				if err := printJSON(cmd.OutOrStdout(), st); err != nil {
					return err
				}
			} else {
				renderStatus(cmd.OutOrStdout(), st, time.Now())
			}
			if !healthy(st) {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f.add(cmd)
	addOutputFlag(cmd, &output)
	return cmd
}

// healthy reports whether the cluster is as cluster.yml says and serving.
func healthy(st *report.Status) bool { return len(notInSync(st)) == 0 }

// notInSync says why the cluster is not as cluster.yml says, or not
// serving, one reason a line; nothing when it is.
func notInSync(st *report.Status) []string {
	var out []string
	if st.PendingSteps > 0 {
		out = append(out, fmt.Sprintf("%d change(s) to the containers and files pending: run rigger plan to see them", st.PendingSteps))
	}
	if len(st.NodeChanges) > 0 {
		out = append(out, fmt.Sprintf("%d change(s) to the Kubernetes Nodes pending (listed above)", len(st.NodeChanges)))
	}
	if st.KubernetesError != "" {
		out = append(out, "the API server does not answer")
	}
	for _, n := range st.Nodes {
		switch {
		case n.Removed:
			out = append(out, fmt.Sprintf("node %s: removed from cluster.yml, its containers still there", n.Address))
		case !n.Reachable:
			out = append(out, fmt.Sprintf("node %s does not answer", n.Address))
		case n.KubernetesNode == nil && st.KubernetesError == "":
			out = append(out, fmt.Sprintf("node %s: no Kubernetes Node registered", n.Address))
		case n.KubernetesNode != nil && n.KubernetesNode.Ready != "True":
			out = append(out, fmt.Sprintf("node %s: Node %s not Ready (%s)", n.Address, n.KubernetesNode.Name, readyText(n.KubernetesNode)))
		}
	}
	if len(st.StaleNodes) > 0 {
		out = append(out, fmt.Sprintf("%d stale Node(s) (listed above)", len(st.StaleNodes)))
	}
	if e := st.Etcd; e != nil {
		if e.Error != "" {
			out = append(out, "etcd: "+oneLine(e.Error))
		}
		for _, node := range slices.Sorted(maps.Keys(e.Health)) {
			if h := e.Health[node]; h != "healthy" {
				out = append(out, fmt.Sprintf("etcd member on %s: %s", node, oneLine(h)))
			}
		}
	}
	if st.AddonsError != "" {
		out = append(out, "the add-ons could not be read")
	}
	for _, a := range st.Addons {
		switch {
		case a.Removed:
			out = append(out, fmt.Sprintf("add-on %s: removed from cluster.yml, still in the cluster", a.Name))
		case a.Pending > 0:
			out = append(out, fmt.Sprintf("add-on %s: %d change(s) pending", a.Name, a.Pending))
		case !a.Ready:
			out = append(out, fmt.Sprintf("add-on %s: not ready", a.Name))
		}
	}
	return out
}

// readyText is a Node's Ready condition that is not True: its status, reason
// and message.
func readyText(n *report.KubernetesNode) string {
	return strings.TrimSuffix(strings.TrimSpace(n.Ready+": "+n.ReadyReason+" "+oneLine(n.ReadyMessage)), ":")
}

// renderVersions says which Kubernetes versions the nodes run, and
// whether an upgrade is under way or stopped midway.
func renderVersions(w io.Writer, kv *report.KubernetesVersions) {
	if kv == nil {
		return
	}
	if !kv.Mixed {
		fmt.Fprintf(w, "\nKubernetes %s\n", kv.Running[0].Version)
		return
	}
	each := make([]string, len(kv.Running))
	for i, r := range kv.Running {
		each[i] = fmt.Sprintf("%s on %s", r.Version, strings.Join(r.Nodes, ", "))
	}
	fmt.Fprintf(w, "\nKubernetes: MIXED VERSIONS, %s", strings.Join(each, "; "))
	if u := kv.Upgrade; u != nil {
		fmt.Fprintf(w, ": the upgrade to %s is under way or stopped midway; rigger apply goes on with it", u.To)
	}
	fmt.Fprintln(w)
}

func renderStatus(w io.Writer, st *report.Status, now time.Time) {
	fmt.Fprintf(w, "Cluster %s, observed %s\n\n", st.Cluster, st.ObservedAt.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHOSTNAME\tROLES\tREACHABLE\tCONTAINERS\tKUBERNETES NODE")
	for _, n := range st.Nodes {
		reach := "yes"
		if !n.Reachable {
			reach = "NO"
		}
		inSync, running := 0, 0
		for _, c := range n.Containers {
			if c.InSync {
				inSync++
			}
			if c.State == "running" {
				running++
			}
		}
		containers := fmt.Sprintf("%d running, %d/%d in sync", running, inSync, len(n.Containers))
		kube := "-"
		switch {
		case n.KubernetesNode != nil && n.KubernetesNode.Ready == "True":
			kube = "Ready " + n.KubernetesNode.KubeletVersion
		case n.KubernetesNode != nil:
			kube = "NotReady (" + n.KubernetesNode.Ready + ")"
			if n.KubernetesNode.ReadyReason != "" {
				kube = "NotReady (" + n.KubernetesNode.Ready + ", " + n.KubernetesNode.ReadyReason + ")"
			}
		case st.KubernetesError == "" && !n.Removed:
			kube = "not registered"
		}
		roles := strings.Join(n.Roles, ",")
		if n.Removed {
			roles = "(removed from cluster.yml)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Address, n.Hostname, roles, reach, containers, kube)
	}
	tw.Flush()
	for _, n := range st.Nodes {
		if n.Error != "" {
			fmt.Fprintf(w, "  ! %s: %s\n", n.Address, oneLine(n.Error))
		}
	}
	if st.KubernetesError != "" {
		fmt.Fprintf(w, "  ! Kubernetes: %s\n", oneLine(st.KubernetesError))
	}
	renderVersions(w, st.Kubernetes)
	if len(st.KubernetesNodes) > 0 {
		fmt.Fprintln(w, "\nNodes as the API server lists them:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tREADY\tVERSION\tINTERNAL-IP")
		for _, n := range st.KubernetesNodes {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", n.Name, n.Ready, n.KubeletVersion, n.InternalIP)
		}
		tw.Flush()
	}
	renderNodeLinks(w, st)
	if e := st.Etcd; e != nil {
		healthy := 0
		for _, h := range e.Health {
			if h == "healthy" {
				healthy++
			}
		}
		fmt.Fprintf(w, "\netcd: %d of %d members healthy", healthy, len(e.Health))
		if len(e.Members) > 0 {
			names := make([]string, 0, len(e.Members))
			for _, m := range e.Members {
				name := m.Name
				if name == "" {
					name = "(not started) " + strings.Join(m.PeerURLs, ",")
				}
				if m.IsLearner {
					name += " (learner)"
				}
				names = append(names, name)
			}
			fmt.Fprintf(w, "; members: %s", strings.Join(names, ", "))
		}
		fmt.Fprintln(w)
		for _, node := range slices.Sorted(maps.Keys(e.Health)) {
			if h := e.Health[node]; h != "healthy" {
				fmt.Fprintf(w, "  ! %s: %s\n", node, oneLine(h))
			}
		}
		if e.Error != "" {
			fmt.Fprintf(w, "  ! %s\n", oneLine(e.Error))
		}
	}
	renderAddons(w, st)
	renderProblems(w, st)
	fmt.Fprintln(w)
	if why := notInSync(st); len(why) == 0 {
		fmt.Fprintln(w, "In sync with cluster.yml: no changes pending, every Node Ready.")
	} else {
		fmt.Fprintln(w, "Not in sync with cluster.yml:")
		for _, r := range why {
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
	if len(st.Certificates) > 0 {
		names := make([]string, 0, len(st.Certificates))
		for n := range st.Certificates {
			names = append(names, n)
		}
		slices.SortFunc(names, func(a, b string) int { return st.Certificates[a].Compare(st.Certificates[b]) })
		first := names[0]
		fmt.Fprintf(w, "Certificates: %d, the first to expire is %s on %s (in %d days).\n", len(names), first,
			st.Certificates[first].Format("2006-01-02"), int(st.Certificates[first].Sub(now).Hours()/24))
	}
	if r := st.CertificateRotation; r != nil {
		state := "to start: rigger apply starts it"
		if r.Resumed {
			state = "under way: an apply began it and did not finish, rigger apply carries it on"
		}
		stage := ""
		if r.CA {
			stage = ", at stage " + string(r.Stage)
		}
		fmt.Fprintf(w, "Certificate rotation of %s (asked on the %s%s): %s.\n", r.Rotation.String(), r.From, stage, state)
	}
	if e := st.SecretsEncryption; e != nil {
		fmt.Fprintf(w, "Secrets encryption: keys %s", strings.Join(e.Keys, ", "))
		if e.Operation != "" {
			fmt.Fprintf(w, "; %s at stage %s: rigger apply carries it on", e.Operation, e.Stage)
		}
		fmt.Fprintln(w, ".")
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// renderAddons lists the add-ons with their readiness and pending changes.
func renderAddons(w io.Writer, st *report.Status) {
	if st.AddonsError != "" {
		fmt.Fprintf(w, "  ! add-ons: %s\n", oneLine(st.AddonsError))
	}
	if len(st.Addons) == 0 {
		return
	}
	fmt.Fprintln(w, "\nAdd-ons:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME	OBJECTS	READY	PENDING")
	for _, a := range st.Addons {
		ready := "yes"
		switch {
		case a.Error != "":
			ready = "unknown"
		case a.Objects == 0:
			ready = "not applied"
		case !a.Ready:
			ready = "NO"
		}
		pending := "-"
		switch {
		case a.Removed:
			pending = "removed from cluster.yml"
		case a.Pending > 0:
			pending = fmt.Sprintf("%d object(s)", a.Pending)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", a.Name, a.Objects, ready, pending)
	}
	tw.Flush()
	for _, a := range st.Addons {
		for _, nr := range a.NotReady {
			fmt.Fprintf(w, "  ! %s: %s\n", a.Name, oneLine(nr))
		}
		if a.Error != "" {
			fmt.Fprintf(w, "  ! %s: %s\n", a.Name, oneLine(a.Error))
		}
	}
}

// renderNodeLinks lists the Nodes no node of cluster.yml owns, the
// addresses several Nodes claim and the nodes without a Node.
func renderNodeLinks(w io.Writer, st *report.Status) {
	if len(st.StaleNodes) == 0 && len(st.DuplicateNodes) == 0 && len(st.MissingNodes) == 0 && len(st.NodeChanges) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, a := range st.MissingNodes {
		fmt.Fprintf(w, "  ! %s: no Kubernetes Node (the next apply restarts its kubelet if it runs)\n", a)
	}
	for _, d := range st.DuplicateNodes {
		fmt.Fprintf(w, "  ! %s: claimed by several Nodes: %s counts, %s do(es) not\n", d.Address, d.Owner, strings.Join(d.Others, ", "))
	}
	if len(st.StaleNodes) > 0 {
		fmt.Fprintln(w, "Stale Nodes (no node of cluster.yml owns them; rigger.stale_nodes: delete removes them):")
		for _, n := range st.StaleNodes {
			fmt.Fprintf(w, "  ! %s (Ready: %s): %s\n", n.Name, n.Ready, n.Reason)
		}
	}
	kubenode.RenderPending(w, st.NodeChanges)
}

// renderProblems writes the warnings and failures of doctor's checks that
// the status answers, each with its fix, and points at rigger doctor.
func renderProblems(w io.Writer, st *report.Status) {
	if len(st.Problems) == 0 {
		return
	}
	fmt.Fprintln(w, "\nProblems (rigger doctor walks each node further):")
	for _, p := range st.Problems {
		where := "cluster"
		if p.Node != "" {
			where = p.Node
		}
		fmt.Fprintf(w, "  %s %s %s: %s\n", mark(p.Level), termsafe.String(where), p.Check, termsafe.String(strings.SplitN(p.Found, "\n", 2)[0]))
		if p.Fix != "" {
			fmt.Fprintf(w, "      fix: %s\n", termsafe.String(p.Fix))
		}
	}
}
