package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
)

// The add-on images: stand-ins, built without a registry, for the rancher/*
// images that RKE's add-on templates (its metadata's templateKeys) name.
// Each runs its template unchanged: the commands, paths and files the
// template's containers use are in it.
const (
	// FlannelImage serves system_images.flannel and canal_flannel
	// (rancher/mirrored-flannel-flannel): /opt/bin/flanneld and iptables.
	FlannelImage = "rigger-sandbox/flannel:" + FlannelVersion
	// FlannelCNIImage serves system_images.flannel_cni (rancher/flannel-cni):
	// /install-cni.sh, the CNI plugins in /opt/cni/bin and a shell.
	FlannelCNIImage = "rigger-sandbox/flannel-cni:" + FlannelCNIVersion + "-cni-plugins-" + CNIPluginsVersion
	// CoreDNSImage serves system_images.coredns
	// (rancher/mirrored-coredns-coredns, tagged without the v).
	CoreDNSImage = "rigger-sandbox/coredns:" + CoreDNSVersionTag
	// MetricsServerImage serves system_images.metrics_server
	// (rancher/mirrored-metrics-server).
	MetricsServerImage = "rigger-sandbox/metrics-server:" + MetricsServerVersion

	// CoreDNSVersionTag is CoreDNSVersion as CoreDNS tags its images.
	CoreDNSVersionTag = "1.11.3"
)

// flannelImageSpec is flanneld where RKE's flannel and canal templates run
// it (/opt/bin/flanneld, as the upstream image has it), with the iptables
// commands it runs (iptables, iptables-save, iptables-restore: the nft back
// end, as kube-proxy's in the hyperkube image) and their libraries.
func flannelImageSpec(ctx context.Context, progs builtPrograms) (imageSpec, error) {
	spec := imageSpec{
		ref:          FlannelImage,
		files:        []imageFile{{src: progs.bin(flannelProgram, "flannel"), dst: "/opt/bin/flanneld", mode: 0o755}},
		dirs:         []imageDir{{"/tmp", 0o1777}, {"/run", 0o755}},
		changes:      []string{"ENV PATH=/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", `ENTRYPOINT ["/opt/bin/flanneld"]`},
		systemImages: []string{"flannel", "canal_flannel"},
	}
	files, links, err := iptablesFiles(ctx)
	if err != nil {
		return imageSpec{}, fmt.Errorf("flannel image: %w", err)
	}
	spec.files = append(spec.files, files...)
	spec.links = append(spec.links, links...)
	return spec, nil
}

// flannelCNIPlugins are the CNI plugins of the flannel-cni image: the
// flannel plugin and those it and RKE's network config delegate to.
func flannelCNIPlugins() []struct {
	prog goProgram
	bin  string
} {
	return []struct {
		prog goProgram
		bin  string
	}{
		{flannelCNIProgram, "flannel"},
		{cniPluginsProgram, "bridge"},
		{cniPluginsProgram, "loopback"},
		{cniPluginsProgram, "host-local"},
		{cniPluginsProgram, "portmap"},
		{cniPluginsProgram, "bandwidth"},
	}
}

// installCNIScript is the flannel-cni image's /install-cni.sh, the command
// of the install-cni container of RKE's flannel DaemonSet: it copies the
// image's CNI plugins into the host's /opt/cni/bin (mounted on
// /host/opt/cni/bin), writes $CNI_NETWORK_CONFIG, the network of the
// manifest rigger deploys, as /etc/cni/net.d/$CNI_CONF_NAME (mounted on
// /host/etc/cni/net.d), and then stays up, as the DaemonSet expects. The
// image has no network of its own, nor a name for one: without
// CNI_NETWORK_CONFIG or CNI_CONF_NAME it writes nothing and fails, so that
// a node's network can only come from the cluster's network plugin. Files
// are written beside their target and renamed into place: a plugin that
// runs is never overwritten in place.
const installCNIScript = `#!/bin/sh
# install-cni of the rigger sandbox flannel-cni image.
set -eu
for v in CNI_NETWORK_CONFIG CNI_CONF_NAME; do
	if eval "[ -z \"\${$v:-}\" ]"; then
		echo "install-cni: $v is not set: the network plugin's manifest gives the node's network" >&2
		exit 1
	fi
done
bin=/host/opt/cni/bin
conf=/host/etc/cni/net.d
if [ -w "$bin/" ]; then
	for f in /opt/cni/bin/*; do
		name=${f##*/}
		cp "$f" "$bin/.$name.tmp"
		mv -f "$bin/.$name.tmp" "$bin/$name"
	done
	echo "install-cni: CNI plugins copied to $bin: $(ls /opt/cni/bin | tr '\n' ' ')"
fi
name=$CNI_CONF_NAME
old=${CNI_OLD_NAME:-10-flannel.conf}
if [ "$name" != "$old" ]; then
	rm -f "$conf/$old"
fi
printf '%s\n' "$CNI_NETWORK_CONFIG" > "$conf/.$name.tmp"
mv -f "$conf/.$name.tmp" "$conf/$name"
echo "install-cni: wrote $conf/$name:"
cat "$conf/$name"
trap 'exit 0' TERM INT
while :; do
	sleep 3600 &
	wait $!
done
`

