package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/errgroup"
)

// nodeParallelism is how many nodes Up brings up at once. Starting an
// engine is mostly waiting; two cores carry four at a time well.
const nodeParallelism = 4

// Up makes the sandbox opts describe, or completes and checks the one that
// exists: it is idempotent, and finishes one that an earlier Up left
// half-made. Progress goes to progress (nil: nowhere). A partitioned node
// stays partitioned and a stopped service is started again.
func Up(ctx context.Context, opts Options, progress io.Writer) (*Sandbox, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := newProgress(progress)
	if err := Precheck(ctx); err != nil {
		return nil, err
	}
	if err := checkDisk(opts.Name, opts.Nodes); err != nil {
		return nil, err
	}

	p.phase("Sandbox %s: %s on %s", opts.Name, nodesCount(opts.Nodes), subnetPrefix(opts.Subnet))
	s, err := claim(ctx, opts, p)
	if err != nil {
		return nil, err
	}

	p.phase("Keys and node files")
	if err := s.ensureKeys(); err != nil {
		return nil, err
	}
	for _, n := range s.Nodes {
		if err := s.writeNodeFiles(n); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	if err := s.ensureInit(ctx); err != nil {
		return nil, err
	}

	var imgs []builtImage
	if opts.Images {
		imgs, err = buildImages(ctx, opts, p)
		if err != nil {
			return nil, err
		}
		s.RiggerBinary = riggerBinaryPath(opts)
		if err := s.seedEngines(ctx, opts.cacheDir(), imgs, p); err != nil {
			return nil, err
		}
	}

	p.phase("Start containerd, Docker and sshd on every node")
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nodeParallelism)
	for _, n := range s.Nodes {
		g.Go(func() error {
			start := time.Now()
			for _, svc := range Services() {
				if err := s.startService(gctx, n, svc); err != nil {
					return fmt.Errorf("%s: start %s: %w", n.Name, svc, err)
				}
			}
			p.node(n.Name, "%s (%s) containerd, Docker and sshd answer (%s)", n.Address, n.Hostname, time.Since(start).Round(10*time.Millisecond))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	if opts.Images {
		if err := s.loadImages(ctx, imgs, p); err != nil {
			return nil, err
		}
		if err := s.loadContainerdImages(ctx, opts.ContainerdImages, p); err != nil {
			return nil, err
		}
		s.SystemImages = systemImages(imgs)
		s.ImageArchives = map[string]string{}
		for _, img := range imgs {
			s.ImageArchives[img.Ref] = img.Archive
		}
	}

	s.Ready = true
	if err := s.save(); err != nil {
		return nil, err
	}
	p.phase("Sandbox %s is ready (%s, %s)", s.Name, nodesCount(len(s.Nodes)), time.Since(p.start).Round(100*time.Millisecond))
	return s, nil
}

// claim makes (or checks) everything the sandbox takes from the machine,
// holding the host lock: the state file first, so that Down finds whatever
// follows; then the range route, the bridge, and every node's network and
// namespaces.
func claim(ctx context.Context, opts Options, p *progress) (*Sandbox, error) {
	lock, err := lockFile(ctx, hostLockPath, func() { p.info("waiting for another rigger sandbox command (%s)", hostLockPath) })
	if err != nil {
		return nil, err
	}
	defer lock.unlock()

	s, err := Load(opts.Name)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		if err := checkRange(ctx, opts); err != nil {
			return nil, err
		}
		s = layout(opts.Name, opts.Subnet, opts.Nodes)
	case err != nil:
		return nil, err
	default:
		if s.Subnet != opts.Subnet || len(s.Nodes) != opts.Nodes {
			return nil, fmt.Errorf("sandbox %s exists with %d nodes on %s: run `rigger sandbox down --name %s` first to make it with %d nodes on %s",
				s.Name, len(s.Nodes), subnetPrefix(s.Subnet), s.Name, opts.Nodes, subnetPrefix(opts.Subnet))
		}
		p.info("sandbox %s exists: checking every part", s.Name)
	}
	s.Ready = false
	if err := s.save(); err != nil {
		return nil, err
	}
	if err := ensureRange(ctx); err != nil {
		return nil, err
	}
	if err := ensureNSRoot(s); err != nil {
		return nil, err
	}
	if err := ensureHostMountpoints(); err != nil {
		return nil, err
	}
	if err := s.ensureBridge(ctx); err != nil {
		return nil, err
	}
	p.info("bridge %s %s/24, unreachable route %s", s.Bridge, s.BridgeAddress, rangePrefix)
	for _, n := range s.Nodes {
		if err := s.ensureNodeNet(ctx, n); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		if err := s.ensureNodeMounts(ctx, n); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	p.info("%s: network namespaces, mount, UTS and cgroup namespaces, directories under %s", nodesCount(len(s.Nodes)), s.Dir)
	return s, nil
}

// checkRange refuses a subnet that another sandbox or anything else on the
// machine uses.
func checkRange(ctx context.Context, opts Options) error {
	owned := map[string]string{}
	names, err := List()
	if err != nil {
		return err
	}
	for _, name := range names {
		other, err := Load(name)
		if err != nil {
			continue
		}
		owned[other.Bridge] = other.Name
		if other.Subnet == opts.Subnet {
			return fmt.Errorf("%s is already used by sandbox %s: run `rigger sandbox down --name %s` or pick another subnet", subnetPrefix(opts.Subnet), other.Name, other.Name)
		}
	}
	rs, err := routes(ctx, "table", "all")
	if err != nil {
		return err
	}
	as, err := addrs(ctx)
	if err != nil {
		return err
	}
	return rangeConflict(opts.Subnet, rs, as, owned)
}

func nodesCount(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}
