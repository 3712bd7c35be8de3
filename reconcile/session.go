package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/registryauth"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// Options are the settings of a Session.
type Options struct {
	// StateDir holds the cluster's PKI and records (package statedir). It
	// is never in git; when it is lost, the PKI is recovered from a
	// controlplane node.
	StateDir string
	// Log receives what operators need to know (recovered PKI, retries).
	Log *slog.Logger
	// Transport reaches the nodes; nil means as cluster.yml says: SSH,
	// and Agents for the nodes with transport: agent.
	Transport transport.Transport
	// Agents reaches the nodes with transport: agent when Transport is
	// nil: rigger serve's agent tunnel for the cluster, which outlives the
	// session. Nil: those nodes are unreachable, with a *reach.NoTunnelError.
	Agents transport.Transport
	// Now gives the time (nil: time.Now).
	Now func() time.Time
	// ConfigDir is the directory of cluster.yml: relative addons_include
	// paths are read from it.
	ConfigDir string
	// ReadInclude, when set, reads the addons_include entries that are not
	// URLs instead (rigger serve reads them from the repository, at the
	// revision it applies); it must refuse more than max bytes.
	ReadInclude func(entry string, max int64) ([]byte, error)
	// Rotate is a certificate rotation asked for on the command line
	// (rigger cert rotate): carried out whatever the state directory
	// records of cluster.yml's rotate_certificates, which it leaves as
	// it is.
	Rotate *pki.Rotation
	// RotateKey asks for a rotation of the generated secrets encryption
	// key whatever rotate_encryption_key says (rigger encrypt rotate-key):
	// the plan starts it unless one is under way, which it carries on. As
	// RKE, Open refuses it for a cluster.yml without a key rigger
	// generates.
	RotateKey bool
	// AllowRemovals lets a plan remove more nodes than
	// rigger.max_removed_nodes allows (--allow-removals); without it, such
	// a plan is blocked (decide.Planned.Blocked).
	AllowRemovals bool
	// Teardown makes the plan the teardown of the cluster (rigger remove):
	// every container of the cluster removed and rigger's files cleaned on
	// every node of cluster.yml and of the last apply. The state directory
	// is kept: the certificates are still those of any node that did not
	// answer.
	Teardown bool
	// Timeline, when set, records where the time of plans and applies goes
	// (--timings).
	Timeline *timeline.Timeline
	// IgnoreDockerVersion skips RKE's check of each node's Docker version
	// (plan.CheckDocker): `--ignore-docker-version`, as `rke up`'s flag.
	// cluster.yml's ignore_docker_version plays no part, as in `rke up`.
	IgnoreDockerVersion bool
	// KeysPerNode makes a node whose SSH key or certificate cannot be used
	// (a missing ssh_key_path file) an error of that node's calls, not of
	// Open: rigger doctor reports it as the node's ssh-auth finding.
	KeysPerNode bool
	// Self is the pod rigger runs as when it runs in a Kubernetes cluster
	// (rigger serve's pods, from the downward API); nil otherwise. When
	// the cluster reconciled is the one it runs in, its drains leave that
	// pod be and a plan that removes its node is refused
	// (plan.CheckSelfRemoval).
	Self *observe.PodRef
	// Answers is the pool the weight of the nodes' Docker answers is drawn
	// from when Transport is nil (transport.AnswerPool): rigger serve
	// shares one among every cluster. Nil: a pool of
	// transport.DefaultAnswerPool for the session alone.
	Answers *transport.AnswerPool
}

// Session reconciles one cluster: it holds the cluster.yml, a transport to
// its nodes and the nodes of the last apply, nothing learnt from the nodes.
// Plan observes and computes a Planned value; Apply carries one out under
// the Lock the caller took. It is not safe for concurrent use.
type Session struct {
	c    *spec.Cluster
	opts Options
	tr   transport.Transport
	own  bool // the session made tr and closes it
	req  pki.Request
	// reg are the credentials of private_registries, for the pulls made
	// on the nodes.
	reg registryauth.Set
	// former are the nodes of the last apply gone from cluster.yml.
	former []spec.Node
}

// Open prepares a reconcile of c, which must be loaded and valid
// (spec.Load). It reads the state directory and connects to nothing yet.
// Its errors are *stall.Error values (stall.Classify): a damaged state file stalls, a
// state directory that cannot be read is retried.
func Open(c *spec.Cluster, opts Options) (*Session, error) {
	if opts.StateDir == "" {
		return nil, errors.New("open cluster: no state directory given")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RotateKey {
		if err := secretsenc.CheckRotateKey(c); err != nil {
			return nil, err
		}
	}
	last, err := loadNodes(opts.StateDir)
	if err != nil {
		return nil, stall.State(err)
	}
	s := &Session{c: c, opts: opts, tr: opts.Transport, req: pki.RequestFor(c),
		reg: registryauth.New(c.PrivateRegistries), former: formerNodes(c, last)}
	if s.tr == nil {
		answers := opts.Answers
		if answers == nil {
			answers = transport.NewAnswerPool(transport.DefaultAnswerPool)
		}
		tr, err := reach.Transport(c, s.former, opts.Agents, opts.KeysPerNode, answers, opts.Log)
		if err != nil {
			return nil, stall.Stalls(stall.InvalidSpec, err)
		}
		s.tr, s.own = tr, true
	}
	return s, nil
}

// services reaches the cluster's API server, etcd members and health
// endpoints through the session's transport.
func (s *Session) services() reach.Services {
	return reach.Services{Transport: s.tr, Nodes: s.c.Nodes, Former: s.former, Log: s.opts.Log}
}

// docker returns the Docker engine of node, whose image pulls carry the
// credentials of private_registries (dockerop.WithRegistries).
func (s *Session) docker(ctx context.Context, node string) (dockerop.Engine, error) {
	cli, err := s.tr.Docker(ctx, node)
	if err != nil {
		return nil, err
	}
	return dockerop.WithRegistries(cli, s.reg), nil
}

// Close closes the transport the session made.
func (s *Session) Close() error {
	if s.own {
		return s.tr.Close()
	}
	return nil
}
