package observe

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/errdefs"

	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/transport"
)

// Request is what Observe looks at.
type Request struct {
	// Cluster is the cluster_name: containers labelled io.rigger.cluster
	// with it are the cluster's.
	Cluster string
	// Nodes are the addresses to observe (an address given twice is
	// observed once).
	Nodes []string
	// MaxParallel bounds how many nodes are observed at once
	// (rigger.max_parallel; zero or less means no limit).
	MaxParallel int
	// FilesImage is the image of the helper container that reads FilesDir
	// (system_images.alpine). Files are read only when it is set and
	// already on the node: observing never pulls.
	FilesImage string
	// FilesDir is the directory whose files are hashed, desired.KubernetesDir.
	FilesDir string
	// KeepFiles keeps the files' contents too (Node.Contents): what a
	// state directory without the cluster's certificates or secrets
	// encryption key recovers them from.
	KeepFiles bool
	// SinceApply is how long ago the cluster's last apply ended; zero when
	// that is not known. A running container of the cluster that the list
	// shows started since is inspected (its restart count) and marked
	// Container.StartedSince: rigger did not start it.
	SinceApply time.Duration
	// Now gives the observation's time (nil: time.Now).
	Now func() time.Time
	// Timeline, when set, records each node's calls (--timings).
	Timeline *timeline.Timeline
}

// Observe reads every node of r through t: whether its Docker engine
// answers, the engine's version, the containers of the cluster in every
// state, and the hashes of the files under r.FilesDir with the expiry of
// the certificates among them.
//
// It never fails as a whole. A node whose engine cannot be reached, or whose
// engine fails a call midway, is Reachable: false with the error in Err and
// its text in Error; it is not treated as gone. When one of the transport's
// typed errors is the cause (*transport.UnreachableError, also when a
// connection is lost between calls), Err is that error, for errors.As.
//
// When ctx ends, Observe stops and returns what it has: nodes not observed
// by then are unreachable with ctx's error. Every address in r.Nodes is a
// key of the result.
func Observe(ctx context.Context, t transport.Transport, r Request) *Cluster {
	now := r.Now
	if now == nil {
		now = time.Now
	}
	out := &Cluster{At: now(), Nodes: make(map[string]*Node, len(r.Nodes))}
	// Each goroutine writes its own slot; the map is filled after Wait.
	seen := make(map[string]bool, len(r.Nodes))
	addrs := make([]string, 0, len(r.Nodes))
	for _, a := range r.Nodes {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	results := make([]*Node, len(addrs))
	// A node's failure is its result; only ctx's end skips nodes.
	_ = fanout.Each(ctx, addrs, r.MaxParallel, func(ctx context.Context, i int, addr string) error {
		results[i] = observeNode(ctx, t, r, addr)
		return nil
	})
	for i, n := range results {
		if n == nil {
			n = (&Node{Address: addrs[i]}).unreachable(fmt.Errorf("node %s: not observed: %w", addrs[i], ctx.Err()))
		}
		out.Nodes[addrs[i]] = n
	}
	return out
}

// observeNode reads one node. It always returns a Node.
func observeNode(ctx context.Context, t transport.Transport, r Request, addr string) *Node {
	n := &Node{Address: addr}
	if err := ctx.Err(); err != nil {
		return n.unreachable(fmt.Errorf("node %s: not observed: %w", addr, err))
	}
	span := func(what string) func() { return r.Timeline.Begin("observe " + addr + ": " + what) }
	end := span("connect")
	cli, err := t.Docker(ctx, addr)
	end()
	if err != nil {
		// The transport's error as it is: it names the node and says
		// what to check.
		return n.unreachable(err)
	}
	// The version is read beside the containers and files: one round
	// trip less in a row.
	var (
		version     types.Version
		versionErr  error
		versionRead = make(chan struct{})
	)
	go func() {
		defer close(versionRead)
		end := span("docker version")
		version, versionErr = transport.EngineVersion(ctx, t, addr, cli)
		end()
	}()
	n = observeContainers(ctx, cli, r, n, span)
	<-versionRead
	if versionErr != nil {
		return n.unreachable(callError(addr, "read docker version", versionErr))
	}
	if n.Reachable {
		n.DockerVersion, n.DockerAPIVersion = version.Version, version.APIVersion
	}
	return n
}

// observeContainers reads the node's containers and files into n (through
// cli), and returns n, marked unreachable when a call failed.
func observeContainers(ctx context.Context, cli dockerop.Engine, r Request, n *Node, span func(string) func()) *Node {
	addr := n.Address
	end := span("list containers")
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	end()
	if err != nil {
		return n.unreachable(callError(addr, "list containers", err))
	}
	n.Containers = make(map[string]Container, len(list))
	via := "" // a container of the cluster's that bind-mounts FilesDir
	for _, s := range list {
		c := fromSummary(s)
		cluster, labelled := s.Labels[desired.LabelCluster]
		switch {
		case labelled && cluster == r.Cluster:
		case !labelled && IsRKEContainer(c.Name):
			c.RKE = true
		default:
			continue // another cluster's, or not a cluster's at all
		}
		if upAtMost, ok := upAtMost(s.Status); ok && r.SinceApply > 0 && upAtMost+startedSlack < r.SinceApply {
			c.StartedSince = true
		}
		if c.State == string(container.StateRestarting) || c.StartedSince {
			// A crash loop, or a start since the last apply: how many
			// restarts so far. Only such a container is inspected, so a
			// node whose containers run as the last apply left them costs
			// no call more.
			if err := inspectRestarts(ctx, cli, &c); err != nil {
				return n.unreachable(callError(addr, "inspect container "+c.Name, err))
			}
		}
		n.Containers[c.Name] = c
		if via == "" && !c.RKE && bindsDir(s, r.FilesDir) {
			via = s.ID
		}
	}
	if r.FilesImage != "" && r.FilesDir != "" {
		end = span("read files")
		err := n.readFiles(ctx, cli, via, r.FilesImage, r.FilesDir, r.KeepFiles)
		end()
		if err != nil {
			return n.unreachable(err)
		}
	}
	n.Reachable = true
	return n
}

// readFiles hashes the files under dir and reads the expiry of the
// certificates among them; keep keeps their contents. They are read
// through the container via, which bind-mounts dir, when there is one and
// it is still there; else through a helper container of image, when that
// image is on the node (without it, FilesRead stays false and the plan
// writes every file).
func (n *Node) readFiles(ctx context.Context, e dockerop.Engine, via, image, dir string, keep bool) error {
	var files map[string][]byte
	if via != "" {
		files, _ = dockerop.ReadDirVia(ctx, e, n.Address, via, dir) // gone since the list: the helper reads them
	}
	if files == nil {
		if _, err := e.ImageInspect(ctx, image); errdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return callError(n.Address, "inspect image "+image, err)
		}
		var err error
		if files, err = dockerop.ReadDir(ctx, e, n.Address, image, dir); err != nil {
			return callError(n.Address, "read files", err)
		}
	}
	n.FilesRead = true
	if keep {
		n.Contents = files
	}
	n.Files = make(map[string]string, len(files))
	for p, b := range files {
		n.Files[p] = FileHash(b)
		if !strings.HasSuffix(p, ".pem") || strings.HasSuffix(p, "-key.pem") {
			continue
		}
		if blk, _ := pem.Decode(b); blk != nil && blk.Type == "CERTIFICATE" {
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
				if n.CertExpiry == nil {
					n.CertExpiry = map[string]time.Time{}
				}
				n.CertExpiry[p] = c.NotAfter
			}
		}
	}
	return nil
}

