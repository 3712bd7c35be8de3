package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/agenttun"
)

// agentOptions are agent's flags.
type agentOptions struct {
	server, token, caChecksum   string
	nodeName, address, internal string
	dockerSocket, stateDir      string
	allowPorts                  []int
	logFormat, logLevel         string
}

// defaultAgentPorts are the node-local ports rigger dials on a node: etcd's
// client port, the API server, and the components' health endpoints.
func defaultAgentPorts() []int {
	var out []int
	for _, p := range []string{health.EtcdClientPort, health.APIServerPort, health.KubeletHealthzPort,
		health.KubeProxyHealthzPort, health.ControllerManagerPort, health.SchedulerPort} {
		n, _ := strconv.Atoi(p)
		out = append(out, n)
	}
	return out
}

func newAgentCommand() *cobra.Command {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run on a node rigger cannot reach: dial out to rigger serve and carry its calls to this node's Docker socket",
		Long: `Agent runs on a node declared in cluster.yml with "transport: agent", for
nodes behind NAT or at the edge that rigger cannot dial. It dials out to
rigger serve's agent endpoint (--server) over one TLS WebSocket, and carries
the streams rigger opens through it to this node's Docker socket and to the
node-local ports rigger uses (--allow-port), on loopback and the node's own
addresses; nothing else.

Joining, one log line a step: the flags are checked; the server's CA is
fetched without sending anything secret and its SHA-256 compared with
--ca-checksum (the agent stops there, token unsent, if they differ), and
only that CA is trusted from then on; the token is sent to the verified
server, which issues this node its own client certificate (kept in
--state-dir); the tunnel comes up. Later starts use the certificate and need
no token. A token joins one node, once, before it expires ("rigger agent
command" issues it). A refused token, a revoked certificate or a wrong
checksum end the agent with one line and exit code 1; everything else
(server down, node not yet declared in cluster.yml, another host holding
the node, a join waiting for "rigger agent approve" because the node holds a
valid certificate) is retried with exponential backoff and jitter.

Pass the token in $RIGGER_TOKEN rather than --token, which shows in the
process list. See docs/agent.md.`,
		Example: `  docker run -d --restart=unless-stopped --net=host --name rigger-agent \
    -v /var/run/docker.sock:/var/run/docker.sock -v /etc/kubernetes:/etc/kubernetes \
    -e RIGGER_TOKEN=rgt_... rigger/rigger:<version> agent --server https://rigger.example:9443/agent \
    --ca-checksum 3c1f...e2 --address 10.0.0.7 --internal-address 192.168.1.7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.server, "server", "", "URL of rigger serve's agent endpoint (https://host:port/agent)")
	fl.StringVar(&o.token, "token", "", "join token (better: $RIGGER_TOKEN); not needed once the node holds its certificate")
	fl.StringVar(&o.caChecksum, "ca-checksum", "", "SHA-256 (hex) of the PEM the server serves at <server>/cacerts")
	fl.StringVar(&o.nodeName, "node-name", "", "the node's name in cluster.yml: its address (default --address)")
	fl.StringVar(&o.address, "address", "", "the node's address, as in cluster.yml")
	fl.StringVar(&o.internal, "internal-address", "", "the node's internal address, as in cluster.yml")
	fl.StringVar(&o.dockerSocket, "docker-socket", "/var/run/docker.sock", "the Docker socket, the only Unix socket rigger may reach")
	fl.StringVar(&o.stateDir, "state-dir", "/etc/kubernetes/rigger-agent", "directory keeping the node's certificate and key")
	fl.IntSliceVar(&o.allowPorts, "allow-port", defaultAgentPorts(), "node-local TCP ports rigger may reach (on loopback and the node's addresses)")
	fl.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.AddCommand(newAgentCommandCommand(), newAgentApproveCommand())
	return cmd
}

// agentApproveOptions are the flags of agent approve.
type agentApproveOptions struct {
	file, node, key string
	store           agentStoreFlags
}

func newAgentApproveCommand() *cobra.Command {
	var o agentApproveOptions
	cmd := &cobra.Command{
		Use:   "approve",
		Short: "List the agent joins waiting for approval, or approve one (it replaces the node's certificate)",
		Long: `Approve lets a join replace the certificate of a node that holds a valid
one. rigger serve never lets a join do that by itself: whoever holds a
token for the node would take its traffic and lock its agent out. Such a
join is refused, listed in status.yml's pendingAgents and recorded here;
its agent asks again with backoff (at most a minute apart).

Without --node, approve lists the joins of the cluster waiting for
approval: node, host, address it came from, and the SHA-256 of the key it
asks a certificate for. With --node (and --key, a prefix of that SHA-256,
when more than one waits for the node) it approves that join: the agent's
next try gets a new certificate, and the node's old certificate stops
working. Check with the node's operator that the host and key are theirs
first: the waiting agent's log shows the start of its key, in the command
that approves it ("rigger agent approve --node … --key …").

Run it where rigger serve runs, with serve's --state-dir; when serve keeps
its state in Secrets (--state-backend kubernetes), from anywhere with
--state-backend kubernetes and a kubeconfig of that cluster.`,
		Example: `  rigger agent approve -f clusters/edge/cluster.yml --state-dir /var/lib/rigger
  rigger agent approve -f clusters/edge/cluster.yml --state-dir /var/lib/rigger --node 203.0.113.7 --key 3f9a12
  rigger agent approve -f clusters/edge/cluster.yml --state-backend kubernetes --kubeconfig ~/.kube/management.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(cmd, o.file)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), c, cmd.OutOrStdout())
		},
	}
	addFileFlag(cmd, &o.file)
	fl := cmd.Flags()
	fl.StringVar(&o.node, "node", "", "approve the join of this node (its address in cluster.yml); without it, list the joins waiting")
	fl.StringVar(&o.key, "key", "", "the start of the SHA-256 of the key the join asks for, when several joins of the node wait")
	o.store.add(fl)
	return cmd
}

