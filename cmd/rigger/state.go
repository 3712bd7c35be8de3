package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/statedir"
)

// defaultStateNamespace is the namespace deploy/ runs rigger serve in.
const defaultStateNamespace = "rigger-system"

type stateOptions struct {
	cluster, stateDir, namespace, kubeconfig string
	force                                    bool
}

func newStateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Move a cluster's state between a state directory and Kubernetes Secrets",
		Long: `A cluster's state (its PKI with the CA keys, the nodes of the last apply, the
records of rotations and restores, the secrets encryption key) lives in a
state directory for "rigger apply", and in Secrets of rigger serve's
namespace when serve runs with --state-backend kubernetes: one Secret per
file, labelled rigger.io/cluster=<cluster_name>.

"rigger state import" copies a state directory into the Secrets, so that a
cluster applied from a laptop can be handed to serve; "rigger state export"
copies the Secrets into a state directory, to take it back. Both copy each
file byte for byte, hold the state directory's lock while they run, refuse
to replace state that is there already unless --force (then the
destination's state files become the source's, and those it lacks are
removed), and list the files moved (never their content).

Stop the other side first: while serve reconciles the cluster, or a
"rigger apply" runs with the state directory, what one writes after the
move is not in the other's copy. See docs/gitops.md ("State in the
cluster").`,
	}
	cmd.AddCommand(newStateMoveCommand("import", "Copy a cluster's state directory into Kubernetes Secrets",
		`Import copies the state directory of cluster --cluster (--state-dir, rigger
apply's by default) into Secrets of --namespace, one per file, for rigger
serve --state-backend kubernetes to take the cluster up. It refuses a
directory without state or whose PKI does not load, and a cluster that has
state Secrets already unless --force: then they become the directory's (a
Secret changed meanwhile by another writer is not overwritten). It lists
the files moved, never their content.`,
		`  rigger state import --cluster prod --kubeconfig ~/.kube/management.yaml`),
		newStateMoveCommand("export", "Copy a cluster's state from Kubernetes Secrets into a state directory",
			`Export copies the state Secrets of cluster --cluster in --namespace into
the state directory --state-dir (rigger apply's by default), files mode
0600, for rigger apply to use. It refuses a cluster without state Secrets,
and a directory that holds state already unless --force: then its state
files become the Secrets' (its lock stays). It lists the files moved,
never their content.`,
			`  rigger state export --cluster prod --state-dir ./prod-state`))
	return cmd
}

func newStateMoveCommand(verb, short, long, example string) *cobra.Command {
	var o stateOptions
	cmd := &cobra.Command{
		Use:     verb,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), verb)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.cluster, "cluster", "", "cluster_name of the cluster (required)")
	fl.StringVar(&o.stateDir, "state-dir", "", "the cluster's state directory, as rigger apply's --state-dir (default $XDG_STATE_HOME/rigger/<cluster> or ~/.local/state/rigger/<cluster>)")
	fl.StringVar(&o.namespace, "namespace", defaultStateNamespace, "namespace of the state Secrets (rigger serve's)")
	fl.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster serve runs in (default $KUBECONFIG or ~/.kube/config)")
	fl.BoolVar(&o.force, "force", false, "replace the state the destination holds already")
	return cmd
}

func (o *stateOptions) run(ctx context.Context, out io.Writer, verb string) error {
	if o.cluster == "" {
		return fmt.Errorf("give the cluster: --cluster <cluster_name>")
	}
	dir := o.stateDir
	if dir == "" {
		d, err := statedir.Default(o.cluster)
		if err != nil {
			return err
		}
		dir = d
	}
	if _, err := os.Stat(dir); verb == "import" && err != nil {
		return fmt.Errorf("import the state of cluster %s: %w: give its rigger apply's state directory (--state-dir)", o.cluster, err)
	}
	secrets, err := stateSecrets(o.kubeconfig, o.namespace)
	if err != nil {
		return err
	}
	release, err := lock.File(ctx, filepath.Join(dir, reconcile.LockFileName), lock.Me("state "+verb, time.Now()), false)
	if err != nil {
		return fmt.Errorf("%s the state of cluster %s: %w", verb, o.cluster, err)
	}
	defer release()
	store := &secretstate.Store{Secrets: secrets, Namespace: o.namespace}
	var m secretstate.Moved
	var what string
	if verb == "import" {
		m, err = store.Import(ctx, o.cluster, dir, o.force)
		what = fmt.Sprintf("imported %d file(s) of cluster %s from %s into Secrets of namespace %s", len(m.Files), o.cluster, dir, o.namespace)
	} else {
		m, err = store.Export(ctx, o.cluster, dir, o.force)
		what = fmt.Sprintf("exported %d file(s) of cluster %s from Secrets of namespace %s into %s", len(m.Files), o.cluster, o.namespace, dir)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s:\n%s", what, m)
	return nil
}

// stateSecrets is the API of the Secrets of namespace, where rigger serve
// keeps its state, through kubeconfig ($KUBECONFIG or ~/.kube/config when
// it is empty), for the commands run beside serve.
func stateSecrets(kubeconfig, namespace string) (corev1client.SecretInterface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reach the cluster of rigger serve's Secrets: %w: give --kubeconfig", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return client.CoreV1().Secrets(namespace), nil
}
