package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// containerdConfig is node n's containerd: its own root and state (inside
// the node's /var/lib/containerd and /run), the socket the kubelet and the
// engine use, the CRI plugin with the sandbox's pause image as its sandbox
// image (the kubelet's --pod-infra-container-image only keeps that image
// from being collected), cgroupfs like the kubelet's default, the runc
// wrapper (privileged pods), and the node's CNI directories, which hold
// what the cluster's network plugin installs there.
func (s *Sandbox) containerdConfig(n Node) string {
	return fmt.Sprintf(`# containerd of %s in sandbox %s, written by rigger sandbox.
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, n.Name, s.Name, ContainerdSocket, PauseImage, s.runcWrapperPath(), CNIBinDir, CNIConfDir)
}

// containerdImages are the images every node's containerd gets (in the
// k8s.io namespace, the kubelet's): the pod sandbox, and with addons the
// images of the add-ons' pods, for a kubelet whose runtime is containerd
// (through cri-dockerd, the example cluster's and RKE's way, pods use the
// engine's images).
func containerdImages(addons bool) []string {
	if !addons {
		return []string{PauseImage}
	}
	return []string{PauseImage, FlannelImage, FlannelCNIImage, CoreDNSImage, MetricsServerImage}
}

// loadContainerdImages copies containerdImages(addons) from every node's engine
// (which Up has just loaded) into the node's containerd: `docker save`
// into `ctr images import`, unless containerd has the image with the
// engine's image ID already.
func (s *Sandbox) loadContainerdImages(ctx context.Context, addons bool, p *progress) error {
	p.phase("Import the pod images into every node's containerd")
	refs := containerdImages(addons)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nodeParallelism)
	for _, n := range s.Nodes {
		g.Go(func() error {
			start := time.Now()
			imported := 0
			for _, ref := range refs {
				done, err := importIntoContainerd(gctx, n, ref)
				if err != nil {
					return fmt.Errorf("%s: %w", n.Name, err)
				}
				if done {
					imported++
				}
			}
			p.node(n.Name, "imported %d of %d images into containerd (%s)", imported, len(refs), time.Since(start).Round(10*time.Millisecond))
			return nil
		})
	}
	return g.Wait()
}

// importIntoContainerd saves ref from node n's engine and imports it into
// the node's containerd, namespace k8s.io, under the same name
// (docker.io/<ref>, as the CRI plugin normalizes it), unless the CRI
// plugin has it with the engine's image ID (both are the digest of the
// image's configuration); imported says whether it did.
func importIntoContainerd(ctx context.Context, n Node, ref string) (imported bool, err error) {
	c, err := dockerClient(n.DockerSocket)
	if err != nil {
		return false, err
	}
	defer c.Close()
	insp, err := c.ImageInspect(ctx, ref)
	if err != nil {
		return false, fmt.Errorf("inspect %s in the engine: %w", ref, err)
	}
	if img, err := CRIImageStatus(ctx, n.ContainerdSocket, ref); err == nil && img != nil && img.ID == insp.ID {
		return false, nil
	}
	rc, err := c.ImageSave(ctx, []string{ref})
	if err != nil {
		return false, fmt.Errorf("save %s from the engine: %w", ref, err)
	}
	defer rc.Close()
	cmd := exec.CommandContext(ctx, "ctr", "--address", n.ContainerdSocket, "--namespace", "k8s.io", "images", "import", "-")
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("import %s into containerd: %w: %s", ref, err, strings.TrimSpace(string(out)))
	}
	return true, nil
}
