package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/rigger/rigger/sandbox"
)

func newSandboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Make real local nodes (SSH + Docker) to run clusters on",
		Long: `Sandbox makes nodes on this machine for rigger to manage, as kind or RKE's old
--dind mode did: each node is a host of its own (network, mount, UTS and cgroup
namespaces) with its own address on a bridge (10.231.<subnet>.11, .12, …), its
own /etc/kubernetes, /var/lib/docker, /var/lib/etcd, /var/lib/kubelet, /opt/rke
and /run, an OpenSSH sshd on port 22 that accepts a key the sandbox makes, its
own Docker engine on /var/run/docker.sock, and its own containerd on
/run/containerd/containerd.sock (a CRI endpoint for a kubelet that does not
use cri-dockerd). Its /opt/cni/bin and /etc/cni/net.d are empty, as on a new
machine: the cluster's network plugin fills them.

It also builds, without a registry, the images a cluster needs (rigger's own,
etcd, the Kubernetes components, pause, an rke-tools stand-in with cri-dockerd,
and the add-ons' flannel, flannel-cni, CoreDNS and metrics-server), loads them
into every node, and prints the system_images block that makes a cluster.yml
use them.

Needs root. What it changes on the machine, and how long it takes, is in
docs/sandbox.md.`,
		Example: `  rigger sandbox up                      # 3 nodes, images built and loaded
  rigger sandbox status
  ssh -i /var/lib/rigger-sandbox/rigger/ssh/id_ed25519 \
      -o UserKnownHostsFile=/var/lib/rigger-sandbox/rigger/ssh/known_hosts root@10.231.0.11 docker ps
  rigger sandbox node partition node2
  rigger sandbox smoke -f examples/clusters/sandbox/cluster.yml
  rigger sandbox down`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newSandboxUpCommand(), newSandboxDownCommand(), newSandboxStatusCommand(), newSandboxNodeCommand(), newSandboxImagesCommand(),
		newSandboxSmokeCommand())
	return cmd
}

func addSandboxNameFlag(cmd *cobra.Command, name *string) {
	cmd.Flags().StringVar(name, "name", sandbox.DefaultName, "the sandbox's name")
}

func newSandboxUpCommand() *cobra.Command {
	var opts sandbox.Options
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Make the sandbox's nodes, or complete and check them",
		Long: `Up makes N nodes, each with its own network namespace and address, its own
directories mounted over the paths a Kubernetes node owns, its own hostname,
sshd and Docker engine. It prints each node's address, the SSH user and key,
the known_hosts file that holds every node's host key, and the system_images
block for cluster.yml.

Up is idempotent: on an existing sandbox it checks every part, makes what is
missing (also after an Up that was killed half-way) and restarts stopped
services; a partitioned node stays partitioned.

Images: rigger's own (rigger/rigger:dev, from this rigger binary when it is
static, else built from the repository), etcd and the Kubernetes components
(built from the Go module proxy by hack/etcd-build and hack/kube-build, about
10 minutes the first time, then cached in $RIGGER_CACHE), pause, an rke-tools
stand-in (cri-dockerd) and the add-on images (flannel, flannel-cni, CoreDNS,
metrics-server; built from the Go module proxy, about 20 more minutes the
first time, then cached) are built and put into every node's engine: a new
node's engine starts from the engine store (the images imported once per
machine), one that has run gets what it lacks imported.
--images=false skips them; 'rigger sandbox images' only builds them.

The default Kubernetes is RKE v1.8.14's, v1.32.13 with etcd v3.5.16;
--kubernetes v1.33.13,v1.34.4 also builds and loads those versions'
hyperkube and etcd images (about 10 minutes each the first time), the targets
of a minor upgrade, and prints their system_images.`,
		Example: `  rigger sandbox up
  rigger sandbox up --nodes 5 --name big --subnet 7
  rigger sandbox up --images=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Images && opts.RiggerBinary == "" {
				opts.RiggerBinary = staticSelf()
			}
			s, err := sandbox.Up(cmd.Context(), opts, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := printSandbox(cmd.OutOrStdout(), s); err != nil {
				return err
			}
			if !opts.Images {
				return nil
			}
			if err := printVersionImages(cmd.OutOrStdout(), opts.KubernetesVersions); err != nil {
				return err
			}
			return printRKEImages(cmd.OutOrStdout(), opts.RKE)
		},
	}
	addSandboxNameFlag(cmd, &opts.Name)
	cmd.Flags().IntVar(&opts.Nodes, "nodes", sandbox.DefaultNodes, "how many nodes")
	cmd.Flags().IntVar(&opts.Subnet, "subnet", 0, "the nodes' subnet is 10.231.<subnet>.0/24 (0-255); two sandboxes need two subnets")
	cmd.Flags().BoolVar(&opts.Images, "images", true, "build (cached) and load the cluster images into every node")
	cmd.Flags().BoolVar(&opts.ContainerdImages, "containerd-images", false, "also import the add-ons' pod images into every node's containerd, for a kubelet without cri-dockerd (enable_cri_dockerd: false)")
	cmd.Flags().StringVar(&opts.RiggerBinary, "rigger-binary", "", "static rigger binary for rigger's image (default: this one if static, else built from the repository)")
	addSandboxBuildFlags(cmd, &opts)
	cmd.Flags().StringVar(&opts.CacheDir, "cache-dir", "", "where built binaries and image archives are kept (default $RIGGER_CACHE or /var/cache/rigger)")
	return cmd
}

func newSandboxImagesCommand() *cobra.Command {
	var opts sandbox.Options
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build the sandbox's images into the cache, without making nodes",
		Long: `Images builds (or finds in $RIGGER_CACHE) everything 'rigger sandbox up' loads
into the nodes: the programs built from the Go module proxy and the image
archives, and as root the engine store that new nodes' engines start from (the
images imported once by an engine of its own). It makes no nodes: run it
before tests that start sandboxes, so that a cold cache is filled outside
their time limits. It prints the system_images block.