// IsRKEContainer reports whether name is one of the containers RKE
// (v1.8.14, services/services.go, pki/deploy.go) runs or may leave behind on
// a node: its components, whose names are rigger's (etcd, kube-apiserver,
// …, service-sidekick), its etcd snapshot containers, and the one-shot
// containers a failed rke up leaves (cert-deployer, rke-log-linker, …). A
// container of one of these names without rigger's labels is RKE's: rigger
// adopt's takeover replaces or removes it.
func IsRKEContainer(name string) bool {
	switch name {
	case desired.Etcd, desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler,
		desired.NginxProxy, desired.ServiceSidekick, desired.Kubelet, desired.KubeProxy,
		"etcd-rolling-snapshots", "etcd-snapshot-once", "etcd-remove-snapshot", "etcd-restore",
		"etcd-download-backup", "etcd-Serve-backup", "etcd-checksum-checker", "etcd-extract-statefile",
		"extract-statefile-configmap", "etcd-fix-perm", "rke-log-linker", "rke-log-cleaner",
		"cert-deployer", "cert-fetcher", "cluster-state-deployer", "file-deployer":
		return true
	}
	return false
}

// FileHash is how Observe hashes a file's content: hex SHA-256.
func FileHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// callError is the error of a Docker call that failed on a node the
// transport had reached. When the cause is one of the transport's typed
// errors (the connection was lost, and reconnecting failed), it is that
// error itself: its text names the node and says what to check, where the
// Docker client's wrapping adds only the request's URL. Otherwise the call's
// error is wrapped with the node and the call.
func callError(addr, call string, err error) error {
	var nodeErr transport.NodeError
	if errors.As(err, &nodeErr) {
		return nodeErr
	}
	return fmt.Errorf("node %s: %s: %w", addr, call, err)
}

func (n *Node) unreachable(err error) *Node {
	n.Reachable = false
	n.Err = err
	n.Error = err.Error()
	n.DockerVersion, n.DockerAPIVersion, n.Containers = "", "", nil
	n.FilesRead, n.Files, n.CertExpiry = false, nil, nil
	return n
}

// inspectRestarts reads the restart count of a restarting container, and
// its exit code when the list did not show it. A container removed since
// the list keeps what the list said.
func inspectRestarts(ctx context.Context, e dockerop.Engine, c *Container) error {
	in, err := e.ContainerInspect(ctx, c.ID)
	switch {
	case errdefs.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case in.ContainerJSONBase == nil:
		return nil
	}
	c.RestartCount = in.RestartCount
	if in.State != nil && c.ExitCode == nil {
		code := in.State.ExitCode
		c.ExitCode = &code
	}
	return nil
}

