package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/gitops/httpauth"
	"github.com/rigger/rigger/gitops/notify"
	"github.com/rigger/rigger/gitops/replicas"
	"github.com/rigger/rigger/gitops/statuspage"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/agenttun"
)

// Environment variables serve reads secrets from (flags would show them in
// the process list).
const (
	envGitToken      = "RIGGER_GIT_TOKEN"
	envWebhookSecret = "RIGGER_WEBHOOK_SECRET"
	envHTTPToken     = "RIGGER_HTTP_TOKEN"
)

// serveOptions are serve's flags.
type serveOptions struct {
	repo, branch, path, statusBranch string
	interval, driftInterval          time.Duration
	maxConcurrent                    int
	workdir, stateDir                string
	sshKey, knownHosts               string
	gitUser, gitTokenFile            string
	webhookSecretFile                string
	listen                           string
	httpTokenFile                    string
	tlsCert, tlsKey, clientCA        string
	author                           string
	leaderElect                      bool
	leaseNamespace, leaseName        string
	leaseDuration, leaseRenew        time.Duration
	leaseRetry                       time.Duration
	advertiseURL                     string
	kubeconfig                       string
	stateBackend, stateNamespace     string
	logFormat, logLevel              string
	agentListen, agentURL            string
	agentAdvertise                   string
	agentHosts                       []string
	ignoreDockerVersion              bool
	notify                           []string
	notifyFile                       string
	commitStatus, commitStatusAPI    string
	commitStatusTokenFile            string
}

func newServeCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Follow a git repository: reconcile every cluster.yml in it and commit each cluster's status back",
		Long: `Serve clones --repo and follows --branch: every cluster.yml under --path is
one cluster, reconciled on its own (at most --max-concurrent at once), with
its state directory <--state-dir>/<cluster_name>, the layout "rigger apply"
uses, so that both share the certificates and the lock.

A cluster is reconciled when its cluster.yml changes (a fetch every
--interval, moved by up to 10%, or at once when a webhook says a push
happened), at every drift check (--drift-interval: what was changed on the
nodes by hand is repaired and recorded), when a retry is due after a
failure, and when services.etcd.backup_config asks for a snapshot (counted
from the last successful one). A reconcile then takes the snapshot due, if any,
uploads to s3backupconfig's S3 the snapshots it lacks (one missed while S3
was down) and applies retention. With
rigger.suspend: true in cluster.yml the cluster is observed and reported,
not changed.

After each reconcile, status.yml is written beside the cluster.yml (or at the
same path on --status-branch) and committed when its meaning changed, by
--author with the trailer "Rigger-Status: <path of cluster.yml>". A status
commit never starts a reconcile. A push rejected because someone pushed first
is redone on top of their commit: nothing is ever force-pushed.

Git credentials: --git-ssh-key and --git-known-hosts for ssh:// and
user@host:path URLs (host keys are always checked); for https://, a token
or password in --git-token-file or $RIGGER_GIT_TOKEN, with
--git-username. Credentials in an https:// URL's user part work as in git
but are never shown or stored (logs, errors, the clone, status.yml); prefer
the token file, as --repo shows in the process list.

Secrets in cluster.yml: a file encrypted with SOPS (as "sops -e" writes it)
is decrypted with the age identities in the file $SOPS_AGE_KEY_FILE names, in
$SOPS_AGE_KEY or in ~/.config/sops/age/keys.txt, or PGP keys as sops finds
them; cloud KMS and Vault keys are not used. One that cannot be decrypted,
or whose MAC does not match, stalls its cluster (DecryptionFailed) and the
others go on. Decrypted secrets are never shown (docs/gitops.md).

Webhooks: with a secret in --webhook-secret-file or $RIGGER_WEBHOOK_SECRET,
serve accepts GitHub, GitLab, Gitea/Forgejo and generic HMAC-SHA256 push
webhooks at a path derived from the secret (logged at start) and fetches at
once; every other request is refused.

What serve does first: a webhook push of serve's own status commits (its
new head is a commit serve made, or every commit the payload lists carries
the Rigger-Status trailer) is answered 200 at once, without a fetch and
without spending the rate limit meant for people's pushes. When all
--max-concurrent slots are taken, a reconcile of a cluster.yml whose content
changed (a push, a new file) takes the next free slot before the waiting
drift checks, retries and snapshots; each kind waits in the order it came,
and after 16 changes in a row a waiting routine reconcile goes next.

HTTP (--listen): / (the status page), /healthz (the process runs), /readyz
(the repository was fetched and, with --leader-elect, this replica leads),
/metrics (Prometheus), and the webhook. serve listens once it has cloned
--repo (or fetched its clone): a connect to an SSH git server gives up
after 30 s, and serve then ends with the error.

In a cluster: deploy/ runs serve as a Deployment of two replicas with
--leader-elect, installed with "kubectl apply -k" of an overlay that names
the repository, the image and the Secrets (docs/gitops.md, Installing in a
cluster).

Status page (/): every cluster with its conditions, observed revision,
nodes (reachable, containers in sync, restarting, Kubernetes Node Ready),
etcd and its last snapshot, certificate expiry, add-ons, agent tunnels and
pending registrations, rigger doctor's failing checks with their fixes, and
the last 10 reconciles with their plans and errors. It follows serve live
(server-sent events at /events; /api/clusters is the same as JSON), needs
nothing from the internet, and shows what status.yml holds: no secret.
The page, /events, /api/clusters and /metrics are open to whoever reaches
--listen unless asked otherwise: with a token in --http-token-file or
$RIGGER_HTTP_TOKEN they need "Authorization: Bearer <token>" or the cookie
a browser gets by opening /?token=<token> once; with --tls-cert-file and
--tls-key-file the listener speaks TLS, and with --client-ca-file they need
a client certificate signed by that CA (both when both are given). The
probes and the webhook (checked by its HMAC) stay open.

Agent tunnel (--agent-listen, TLS): nodes declared with "transport: agent"
run "rigger agent", which dials in to <--agent-url>/agent/<cluster_name>;
only the nodes each cluster.yml declares so are admitted. The endpoint's CA,
tokens and node certificates are kept in <--state-dir>/serve/agent-tunnel
(in Secrets with --state-backend kubernetes);
its serving certificate names --agent-host. TLS must reach serve end to end
(no proxy that terminates it). serve logs the CA checksum at start and, for
each agent node not connected, the docker run line that starts its agent;
"rigger agent command" prints it with a join token. See docs/agent.md.

Notifications: --notify [json=|slack=]URL (repeatable) and --notify-file
(one a line, for a mounted Secret) post to webhooks when a cluster's Ready
condition turns True or False, when it stalls, when a scheduled etcd
snapshot fails and when one succeeds again after failing: the generic JSON
payload (json, the default) or Slack's incoming-webhook shape (slack; also
Mattermost's). The same event is sent at most once in 5 minutes. With
--commit-status github|gitea|gitlab, serve sets a commit status
"rigger/<cluster_name>" on the commit of each cluster.yml it reconciles:
pending when a new revision's reconcile starts, success or failure (from
the Ready condition) when it ends; the token comes from
--commit-status-token-file or $RIGGER_COMMIT_STATUS_TOKEN, the API from
--repo's host unless --commit-status-api gives it. Requests are queued
(never holding up a reconcile) and retried on 5xx, 429 and network errors;
webhook URLs are secrets and are logged by host only. See docs/gitops.md.

State in the cluster (--state-backend kubernetes): each cluster's state
(PKI, records, the secrets encryption key) is kept in Secrets of
--state-namespace, one per file, labelled rigger.io/cluster=<cluster_name>;
--state-dir is then a working copy (an emptyDir in a pod), filled from the
Secrets before each reconcile of a cluster. Every write of a state file goes
to its Secret first, as a compare-and-swap on its resourceVersion: a Secret
another writer changed since is never overwritten, and the reconcile is
retried. A cluster without Secrets is an empty state directory (its PKI is
recovered from the nodes); a working copy with state its cluster has no
Secret of is refused (import it: "rigger state import"). A file larger than
a Secret holds (1 MiB) is refused. The agent tunnel's CA, tokens and node
certificates are Secrets of that namespace too (rigger-agent-*), moved there
from <--state-dir>/serve/agent-tunnel at the first start. See docs/gitops.md
("State in the cluster") and docs/agent.md.

One reconciler per cluster: each reconcile holds the cluster's lock in its
state directory (a "rigger apply" with the same state directory waits or
refuses, naming the holder), and each apply holds the Lease
kube-system/rigger-apply in the reconciled cluster's API server, which
riggers with other state directories respect too.

Several replicas (--leader-elect, in a Kubernetes cluster): the replicas
share the clusters, and each cluster is reconciled by exactly one replica at
a time, the one holding its Lease <--lease-name>-c-<hash of the path> in
--lease-namespace. Each replica holds a membership Lease of its own
(<--lease-name>-r-<hash of its id>, label rigger.io/serve-replica), reads
the others' every --lease-retry-period, and assigns the clusters over the
live replicas by rendezvous hashing with bounded loads: each gets
clusters/replicas, rounded down or up, and a replica that comes or goes
moves few clusters besides its own. A replica campaigns for its clusters and
for those it would get if their replica were gone; it reconciles one only
while holding its Lease. A reconcile whose Lease is lost is cancelled (it
stops between steps) before another replica can take the Lease, so
--lease-duration must be more than --lease-renew-deadline plus 3
--lease-retry-period and a second; a cluster handed over to another
replica is given up once its reconcile under way is over. A replica that
crashes loses its clusters within --lease-duration and a few retry periods;
one that stops (SIGTERM) gives them up at once. Every replica is ready
(/readyz) once it holds its membership Lease and fetched the repository. A
webhook may reach any replica: an accepted push is relayed to the other
replicas at --advertise-url (default from $POD_IP and --listen's port),
which check its signature again and fetch. status.yml ("replica"), /metrics (rigger_cluster_lease_held) and the
logs name the replica that holds each cluster. Every replica's status page
and /api/clusters show every cluster of the repository: one another replica
holds shows that replica and the status.yml it committed, as of this
replica's last fetch. The Lease of a cluster.yml gone from the repository
is deleted by a replica whose fetch no longer has it, once nobody holds it
(given up, or not renewed for --lease-duration). Two cluster.yml with one
cluster_name held by two replicas: with --state-backend kubernetes the one
that bound the state first is reconciled and the other refused
(DuplicateCluster), naming both files. With --agent-listen, a node's agent
reaches one replica, and the replica holding its cluster reaches the node
through that one (the peer relay: its --agent-advertise-address, by default
$POD_IP and --agent-listen's port, with a peer certificate of the agent
tunnel's CA, which --state-backend kubernetes shares; docs/agent.md).

In the cluster it reconciles (a pod whose $POD_NAMESPACE, $POD_NAME and
$POD_UID, which deploy/ sets from the downward API, name a pod of that
cluster): its drains leave its own pod where it runs and evict its other
replicas without delete_local_data (their emptyDirs are caches), and a plan
that removes the node it runs on is refused (SelfRemoval), saying how to
move it off first. See docs/gitops.md ("rigger inside the cluster it
manages").`,
		Example: `  rigger serve --repo git@github.com:acme/clusters.git --git-ssh-key ~/.ssh/rigger \
    --git-known-hosts ~/.ssh/known_hosts --path clusters/ --webhook-secret-file /etc/rigger/webhook
  RIGGER_GIT_TOKEN=$TOKEN rigger serve --repo https://gitea.example/ops/clusters.git --status-branch rigger-status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.repo, "repo", "", "URL of the git repository to follow (ssh://, user@host:path, https://, file://)")
	fl.StringVar(&o.branch, "branch", "main", "branch holding the cluster.yml files")
	fl.StringVar(&o.path, "path", ".", "directory of the repository searched for cluster.yml files")
	fl.StringVar(&o.statusBranch, "status-branch", "", "commit status.yml files to this branch instead of --branch")
	fl.DurationVar(&o.interval, "interval", gitops.DefaultInterval, "time between fetches of the branch")
	fl.DurationVar(&o.driftInterval, "drift-interval", gitops.DefaultDriftInterval, "time between drift checks of each cluster, each at its own moment of the interval (a hash of its path)")
	fl.IntVar(&o.maxConcurrent, "max-concurrent", gitops.DefaultMaxConcurrent, "clusters reconciled at once")
	fl.BoolVar(&o.ignoreDockerVersion, "ignore-docker-version", false, "skip the check of each node's Docker version against RKE's list for the Kubernetes version (rke up's flag: like rke up, rigger ignores cluster.yml's ignore_docker_version)")
	fl.StringVar(&o.workdir, "workdir", "", "directory of serve's clone of the repository (default: <state-dir>/serve/<hash of --repo>)")
	fl.StringVar(&o.stateDir, "state-dir", "", "directory of the clusters' state directories, one per cluster_name, never in git (default $XDG_STATE_HOME/rigger or ~/.local/state/rigger); with --state-backend kubernetes, their working copy (required)")
	fl.StringVar(&o.stateBackend, "state-backend", stateBackendDirectory, "where the clusters' state is kept: directory (--state-dir) or kubernetes (Secrets of --state-namespace)")
	fl.StringVar(&o.stateNamespace, "state-namespace", "", "namespace of the state Secrets with --state-backend kubernetes (default: the pod's namespace)")
	fl.StringVar(&o.sshKey, "git-ssh-key", "", "private key for SSH git URLs")
	fl.StringVar(&o.knownHosts, "git-known-hosts", "", "known_hosts file the git server's host key is checked against (SSH URLs)")
	fl.StringVar(&o.gitUser, "git-username", "git", "user name for HTTPS git URLs (a user in the URL wins)")
	fl.StringVar(&o.gitTokenFile, "git-token-file", "", "file holding the token or password for HTTPS git URLs (else $"+envGitToken+")")
	fl.StringVar(&o.webhookSecretFile, "webhook-secret-file", "", "file holding the webhook secret (else $"+envWebhookSecret+"); without one, no webhook is served")
	fl.StringVar(&o.listen, "listen", ":8080", "address of the HTTP server (status page, health, metrics, webhook)")
	fl.StringVar(&o.httpTokenFile, "http-token-file", "", "file holding the token that the status page and /metrics ask for (else $"+envHTTPToken+"); without one, they are open")
	fl.StringVar(&o.tlsCert, "tls-cert-file", "", "certificate (PEM) of the HTTP server: with --tls-key-file, --listen speaks TLS")
	fl.StringVar(&o.tlsKey, "tls-key-file", "", "private key (PEM) of --tls-cert-file")
	fl.StringVar(&o.clientCA, "client-ca-file", "", "CA certificates (PEM): the status page and /metrics need a client certificate signed by one (needs --tls-cert-file)")
	fl.StringVar(&o.author, "author", "rigger <rigger@localhost>", `author of the status commits, as "Name <email>"`)
	fl.BoolVar(&o.leaderElect, "leader-elect", false, "in a Kubernetes cluster: share the clusters among the replicas, each cluster reconciled only by the replica holding its Lease")
	fl.StringVar(&o.leaseNamespace, "lease-namespace", "", "namespace of the Leases (default: the pod's namespace)")
	fl.StringVar(&o.leaseName, "lease-name", "rigger-serve", "prefix of the Leases' names and value of their labels: the replicas that share the clusters")
	fl.DurationVar(&o.leaseDuration, "lease-duration", replicas.DefaultLeaseDuration, "how long a Lease lasts without renewal: a crashed replica's clusters are taken over after it")
	fl.DurationVar(&o.leaseRenew, "lease-renew-deadline", replicas.DefaultRenewDeadline, "how long a replica retries renewing a Lease before it stops reconciling the cluster")
	fl.DurationVar(&o.leaseRetry, "lease-retry-period", replicas.DefaultRetryPeriod, "time between two attempts to take or renew a Lease, and between two reads of the replicas")
	fl.StringVar(&o.advertiseURL, "advertise-url", "", "URL the other replicas relay webhooks to (default http[s]://$POD_IP:<port of --listen>; none without $POD_IP)")
	fl.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for the Leases and the state Secrets (default: the in-cluster service account)")
	fl.StringVar(&o.agentListen, "agent-listen", "", "address of the agent tunnel's TLS endpoint (e.g. :9443); empty: no agent tunnel")
	fl.StringSliceVar(&o.agentHosts, "agent-host", nil, "DNS name or IP address agents reach the endpoint at (repeatable): its certificate names them")
	fl.StringVar(&o.agentURL, "agent-url", "", "the endpoint's base URL as agents dial it (default https://<first --agent-host>:<port of --agent-listen>)")
	fl.StringVar(&o.agentAdvertise, "agent-advertise-address", "", "with --leader-elect, host:port where the other replicas reach this one's agent endpoint for the tunnels it holds (default $POD_IP:<port of --agent-listen>; none without $POD_IP)")
	fl.StringArrayVar(&o.notify, "notify", nil, "webhook notified of Ready/Stalled transitions and snapshot failures, as [json=|slack=]URL (repeatable; prefer --notify-file: the URL holds a token)")
	fl.StringVar(&o.notifyFile, "notify-file", "", "file of webhooks, one [json=|slack=]URL a line (# comments), such as a mounted Secret")
	fl.StringVar(&o.commitStatus, "commit-status", "", "set commit statuses on the forge for each cluster.yml's commit: github, gitea or gitlab")
	fl.StringVar(&o.commitStatusAPI, "commit-status-api", "", "the forge API's base URL (default from --repo's host: https://api.github.com, https://host/api/v3, https://host/api/v1 for gitea, https://host/api/v4 for gitlab)")
	fl.StringVar(&o.commitStatusTokenFile, "commit-status-token-file", "", "file holding the forge token for commit statuses (else $"+notify.EnvCommitStatusToken+")")
	fl.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// workdirOf is the default --workdir for repoURL: named for the URL without
// its credentials, so that a new token keeps the clone.
func workdirOf(stateDir, repoURL string) string {
	sum := sha256.Sum256([]byte(gitrepo.StripURL(repoURL)))
	return filepath.Join(stateDir, gitops.ServeDir, hex.EncodeToString(sum[:8]))
}

func (o *serveOptions) run(ctx context.Context, stderr io.Writer) error {
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if o.repo == "" {
		return errors.New("give the repository to follow: --repo URL")
	}
	author, err := mail.ParseAddress(o.author)
	if err != nil {
		return fmt.Errorf("--author %q: %w: give \"Name <email>\"", o.author, err)
	}
	state, err := o.stateStore(log)
	if err != nil {
		return err
	}
	if o.stateDir == "" {
		d, err := statedir.Default("x")
		if err != nil {
			return err
		}
		o.stateDir = filepath.Dir(d)
	}
	if o.workdir == "" {
		o.workdir = workdirOf(o.stateDir, o.repo)
	}
	// One pool for the Docker answers of every node serve reaches, over
	// SSH or through an agent.
	answers := transport.NewAnswerPool(transport.DefaultAnswerPool)
	agents, agentLn, agentTLS, err := o.agentEndpoint(ctx, log, answers, state.agentRecords)
	if err != nil {
		return err
	}
	var open gitops.Opener
	var pending func(string) []string
	var tunnels func(string) []gitops.AgentTunnel
	var elsewhere func(*spec.Cluster)
	if agents != nil {
		defer agents.Close()
		defer agentLn.Close()
		open, pending, tunnels, elsewhere = agents.open, agents.pending, agents.tunnels, agents.elsewhere
	}
	auth := gitrepo.Auth{SSHKeyFile: o.sshKey, KnownHostsFile: o.knownHosts, Username: o.gitUser}
	if auth.Password, err = secretFrom(o.gitTokenFile, envGitToken); err != nil {
		return err
	}
	secret, err := secretFrom(o.webhookSecretFile, envWebhookSecret)
	if err != nil {
		return err
	}
	notifyCfg, err := o.notifyConfig()
	if err != nil {
		return err
	}
	guard, listenTLS, err := o.httpGuard()
	if err != nil {
		return err
	}
	var share *replicas.Set
	if o.leaderElect {
		agentAddr := ""
		if agents != nil {
			agentAddr = agents.peerAddress
		}
		if share, err = o.replicaSet(log, listenTLS != nil, agentAddr); err != nil {
			return err
		}
		if agents != nil {
			agents.setReplicas(share.ID(), share.Members)
		}
	}
	repo, err := gitrepo.Open(ctx, o.workdir, o.repo, auth)
	if err != nil {
		return err
	}
	metrics := gitops.NewMetrics()
	board := gitops.NewBoard(0)
	var notifier *notify.Notifier
	if notifyCfg != nil {
		notifyCfg.Log, notifyCfg.Observe = log, metrics.Notification
		notifier = notify.New(*notifyCfg)
		notifier.Watch(board)
		hosts := make([]string, 0, len(notifyCfg.Targets))
		for _, t := range notifyCfg.Targets {
			hosts = append(hosts, t.Format+" "+t.Host)
		}
		args := []any{"webhooks", hosts}
		if f := notifyCfg.Forge; f != nil {
			args = append(args, "commit_status", f.Kind, "api", f.API, "project", f.Project)
		}
		log.Info("notifications on", args...)
	}
	var sharer gitops.Sharer // nil unless shared: an interface holding a nil *Set is not nil
	if share != nil {
		sharer = share
	}
	srv, err := gitops.New(gitops.Config{
		Repo: repo, RepoURL: repo.URL(), Branch: o.branch, Path: o.path, StatusBranch: o.statusBranch,
		Interval: o.interval, DriftInterval: o.driftInterval, MaxConcurrent: o.maxConcurrent, StateDir: o.stateDir,
		Author: object.Signature{Name: author.Name, Email: author.Address}, Log: log, Metrics: metrics, Open: open,
		PendingAgents: pending, AgentTunnels: tunnels, Elsewhere: elsewhere, IgnoreDockerVersion: o.ignoreDockerVersion, Answers: answers,
		Board: board, LoadState: state.load, StateFileAt: state.at, Share: sharer, Self: selfPod(log),
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case share != nil && !share.Member():
			http.Error(w, "not among the replicas yet: its membership Lease is not held", http.StatusServiceUnavailable)
		case !srv.Ready():
			http.Error(w, "the repository has not been fetched yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.Handle("/metrics", guard.Protect(metrics.Handler()))
	page := statuspage.New(board, statuspage.Options{Log: log})
	mux.Handle("/", guard.Protect(page))
	if len(secret) > 0 {
		wcfg := webhook.Config{Secret: []byte(secret), Branch: o.branch, Log: log, Observe: metrics.Webhook,
			Trigger: func(webhook.Event) { srv.Trigger() }, Own: srv.OwnCommit, OwnMessage: gitops.IsStatusMessage}
		if share != nil {
			client := relayClient(listenTLS)
			wcfg.Relay = func(path string, h http.Header, body []byte) { share.Relay(ctx, client, path, h, body) }
		}
		h, err := webhook.New(wcfg)
		if err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		mux.Handle(webhook.Path([]byte(secret)), h)
		log.Info("webhook ready: point the forge's push webhook at this path", "path", webhook.Path([]byte(secret)))
	} else {
		log.Info("no webhook secret: the branch is only polled", "interval", o.interval)
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w: give another --listen", o.listen, err)
	}
	hs := newServeHTTPServer(mux)
	hs.RegisterOnShutdown(page.Close)
	scheme := "http"
	if listenTLS != nil {
		hs.TLSConfig, ln, scheme = listenTLS, tls.NewListener(ln, listenTLS), "https"
	}
	log.Info("rigger serve starts", "repo", repo.URL(), "branch", o.branch, "path", o.path,
		"listen", ln.Addr().String(), "state_dir", o.stateDir)
	token, cert := guard.Asks()
	log.Info("status page", "url", scheme+"://"+ln.Addr().String()+"/", "token", token, "client_certificate", cert)

	g, gctx := errgroup.WithContext(ctx)
	if notifier != nil {
		g.Go(func() error {
			notifier.Run(gctx)
			return nil
		})
	}
	g.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	var ahs *http.Server
	if agents != nil {
		ahs = agenttun.NewHTTPServer(agents, agentTLS)
		g.Go(func() error {
			if err := ahs.ServeTLS(agentLn, "", ""); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("agent tunnel endpoint: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer func() {
			shut, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(shut)
			if ahs != nil {
				agents.Close() // the tunnels: Shutdown does not wait for hijacked connections
				_ = ahs.Shutdown(shut)
			}
		}()
		return srv.Run(gctx)
	})
	if share != nil {
		g.Go(func() error { return share.Run(gctx) })
	}
	err = g.Wait()
	log.Info("rigger serve stopped")
	return err
}

// Deadlines of serve's webhook listener (agenttun.NewHTTPServer has the
// agent endpoint's), so that a connection that says nothing, or nothing
// more, is closed: a request's headers must come within
// listenHeaderTimeout, the next request on a kept-alive connection within
// listenIdleTimeout, a request's body within listenReadTimeout.
const (
	listenHeaderTimeout = 10 * time.Second
	listenIdleTimeout   = 15 * time.Second
	listenReadTimeout   = 30 * time.Second
	listenWriteTimeout  = 60 * time.Second
	listenMaxHeader     = 64 << 10
)

// httpGuard is what the status page and /metrics ask for (--http-token-file
// or $RIGGER_HTTP_TOKEN, --client-ca-file), and the listener's TLS
// configuration (nil: plain HTTP).
func (o *serveOptions) httpGuard() (*httpauth.Guard, *tls.Config, error) {
	token, err := secretFrom(o.httpTokenFile, envHTTPToken)
	if err != nil {
		return nil, nil, fmt.Errorf("--http-token-file: %w", err)
	}
	var cfg *tls.Config
	switch {
	case o.tlsCert != "" || o.tlsKey != "":
		if cfg, err = httpauth.ServerTLS(o.tlsCert, o.tlsKey, o.clientCA); err != nil {
			return nil, nil, err
		}
	case o.clientCA != "":
		return nil, nil, errors.New("--client-ca-file needs --tls-cert-file and --tls-key-file: client certificates come with TLS")
	}
	return httpauth.New(token, o.clientCA != ""), cfg, nil
}

// newServeHTTPServer is the server of --listen: status page, webhook,
// health, metrics.
func newServeHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: listenHeaderTimeout, ReadTimeout: listenReadTimeout,
		WriteTimeout: listenWriteTimeout, IdleTimeout: listenIdleTimeout, MaxHeaderBytes: listenMaxHeader}
}

// agentEndpoint opens the agent tunnel's store (in records when not nil,
// else in --state-dir) and listener when --agent-listen is given; all nil
// otherwise.
func (o *serveOptions) agentEndpoint(ctx context.Context, log *slog.Logger, answers *transport.AnswerPool, records *secretstate.AgentRecords) (*agentEndpoint, net.Listener, *tls.Config, error) {
	if o.agentListen == "" {
		return nil, nil, nil, nil
	}
	if len(o.agentHosts) == 0 {
		return nil, nil, nil, errors.New("--agent-listen needs --agent-host: the DNS names or addresses agents reach serve at")
	}
	now := time.Now()
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := openAgentStore(openCtx, o.stateDir, records, log, now)
	if err != nil {
		return nil, nil, nil, err
	}
	ln, err := net.Listen("tcp", o.agentListen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listen on %s: %w: give another --agent-listen", o.agentListen, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	url := o.agentURL
	if url == "" {
		url = "https://" + net.JoinHostPort(o.agentHosts[0], port)
	}
	e := newAgentEndpoint(store, url, answers, log)
	hosts := o.agentHosts
	if o.leaderElect {
		// The other replicas reach this one at its pod's address, which
		// the serving certificate names too, with a peer certificate of
		// the CA the replicas share.
		e.peerAddress = o.agentAdvertise
		if ip := os.Getenv("POD_IP"); e.peerAddress == "" && ip != "" {
			e.peerAddress = net.JoinHostPort(ip, port)
		}
		if host, _, err := net.SplitHostPort(e.peerAddress); err == nil {
			hosts = append(slices.Clone(hosts), host)
		} else if e.peerAddress != "" {
			ln.Close()
			return nil, nil, nil, fmt.Errorf("--agent-advertise-address %q: %w: give host:port", e.peerAddress, err)
		}
		e.peerClient = agenttun.NewPeerClient(store, lock.Me("serve", now).ID)
		if records == nil {
			log.Warn("--leader-elect with --agent-listen and the state in a directory: each replica has the agent tunnel's CA " +
				"of its own directory, and agents match one; keep it in Secrets (--state-backend kubernetes)")
		}
	}
	tlsConfig, err := store.CA().TLSConfig(hosts, now)
	if err != nil {
		ln.Close()
		return nil, nil, nil, err
	}
	log.Info("agent tunnel endpoint listening", "listen", ln.Addr().String(), "url", url+agentPathPrefix+"<cluster_name>",
		"ca_checksum", store.CA().Checksum(), "records", store.Backend().Where(), "peer_address", e.peerAddress)
	return e, ln, tlsConfig, nil
}

// notifyConfig is what --notify, --notify-file and --commit-status ask
// for; nil when none is given. No URL or token appears in its errors.
func (o *serveOptions) notifyConfig() (*notify.Config, error) {
	var cfg notify.Config
	for _, s := range o.notify {
		t, err := notify.ParseTarget(s)
		if err != nil {
			return nil, fmt.Errorf("--notify: %w", err)
		}
		cfg.Targets = append(cfg.Targets, t)
	}
	if o.notifyFile != "" {
		ts, err := notify.ReadTargets(o.notifyFile)
		if err != nil {
			return nil, err
		}
		if len(ts) == 0 {
			return nil, fmt.Errorf("--notify-file %s names no webhook: write one [json=|slack=]URL a line", o.notifyFile)
		}
		cfg.Targets = append(cfg.Targets, ts...)
	}
	if o.commitStatus == "" && o.commitStatusAPI != "" {
		return nil, errors.New("--commit-status-api needs --commit-status github, gitea or gitlab")
	}
	if o.commitStatus != "" {
		token, err := secretFrom(o.commitStatusTokenFile, notify.EnvCommitStatusToken)
		if err != nil {
			return nil, fmt.Errorf("--commit-status-token-file: %w", err)
		}
		if cfg.Forge, err = notify.NewForge(o.commitStatus, o.repo, o.commitStatusAPI, token); err != nil {
			return nil, err
		}
	}
	if len(cfg.Targets) == 0 && cfg.Forge == nil {
		return nil, nil
	}
	return &cfg, nil
}

// replicaSet is the Set of --leader-elect: this replica among the others,
// named by lock.Me's id (the pod's name as host), reached at
// --advertise-url.
func (o *serveOptions) replicaSet(log *slog.Logger, tls bool, agentAddr string) (*replicas.Set, error) {
	client, ns, err := o.leaseClient()
	if err != nil {
		return nil, err
	}
	addr := o.advertiseURL
	if ip := os.Getenv("POD_IP"); addr == "" && ip != "" {
		_, port, err := net.SplitHostPort(o.listen)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %w: give host:port, or --advertise-url", o.listen, err)
		}
		scheme := "http"
		if tls {
			scheme = "https"
		}
		addr = scheme + "://" + net.JoinHostPort(ip, port)
	}
	set, err := replicas.New(replicas.Config{Client: client, Namespace: ns, Group: o.leaseName, ID: lock.Me("serve", time.Now()).ID,
		Address: strings.TrimSuffix(addr, "/"), AgentAddress: agentAddr, Log: log,
		Timing: lock.LeaseTiming{Duration: o.leaseDuration, RenewDeadline: o.leaseRenew, RetryPeriod: o.leaseRetry}})
	if err != nil {
		return nil, fmt.Errorf("--leader-elect: %w: change --lease-duration, --lease-renew-deadline or --lease-retry-period", err)
	}
	log.Info("sharing the clusters with the other replicas", "replica", set.ID(), "namespace", ns, "lease_name", o.leaseName,
		"advertise_url", addr, "lease_duration", set.Timing().Duration, "renew_deadline", set.Timing().RenewDeadline,
		"retry_period", set.Timing().RetryPeriod)
	return set, nil
}

// relayClient sends the webhooks relayed to the other replicas. With TLS
// (listen is the listener's configuration), a replica is trusted when it
// presents the very certificate this one serves: the replicas share
// --tls-cert-file, and pod addresses are not in it.
func relayClient(listen *tls.Config) *http.Client {
	if listen == nil || len(listen.Certificates) == 0 {
		return &http.Client{}
	}
	own := listen.Certificates[0].Certificate[0]
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // checked by VerifyPeerCertificate: the peer's certificate is ours
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], own) {
				return errors.New("the replica does not present this replica's certificate (--tls-cert-file)")
			}
			return nil
		},
	}}}
}

// leaseQPS bounds the requests a second of serve's Lease client: enough
// for about 200 clusters at the default --lease-retry-period (a renewal
// and a successor's read every 4 s each).
const leaseQPS = 100

// leaseClient is the Kubernetes client and namespace of the Lease.
func (o *serveOptions) leaseClient() (kubernetes.Interface, string, error) {
	return o.kubeClient("--leader-elect", o.leaseNamespace, "--lease-namespace")
}

// kubeClient is a client of the cluster serve runs in (or --kubeconfig's)
// and namespace, else the pod's; errors start with what, the flag that
// asks for it, and name nsFlag.
func (o *serveOptions) kubeClient(what, namespace, nsFlag string) (kubernetes.Interface, string, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w: run in a pod with a service account, or give --kubeconfig", what, err)
	}
	ns := namespace
	if ns == "" {
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, "", fmt.Errorf("%s: find the pod's namespace: %w: give %s", what, err, nsFlag)
		}
		ns = strings.TrimSpace(string(b))
	}
	// A Lease per cluster is renewed every --lease-retry-period, and
	// watched by its successor as often: client-go's default of 5
	// requests a second would starve them past a few clusters.
	cfg.QPS, cfg.Burst = leaseQPS, 2*leaseQPS
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	return client, ns, nil
}

// The values of --state-backend.
const (
	stateBackendDirectory  = "directory"
	stateBackendKubernetes = "kubernetes"
)

// serveState is where serve keeps the clusters' state and the agent
// tunnel's records, as --state-backend says: all nil for the directory.
type serveState struct {
	// load and at are gitops.Config.LoadState and StateFileAt.
	load func(ctx context.Context, cluster, dir string) error
	at   func(cluster, file string) string
	// agentRecords keeps the agent tunnel's CA and records.
	agentRecords *secretstate.AgentRecords
}

// stateStore is serve's state for --state-backend: secretstate.Store.Load,
// the state files' Secrets and the agent tunnel's for kubernetes.
func (o *serveOptions) stateStore(log *slog.Logger) (serveState, error) {
	switch o.stateBackend {
	case "", stateBackendDirectory:
		return serveState{}, nil
	case stateBackendKubernetes:
	default:
		return serveState{}, fmt.Errorf("--state-backend %q: give %s or %s", o.stateBackend, stateBackendDirectory, stateBackendKubernetes)
	}
	if o.stateDir == "" {
		return serveState{}, fmt.Errorf("--state-backend kubernetes: give --state-dir, the working copy of the clusters' state " +
			"(an emptyDir in a pod; never the state directory of a rigger apply, whose files it replaces with the Secrets')")
	}
	client, ns, err := o.kubeClient("--state-backend kubernetes", o.stateNamespace, "--state-namespace")
	if err != nil {
		return serveState{}, err
	}
	secrets := client.CoreV1().Secrets(ns)
	store := &secretstate.Store{Secrets: secrets, Namespace: ns}
	log.Info("clusters' state kept in Secrets", "namespace", ns, "working_copy", o.stateDir)
	return serveState{
		load: func(ctx context.Context, cluster, dir string) error {
			_, err := store.Load(ctx, cluster, dir)
			return err
		},
		at: func(cluster, file string) string {
			name := secretstate.SecretName(cluster, file)
			return fmt.Sprintf("the Secret %s/%s (kubectl -n %s delete secret %s)", ns, name, ns, name)
		},
		agentRecords: &secretstate.AgentRecords{Secrets: secrets, Namespace: ns},
	}, nil
}

// secretFrom reads a secret from a file, trimmed of surrounding white
// space, else from an environment variable; "" when neither is given. The
// secret never appears in an error.
func secretFrom(file, env string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("read secret: %s is empty: write the secret into it", file)
	}
	return s, nil
}

// newLogger is serve's logger: text or JSON lines on stderr.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: give debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: give text or json", format)
}

// selfPod is the pod serve runs as, from the downward API's $POD_NAMESPACE,
// $POD_NAME and $POD_UID (deploy/deployment.yaml sets them): serve then
// knows a cluster it reconciles from within (reconcile.Options.Self). Nil
// outside a pod, or when they are not all set.
func selfPod(log *slog.Logger) *observe.PodRef {
	ref := observe.PodRef{Namespace: os.Getenv("POD_NAMESPACE"), Name: os.Getenv("POD_NAME"), UID: os.Getenv("POD_UID")}
	switch {
	case ref == observe.PodRef{}:
		return nil
	case ref.Namespace == "" || ref.Name == "" || ref.UID == "":
		log.Warn("$POD_NAMESPACE, $POD_NAME and $POD_UID are not all set: serve cannot tell a cluster it runs in "+
			"(its drains would evict serve's own pod); set them from the downward API as deploy/deployment.yaml does",
			"namespace", ref.Namespace, "name", ref.Name, "uid", ref.UID)
		return nil
	}
	return &ref
}