--kubernetes also builds the hyperkube and etcd images of other Kubernetes
versions than the default (` + sandbox.KubernetesVersion + ` with etcd ` + sandbox.EtcdVersion + `): the
upgrade road past RKE, one minor at a time, to the newest (the flag lists
them). It prints the two system_images entries that run each.`,
		Example: `  rigger sandbox images
  rigger sandbox images --kubernetes v1.33.13,v1.34.4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.RiggerBinary == "" {
				opts.RiggerBinary = staticSelf()
			}
			imgs, err := sandbox.BuildImages(cmd.Context(), opts, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := printSystemImages(cmd.OutOrStdout(), imgs); err != nil {
				return err
			}
			if err := printVersionImages(cmd.OutOrStdout(), opts.KubernetesVersions); err != nil {
				return err
			}
			return printRKEImages(cmd.OutOrStdout(), opts.RKE)
		},
	}
	cmd.Flags().StringVar(&opts.RiggerBinary, "rigger-binary", "", "static rigger binary for rigger's image (default: this one if static, else built from the repository)")
	addSandboxBuildFlags(cmd, &opts)
	cmd.Flags().StringVar(&opts.CacheDir, "cache-dir", "", "where built binaries and image archives are kept (default $RIGGER_CACHE or /var/cache/rigger)")
	return cmd
}

// addSandboxBuildFlags adds the flags of what the image build builds and
// where from.
func addSandboxBuildFlags(cmd *cobra.Command, opts *sandbox.Options) {
	var others []string
	for _, r := range sandbox.KubeReleases() {
		if r.Kubernetes != sandbox.KubernetesVersion {
			others = append(others, r.Kubernetes+" (etcd "+r.Etcd+")")
		}
	}
	cmd.Flags().StringSliceVar(&opts.KubernetesVersions, "kubernetes", nil,
		fmt.Sprintf("also build the hyperkube and etcd images of these Kubernetes versions, besides the default %s (etcd %s): %s",
			sandbox.KubernetesVersion, sandbox.EtcdVersion, strings.Join(others, ", ")))
	cmd.Flags().BoolVar(&opts.RKE, "rke", false, "also build the stand-ins for the images RKE v1.8.14's own rke up runs (rke-tools', and hyperkube with kubectl for its add-on Jobs) and print the system_images entries that use them")
	cmd.Flags().StringVar(&opts.Kubectl, "kubectl", os.Getenv("RIGGER_KUBECTL"), "with --rke: kubectl "+sandbox.KubernetesVersion+" for the hyperkube stand-in (make kubectl builds it; default $RIGGER_KUBECTL)")
	cmd.Flags().StringVar(&opts.BuildSource, "build-src", "", "the hack directory of the rigger repository, with kube-build/<version> and etcd-build/<version> (default: found above the working directory; needed only on a cold cache)")
}

