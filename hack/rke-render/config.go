package main

import (
	"fmt"
	"os"
	"strings"

	rkecmd "github.com/rancher/rke/cmd"
	"github.com/urfave/cli"
)

// rkeConfigAnswers are the answers given to `rke config`'s questions: the
// address of the one host, and the default (an empty line) for every other
// question, in the order RKE v1.8.14's cmd/config.go asks them.
var rkeConfigAnswers = []string{
	"",         // Cluster Level SSH Private Key Path [~/.ssh/id_rsa]
	"",         // Number of Hosts [1]
	"10.0.0.1", // SSH Address of host (1) [none]
	"",         // SSH Port of host (1) [22]
	"",         // SSH Private Key Path of host (10.0.0.1) [none]
	"",         // SSH Private Key of host (10.0.0.1) [none]: the cluster's key
	"",         // SSH User of host (10.0.0.1) [ubuntu]
	"",         // Is host (10.0.0.1) a Control Plane host (y/n)? [y]
	"y",        // Is host (10.0.0.1) a Worker host (y/n)? [n]
	"y",        // Is host (10.0.0.1) an etcd host (y/n)? [n]
	"",         // Override Hostname of host (10.0.0.1) [none]
	"",         // Internal IP of host (10.0.0.1) [none]
	"",         // Docker socket path on host (10.0.0.1) [/var/run/docker.sock]
	"",         // Network Plugin Type (flannel, calico, weave, canal, aci) [canal]
	"",         // Authentication Strategy [x509]
	"",         // Authorization Mode (rbac, none) [rbac]
	"",         // Kubernetes Docker image [the default version's]
	"",         // Cluster domain [cluster.local]
	"",         // Service Cluster IP Range [10.43.0.0/16]
	"",         // Cluster Network CIDR [10.42.0.0/16]
	"",         // Cluster DNS Service IP [10.43.0.10]
	"",         // Add addon manifest URLs or YAML files [no]
}

// rkeConfig runs RKE's own `rke config` command (github.com/rancher/rke/cmd)
// with rkeConfigAnswers on its standard input, or `rke config --empty`
// when empty is set, and has it write its cluster.yml to file.
func rkeConfig(file string, empty bool) error {
	in, w, err := os.Pipe()
	if err != nil {
		return err
	}
	if _, err := w.WriteString(strings.Join(rkeConfigAnswers, "\n") + "\n"); err != nil {
		return err
	}
	w.Close()
	// Its questions go to standard output: send them to standard error.
	stdin, stdout := os.Stdin, os.Stdout
	os.Stdin, os.Stdout = in, os.Stderr
	defer func() { os.Stdin, os.Stdout = stdin, stdout; in.Close() }()

	app := cli.NewApp()
	app.Name = "rke"
	app.Commands = []cli.Command{rkecmd.ConfigCommand()}
	args := []string{"rke", "config", "--name", file}
	if empty {
		args = append(args, "--empty")
	}
	if err := app.Run(args); err != nil {
		return fmt.Errorf("rke config: %w", err)
	}
	return nil
}