// agentStoreFlags say where rigger serve keeps the agent tunnel's CA and
// records, for agent command and agent approve.
type agentStoreFlags struct {
	stateDir, backend, namespace, kubeconfig string
}

func (f *agentStoreFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.stateDir, "state-dir", "", "rigger serve's --state-dir, with --state-backend directory (default $XDG_STATE_HOME/rigger or ~/.local/state/rigger)")
	fl.StringVar(&f.backend, "state-backend", stateBackendDirectory, "rigger serve's --state-backend: directory (the records in --state-dir) or kubernetes (in Secrets of --namespace)")
	fl.StringVar(&f.namespace, "namespace", defaultStateNamespace, "namespace of rigger serve's Secrets, with --state-backend kubernetes")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster rigger serve runs in, with --state-backend kubernetes (default $KUBECONFIG or ~/.kube/config)")
}

// open opens the agent tunnel's store where serve keeps it. In Secrets it
// must hold serve's CA already: a CA made here, before serve moved its
// directory's into them, would not be the one the agents check.
func (f *agentStoreFlags) open(ctx context.Context, now time.Time) (*agenttun.Store, error) {
	switch f.backend {
	case stateBackendDirectory:
		if f.stateDir == "" {
			d, err := statedir.Default("x")
			if err != nil {
				return nil, err
			}
			f.stateDir = filepath.Dir(d)
		}
		return agenttun.OpenStore(agentStoreDir(f.stateDir), now)
	case stateBackendKubernetes:
	default:
		return nil, fmt.Errorf("--state-backend %q: give %s or %s", f.backend, stateBackendDirectory, stateBackendKubernetes)
	}
	secrets, err := stateSecrets(f.kubeconfig, f.namespace)
	if err != nil {
		return nil, err
	}
	records := &secretstate.AgentRecords{Secrets: secrets, Namespace: f.namespace}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, _, err := records.ReadCA(ctx); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("namespace %s holds no agent tunnel CA (Secret %s): start rigger serve with --agent-listen and "+
			"--state-backend kubernetes there first (or give the --namespace it runs in)", f.namespace, secretstate.AgentCASecret)
	} else if err != nil {
		return nil, err
	}
	return agenttun.NewStore(ctx, records, now)
}

func (o *agentApproveOptions) run(ctx context.Context, c *spec.Cluster, out io.Writer) error {
	store, err := o.store.open(ctx, time.Now())
	if err != nil {
		return err
	}
	if o.node == "" {
		waiting, err := store.Approvals(c.ClusterName)
		if err != nil {
			return err
		}
		if len(waiting) == 0 {
			fmt.Fprintf(out, "no join of cluster %s waits for approval\n", c.ClusterName)
			return nil
		}
		for _, a := range waiting {
			fmt.Fprintf(out, "node %s: host %s from %s, key %s, asked %s\n", a.Node, a.Hostname, a.Remote, a.Key,
				a.Requested.UTC().Format(time.RFC3339))
		}
		return nil
	}
	if !slices.ContainsFunc(c.Nodes, func(n spec.Node) bool { return n.Address == o.node && n.Transport == spec.TransportAgent }) {
		return fmt.Errorf("node %s is not declared with transport: agent in %s", o.node, o.file)
	}
	a, err := store.Approve(c.ClusterName, o.node, o.key)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "approved the join of node %s from host %s (%s, key %s): its agent's next try replaces the node's certificate\n",
		a.Node, a.Hostname, a.Remote, a.Key)
	return nil
}

