package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/internal/termsafe"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/spec"
)

func newDoctorCommand() *cobra.Command {
	var (
		f      = clusterFlags{keysPerNode: true}
		output string
		nodes  []string
		skip   []string
		since  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Walk each node through the path it takes to join the cluster, and say where it stops and why",
		Long: `Doctor is for "my node will not join" and "my node shows unavailable". It
walks every node of cluster.yml, all at once, through an ordered list of
named checks, the path a node takes to join the cluster:

  reaching it       address, ssh-port, ssh-handshake, ssh-host-key, ssh-auth,
                    agent-connected, docker-socket, docker-api
  its machine       docker-version, cgroup-driver, clock, kernel-network, swap,
                    resolv-conf, disk, etcd-data
  what it runs      images, certificates, containers, etcd-member, etcd-disk,
                    health, ports
  in Kubernetes     events, node-registered, cni, node-ready, node-updates,
                    overlay, pod-network, dns

and the cluster as a whole: cluster-yml, pki, kubernetes-api, stale-nodes.

A node's walk stops at its first failing check, which is shown with what was
expected, what was found and what to do; the checks after it depend on it
and are shown as not run. A check of something the node does not have
(etcd-member on a worker) is skipped. What doctor reads of a machine it reads
through the node's Docker engine, with a one-shot container of
system_images.alpine that mounts the host's /etc and /var/lib read-only,
pings the other nodes through the overlay and asks the cluster DNS, and is
removed afterwards. For pod-network, doctor runs a probe pod of the pause
image on every Ready node (a DaemonSet rigger-doctor-probe-… in kube-system,
deleted when the walk ends) and pings from each node's probe pod those of the
others, with a helper container in the probe pod's network. Apart from that
DaemonSet (--skip pod-network), doctor changes nothing and pulls nothing.

docs/troubleshooting.md explains each check: the symptom, the cause and the
fix.

Exit status: 1 when a check failed (or on any error), 0 otherwise (warnings
included).`,
		Example: `  rigger doctor -f cluster.yml
  rigger doctor -f cluster.yml --node 10.0.0.12
  rigger doctor -f cluster.yml --skip swap,disk -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if err := checkSkip(skip); err != nil {
				return err
			}
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			found, err := s.Doctor(cmd.Context(), doctor.RunOptions{Nodes: nodes, Skip: skip, Since: since})
			if err != nil {
				return err
			}
			if output == outputJSON {
				if err := printJSON(cmd.OutOrStdout(), struct {
					Findings []doctor.Finding `json:"findings"`
				}{found}); err != nil {
					return err
				}
			} else {
				renderDoctor(cmd.OutOrStdout(), found, nodeNames(s.c))
			}
			if doctor.AnyFailed(found) {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().StringSliceVar(&nodes, "node", nil, "walk only this node (address, internal_address or hostname_override); repeat or separate with commas")
	cmd.Flags().StringSliceVar(&skip, "skip", nil, "checks not to run, by name (comma-separated); a skipped check does not stop the walk")
	cmd.Flags().DurationVar(&since, "since", doctor.DefaultSince, "how far back the Nodes' Events are read (the events check)")
	return cmd
}

// checkSkip refuses a --skip name that is not a check's.
func checkSkip(skip []string) error {
	names := doctor.CheckNames()
	for _, s := range skip {
		if !slices.Contains(names, s) {
			return fmt.Errorf("--skip %s: no such check; the checks are %s", s, strings.Join(names, ", "))
		}
	}
	return nil
}

// renderDoctor writes the findings for people: the cluster's, then each
// node's walk, and a summary line per node.
func renderDoctor(w io.Writer, found []doctor.Finding, names map[string]string) {
	node := "\x00"
	summary := map[string]string{}
	var (
		order  []string
		notRun []string // checks of the node not run, not written yet
	)
	flush := func() {
		if len(notRun) > 0 {
			fmt.Fprintf(w, "  %-7s %s\n", mark(doctor.NotRun), "not run: "+strings.Join(notRun, ", "))
			notRun = nil
		}
	}
	for _, f := range found {
		if f.Node != node {
			flush()
			node = f.Node
			if node == "" {
				fmt.Fprintln(w, "Cluster")
			} else {
				fmt.Fprintf(w, "\nNode %s\n", termsafe.String(names[node]))
				order = append(order, node)
				summary[node] = "ok"
			}
		}
		if f.Level == doctor.NotRun {
			notRun = append(notRun, f.Check)
			continue
		}
		flush()
		fmt.Fprintf(w, "  %-7s %-16s %s\n", mark(f.Level), f.Check, termsafe.String(indentFinding(f.Found)))
		if f.Level == doctor.Fail || f.Level == doctor.Warn {
			if f.Expected != "" {
				fmt.Fprintf(w, "  %-7s %-16s expected: %s\n", "", "", termsafe.String(f.Expected))
			}
			if f.Fix != "" {
				fmt.Fprintf(w, "  %-7s %-16s fix: %s\n", "", "", termsafe.String(f.Fix))
			}
		}
		if f.Node != "" {
			switch {
			case f.Level == doctor.Fail:
				summary[f.Node] = "stops at " + f.Check
			case f.Level == doctor.Warn && summary[f.Node] == "ok":
				summary[f.Node] = "ok, with warnings"
			}
		}
	}
	flush()
	fmt.Fprintln(w)
	for _, n := range order {
		fmt.Fprintf(w, "%s: %s\n", termsafe.String(names[n]), summary[n])
	}
}

// nodeNames are the nodes of c as doctor names them: address, with the
// hostname_override when there is one.
func nodeNames(c *spec.Cluster) map[string]string {
	out := map[string]string{}
	for _, n := range c.Nodes {
		out[n.Address] = n.Address
		if n.HostnameOverride != "" && n.HostnameOverride != n.Address {
			out[n.Address] += " (" + n.HostnameOverride + ")"
		}
	}
	return out
}

// mark is how a level shows in text.
func mark(l doctor.Level) string {
	switch l {
	case doctor.Fail:
		return "FAIL"
	case doctor.Warn:
		return "WARN"
	case doctor.NotRun:
		return "-"
	}
	return string(l)
}

// indentFinding lines up a finding's further lines (log lines) under its
// first.
func indentFinding(s string) string {
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", 27))
}