// printRKEImages writes, with --rke, the system_images entries that make
// RKE's own rke up run the stand-ins for RKE's images.
func printRKEImages(w io.Writer, rke bool) error {
	if !rke {
		return nil
	}
	imgs := sandbox.RKESystemImages()
	keys := slices.Sorted(maps.Keys(imgs))
	if _, err := fmt.Fprintf(w, "# for RKE's own rke up, in place of these entries:\n"); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "  %s: %s\n", k, imgs[k]); err != nil {
			return err
		}
	}
	return nil
}

// printVersionImages writes, for each Kubernetes version asked for besides
// the default, the system_images entries that run it.
func printVersionImages(w io.Writer, versions []string) error {
	seen := map[string]bool{sandbox.KubernetesVersion: true}
	for _, v := range versions {
		imgs, err := sandbox.VersionImages(v)
		if err != nil {
			return err
		}
		r, _ := sandbox.Release(v)
		if seen[r.Kubernetes] {
			continue
		}
		seen[r.Kubernetes] = true
		fmt.Fprintf(w, "\n# Kubernetes %s: the same, with these system_images\n", r.Kubernetes)
		for _, k := range []string{"etcd", "kubernetes"} {
			fmt.Fprintf(w, "#   %s: %s\n", k, imgs[k])
		}
	}
	return nil
}

// staticSelf is this rigger binary when it can go into rigger's image as
// it is, else "" (the sandbox builds one).
func staticSelf() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	if err := sandbox.CheckStatic(self); err != nil {
		return ""
	}
	return self
}

// printSandbox writes the nodes, how to reach them and the system_images
// block.
func printSandbox(w io.Writer, s *sandbox.Sandbox) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHOSTNAME\tADDRESS\tUSER\tPORT")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", n.Name, n.Hostname, n.Address, n.User, n.Port)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nSSH key:      %s\nknown_hosts:  %s\n", s.KeyPath, s.KnownHostsPath)
	if len(s.Nodes) > 0 {
		fmt.Fprintf(w, "Try:          ssh -i %s -o UserKnownHostsFile=%s %s@%s docker ps\n",
			s.KeyPath, s.KnownHostsPath, s.Nodes[0].User, s.Nodes[0].Address)
	}
	if len(s.SystemImages) == 0 {
		return nil
	}
	return printSystemImages(w, s.SystemImages)
}

// printSystemImages writes the system_images block of a cluster.yml that
// uses the sandbox's images, keys sorted.
func printSystemImages(w io.Writer, imgs map[string]string) error {
	keys := make([]string, 0, len(imgs))
	for k := range imgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	node := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range keys {
		node.Content = append(node.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: k},
			&yaml.Node{Kind: yaml.ScalarNode, Value: imgs[k]})
	}
	fmt.Fprintf(w, "\n# cluster.yml: use the images loaded in the nodes\n")
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]*yaml.Node{"system_images": node}); err != nil {
		return err
	}
	return enc.Close()
}