// agentCommandOptions are the flags of agent command.
type agentCommandOptions struct {
	file, node, server, image string
	ttl                       time.Duration
	store                     agentStoreFlags
}

// DefaultTokenTTL is how long the token agent command issues is valid.
const DefaultTokenTTL = 24 * time.Hour

func newAgentCommandCommand() *cobra.Command {
	var o agentCommandOptions
	cmd := &cobra.Command{
		Use:   "command",
		Short: "Print the docker run line that starts a node's agent, with a new join token",
		Long: `Command prints the docker run line that starts the agent of --node, a node
of cluster.yml declared with "transport: agent": the server URL of its
cluster, the CA checksum, its addresses, and a join token issued now for
this node of this cluster alone, valid for one join within --ttl. Run it
where rigger serve runs, with serve's --state-dir (the token is kept
there, hashed; serve accepts it at once), or, when serve keeps its state
in Secrets, anywhere with --state-backend kubernetes and a kubeconfig.
The line holds the token: hand it over as a secret. A join never replaces the certificate of a node that
holds a valid one: such a join waits for "rigger agent approve".`,
		Example: `  rigger agent command -f clusters/edge/cluster.yml --node 203.0.113.7 \
    --server https://rigger.example:9443 --state-dir /var/lib/rigger
  rigger agent command -f clusters/edge/cluster.yml --node 203.0.113.7 \
    --server https://rigger.example:9443 --state-backend kubernetes --kubeconfig ~/.kube/management.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(cmd, o.file)
			if err != nil {
				return err
			}
			line, err := o.run(cmd.Context(), c)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	addFileFlag(cmd, &o.file)
	fl := cmd.Flags()
	fl.StringVar(&o.node, "node", "", "the node's address in cluster.yml")
	fl.StringVar(&o.server, "server", "", "rigger serve's agent endpoint as nodes reach it (its --agent-url: https://host:port)")
	o.store.add(fl)
	fl.StringVar(&o.image, "image", "rigger/rigger:"+version, "the agent's image")
	fl.DurationVar(&o.ttl, "ttl", DefaultTokenTTL, "how long the join token is valid")
	return cmd
}

func (o *agentCommandOptions) run(ctx context.Context, c *spec.Cluster) (string, error) {
	i := slices.IndexFunc(c.Nodes, func(n spec.Node) bool { return n.Address == o.node })
	switch {
	case o.node == "":
		return "", errors.New("give the node: --node ADDRESS")
	case i < 0:
		return "", fmt.Errorf("node %s is not in %s: give a node's address", o.node, o.file)
	case c.Nodes[i].Transport != spec.TransportAgent:
		return "", fmt.Errorf("node %s is declared with transport: %s in %s: set transport: agent for it first",
			o.node, c.Nodes[i].Transport, o.file)
	case !strings.HasPrefix(o.server, "https://"):
		return "", fmt.Errorf("--server %q: give rigger serve's agent endpoint, https://host:port", o.server)
	case o.ttl <= 0 || o.ttl > agenttun.MaxTokenTTL:
		return "", fmt.Errorf("--ttl %s: give a positive duration of at most %s: a token is for one join soon", o.ttl, agenttun.MaxTokenTTL)
	}
	now := time.Now()
	store, err := o.store.open(ctx, now)
	if err != nil {
		return "", err
	}
	tok, err := store.IssueToken(c.ClusterName, o.node, o.ttl, now)
	if err != nil {
		return "", err
	}
	return agentRunLine(agentServerURL(o.server, c.ClusterName), store.CA().Checksum(), o.image, c.Nodes[i], tok), nil
}

func (o *agentOptions) run(ctx context.Context, stderr io.Writer) error {
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	node := o.nodeName
	if node == "" {
		node = o.address
	}
	var addrs []string
	for _, a := range []string{o.address, o.internal} {
		if a != "" {
			addrs = append(addrs, a)
		}
	}
	a, err := agenttun.NewAgent(agenttun.AgentConfig{
		Server: o.server, Token: o.token, CAChecksum: o.caChecksum, Node: node, Addresses: addrs,
		DockerSocket: o.dockerSocket, AllowPorts: o.allowPorts, StateDir: o.stateDir, Logger: log,
	})
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("rigger agent: %v", err)}
	}
	err = a.Run(ctx)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // stopped (SIGTERM, docker stop)
	}
	return &exitError{code: 1, msg: "rigger agent: " + err.Error()}
}