// bindsDir reports whether the listed container bind-mounts the host's
// dir at the same path.
func bindsDir(s container.Summary, dir string) bool {
	dir = path.Clean(dir)
	return slices.ContainsFunc(s.Mounts, func(m container.MountPoint) bool {
		return m.Type == mount.TypeBind && path.Clean(m.Source) == dir && path.Clean(m.Destination) == dir
	})
}

// fromSummary reads a container from the list's entry. Image is what the
// list shows: the reference the container was created with, or the image
// ID when that reference has since been moved to another image.
func fromSummary(s container.Summary) Container {
	return Container{
		ID:        s.ID,
		Name:      containerName(s),
		Image:     s.Image,
		State:     string(s.State),
		Health:    healthFromStatus(s.Status),
		ExitCode:  exitFromStatus(s.Status),
		Component: s.Labels[desired.LabelComponent],
		SpecHash:  s.Labels[desired.LabelSpecHash],
		Spec:      s.Labels[desired.LabelSpec],
	}
}

// containerName is the container's own name without the leading "/". The
// list also gives the names other containers link it by ("/other/alias"),
// which are skipped.
func containerName(s container.Summary) string {
	for _, name := range s.Names {
		name = strings.TrimPrefix(name, "/")
		if name != "" && !strings.Contains(name, "/") {
			return name
		}
	}
	return s.ID
}

// healthFromStatus reads the health check's status from the list's Status
// column, as the engine writes it for a running container with a health
// check: "Up 3 minutes (healthy)", "Up 2 seconds (health: starting)",
// "Up 1 hour (unhealthy)". It returns container.Healthy, Unhealthy or
// Starting, or "" when the status shows none (no health check, or the
// container is not running, when its last health result means nothing).
//
// Reading the list instead of inspecting each container saves a round trip
// per container; the engine has written Status this way since health checks
// exist (Docker 1.12) and still does.
func healthFromStatus(status string) string {
	if !strings.HasPrefix(status, "Up ") || !strings.HasSuffix(status, ")") {
		return ""
	}
	open := strings.LastIndexByte(status, '(')
	if open < 0 {
		return ""
	}
	switch h := status[open+1 : len(status)-1]; h {
	case string(container.Healthy), string(container.Unhealthy):
		return h
	case "health: " + string(container.Starting):
		return string(container.Starting)
	}
	return ""
}

// startedSlack is what a container's uptime, as the list shows it, may
// lack against the time since the last apply before it counts as started
// since: the list's round trip. (Both are durations, each of one clock:
// the nodes' clocks may differ from rigger's.)
const startedSlack = 500 * time.Millisecond

// upAtMost reads, from the list's Status column of a running container
// ("Up 3 minutes", "Up 2 hours (healthy)"), how long it has run since its
// last start, at most: the engine rounds it as go-units' HumanDuration
// does ("3 minutes" is under 4, "2 hours" under 2½, "About an hour" under
// 90 minutes). ok is false for any other status.
func upAtMost(status string) (d time.Duration, ok bool) {
	rest, ok := strings.CutPrefix(status, "Up ")
	if !ok {
		return 0, false
	}
	if i := strings.Index(rest, " ("); i >= 0 {
		rest = rest[:i] // (healthy), (Paused)
	}
	const day, week, month, year = 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour
	switch rest {
	case "Less than a second":
		return time.Second, true
	case "About a minute":
		return 2 * time.Minute, true
	case "About an hour":
		return 90 * time.Minute, true
	}
	num, unit, ok := strings.Cut(rest, " ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 0 {
		return 0, false
	}
	d = time.Duration(n)
	switch unit {
	case "second", "seconds":
		return (d + 1) * time.Second, true
	case "minutes":
		return (d + 1) * time.Minute, true
	case "hours":
		return d*time.Hour + 30*time.Minute, true
	case "days":
		return (d+1)*day - 30*time.Minute, true
	case "weeks":
		return (d+1)*week - 30*time.Minute, true
	case "months":
		return (d+1)*month - 30*time.Minute, true
	case "years":
		return (d + 1) * year, true
	}
	return 0, false
}

// exitFromStatus reads the last exit code from the list's Status column,
// as the engine writes it for a container that is not running: "Restarting
// (1) 3 seconds ago", "Exited (137) 2 minutes ago". It returns nil for any
// other status.
func exitFromStatus(status string) *int {
	rest, ok := strings.CutPrefix(status, "Restarting (")
	if !ok {
		rest, ok = strings.CutPrefix(status, "Exited (")
	}
	if !ok {
		return nil
	}
	num, _, ok := strings.Cut(rest, ")")
	if !ok {
		return nil
	}
	code, err := strconv.Atoi(num)
	if err != nil {
		return nil
	}
	return &code
}
