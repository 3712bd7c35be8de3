package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/sandbox/smoke"
	"github.com/rigger/rigger/spec"
)

func newSandboxSmokeCommand() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "smoke",
		Short: "Check that a cluster runs workloads across its nodes",
		Long: `Smoke runs a web server pod (busybox httpd, from system_images.alpine) on
the last worker node of cluster.yml, behind a Service, and fetches its page
from a pod on the first worker node: by the pod's IP (the pod network across
nodes) and by the Service's name (CoreDNS and kube-proxy too). It reads the
answers through the API server (as kubectl logs does), prints them, and
deletes what it made (namespace ` + smoke.Namespace + `).

It is the check 'make demo' ends with; it works on any cluster whose nodes
have the alpine image.`,
		Example: `  rigger sandbox smoke -f examples/clusters/sandbox/cluster.yml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			var workers []string
			for _, n := range s.c.Nodes {
				if slices.Contains(n.Role, spec.RoleWorker) {
					workers = append(workers, n.HostnameOverride)
				}
			}
			if len(workers) == 0 {
				return fmt.Errorf("cluster.yml has no worker node to run pods on")
			}
			kc, err := s.kubeconfig(cmd.Context())
			if err != nil {
				return err
			}
			cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			_, err = smoke.Check{Client: cs, Image: s.c.SystemImages.Alpine, ServerNode: workers[len(workers)-1], ClientNode: workers[0],
				Timeout: 3 * time.Minute, Progress: func(msg string) { fmt.Fprintf(w, "    %s\n", msg) }}.Run(cmd.Context())
			return err
		},
	}
	f.add(cmd)
	return cmd
}