// flannelCNIImageSpec is busybox (the script's shell, cp, mv, rm, cat, ls,
// tr, sleep), /install-cni.sh and the CNI plugins in
// /opt/cni/bin, as rancher/flannel-cni lays them out.
func flannelCNIImageSpec(progs builtPrograms) imageSpec {
	spec := imageSpec{
		ref: FlannelCNIImage,
		files: []imageFile{
			{src: busybox, dst: "/bin/busybox", mode: 0o755},
			{content: installCNIScript, dst: "/install-cni.sh", mode: 0o755},
		},
		dirs:         []imageDir{{"/tmp", 0o1777}, {"/host", 0o755}},
		changes:      []string{"ENV PATH=/bin", `CMD ["/install-cni.sh"]`},
		systemImages: []string{"flannel_cni"},
	}
	for _, pl := range flannelCNIPlugins() {
		spec.files = append(spec.files, imageFile{src: progs.bin(pl.prog, pl.bin), dst: filepath.Join("/opt/cni/bin", pl.bin), mode: 0o755})
	}
	for _, c := range []string{"sh", "cp", "mv", "rm", "cat", "ls", "tr", "sleep", "mkdir", "echo"} {
		spec.links = append(spec.links, imageLink{path: "/bin/" + c, target: "busybox"})
	}
	return spec
}

// coreDNSImageSpec is /coredns as its ENTRYPOINT, as the upstream image:
// RKE's template gives the arguments (-conf /etc/coredns/Corefile) and
// mounts the Corefile. It runs as root (the upstream image runs as nonroot
// with a file capability to bind port 53; the template adds
// NET_BIND_SERVICE, which root has).
func coreDNSImageSpec(progs builtPrograms) imageSpec {
	return imageSpec{
		ref:          CoreDNSImage,
		files:        []imageFile{{src: progs.bin(coreDNSProgram, "coredns"), dst: "/coredns", mode: 0o755}},
		changes:      []string{`ENTRYPOINT ["/coredns"]`},
		systemImages: []string{"coredns"},
	}
}

// metricsServerImageSpec is /metrics-server as its ENTRYPOINT, user 65534,
// as the upstream image: RKE's template gives the arguments and an
// emptyDir on /tmp for --cert-dir.
func metricsServerImageSpec(progs builtPrograms) imageSpec {
	return imageSpec{
		ref:          MetricsServerImage,
		files:        []imageFile{{src: progs.bin(metricsServerProgram, "metrics-server"), dst: "/metrics-server", mode: 0o755}},
		dirs:         []imageDir{{"/tmp", 0o1777}},
		changes:      []string{`ENTRYPOINT ["/metrics-server"]`, "USER 65534"},
		systemImages: []string{"metrics_server"},
	}
}

// addonImageSpecs are the add-on images.
func addonImageSpecs(ctx context.Context, progs builtPrograms) ([]imageSpec, error) {
	flannel, err := flannelImageSpec(ctx, progs)
	if err != nil {
		return nil, err
	}
	return []imageSpec{flannel, flannelCNIImageSpec(progs), coreDNSImageSpec(progs), metricsServerImageSpec(progs)}, nil
}