func newSandboxDownCommand() *cobra.Command {
	var name string
	var all bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the sandbox and everything it made",
		Long: `Down removes everything the sandbox made: its processes (by pid, and every
process in its nodes' namespaces and cgroups), mounts, namespaces, links, the
bridge, its routing rule, and its directories; with the last sandbox also the
unreachable route for 10.231.0.0/16 and the empty mount points it created on
the host. It works on a half-made sandbox too, and does nothing when there is
none. The image cache ($RIGGER_CACHE) stays.

--all takes down every sandbox whose state is found and removes what sandboxes
whose state is gone left behind.`,
		Example: `  rigger sandbox down
  rigger sandbox down --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all {
				return sandbox.DownAll(cmd.Context())
			}
			return sandbox.Down(cmd.Context(), name)
		},
	}
	addSandboxNameFlag(cmd, &name)
	cmd.Flags().BoolVar(&all, "all", false, "every sandbox, and leftovers of sandboxes whose state is gone")
	return cmd
}

func newSandboxStatusCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the nodes and whether their sshd, Docker and containerd answer",
		Long: `Status shows every node of the sandbox: address, link (up or partitioned),
whether sshd answers on the node's address and whether the node's Docker engine
and containerd (CRI) answer on their sockets. Exit status 1 when any of them
does not.`,
		Example: `  rigger sandbox status
  rigger sandbox status --name test1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sandbox.Load(name)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			state := "ready"
			if !s.Ready {
				state = "half-made: run `rigger sandbox up` to complete it or `rigger sandbox down` to remove it"
			}
			fmt.Fprintf(w, "sandbox %s (%s, bridge %s): %s\n", s.Name, s.BridgeAddress, s.Bridge, state)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tHOSTNAME\tADDRESS\tLINK\tSSHD\tDOCKER\tCONTAINERD")
			bad := !s.Ready
			var problems []string
			for _, st := range s.Status(cmd.Context()) {
				link := "up"
				if st.Partitioned {
					link = "partitioned"
					bad = true
				}
				sshd, docker := answer(st.SSH, st.Pids[sandbox.ServiceSSHD]), answer(st.Docker, st.Pids[sandbox.ServiceDocker])
				containerd := answer(st.Containerd, st.Pids[sandbox.ServiceContainerd])
				if st.SSH != nil {
					bad = true
					problems = append(problems, fmt.Sprintf("%s sshd: %v", st.Name, st.SSH))
				}
				if st.Docker != nil {
					bad = true
					problems = append(problems, fmt.Sprintf("%s docker: %v", st.Name, st.Docker))
				}
				if st.Containerd != nil {
					bad = true
					problems = append(problems, fmt.Sprintf("%s containerd: %v", st.Name, st.Containerd))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", st.Name, st.Hostname, st.Address, link, sshd, docker, containerd)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, p := range problems {
				fmt.Fprintln(w, "  "+p)
			}
			if bad {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	addSandboxNameFlag(cmd, &name)
	return cmd
}

func answer(err error, pid int) string {
	switch {
	case err == nil:
		return fmt.Sprintf("answers (pid %d)", pid)
	case pid == 0:
		return "stopped"
	default:
		return fmt.Sprintf("no answer (pid %d)", pid)
	}
}

func newSandboxNodeCommand() *cobra.Command {
	var name string
	var services []string
	cmd := &cobra.Command{
		Use:   "node stop|start|partition|heal NODE",
		Short: "Inject faults: stop or start a node's services, cut or restore its link",
		Long: `Node injects faults into one node of the sandbox:

  stop NODE       stop the node's sshd, Docker engine and containerd (by pid;
                  --service picks some)
  start NODE      start them again and wait until they answer
  partition NODE  cut the node's link into the bridge: nothing reaches it, it reaches nothing
  heal NODE       restore the link

Stopping the engine stops its containers, as a Docker restart would. The engine
uses the node's containerd: stop it after the engine, start it before (the
default order does so); the kubelet's pods run on under their shims while
containerd is stopped.`,
		Example: `  rigger sandbox node stop node2 --service docker
  rigger sandbox node start node2
  rigger sandbox node partition node3
  rigger sandbox node heal node3`,
		Args:      cobra.ExactArgs(2),
		ValidArgs: []string{"stop", "start", "partition", "heal"},
		RunE: func(cmd *cobra.Command, args []string) error {
			action, node := args[0], args[1]
			if !slices.Contains(cmd.ValidArgs, action) {
				return fmt.Errorf("unknown action %q: use stop, start, partition or heal", action)
			}
			s, err := sandbox.Load(name)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			switch action {
			case "partition":
				return s.Partition(ctx, node)
			case "heal":
				return s.Heal(ctx, node)
			}
			// Start in the nodes' start order, stop in its reverse: the
			// engine uses the node's containerd.
			order := slices.Clone(services)
			rank := func(svc string) int { return slices.Index(sandbox.Services(), svc) }
			slices.SortStableFunc(order, func(a, b string) int {
				if action == "stop" {
					return rank(b) - rank(a)
				}
				return rank(a) - rank(b)
			})
			var errs []error
			for _, svc := range order {
				if action == "stop" {
					errs = append(errs, s.StopService(ctx, node, svc))
				} else {
					errs = append(errs, s.StartService(ctx, node, svc))
				}
			}
			return errors.Join(errs...)
		},
	}
	addSandboxNameFlag(cmd, &name)
	cmd.Flags().StringSliceVar(&services, "service", sandbox.Services(), "the services to stop or start: "+strings.Join(sandbox.Services(), ", "))
	return cmd
}
