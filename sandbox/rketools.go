package sandbox

// RKEToolsImage is the sandbox's stand-in for rancher/rke-tools as RKE runs
// it for the kubelet (system_images.kubernetes_services_sidecar): the
// service-sidekick container of that image holds the volume /opt/rke-tools,
// and the kubelet's container (the hyperkube image) mounts it and runs its
// entrypoint.sh, which starts cri-dockerd and then the kubelet.
const RKEToolsImage = "rigger-sandbox/rke-tools:cri-dockerd-" + CRIDockerdVersion

// Paths of the rke-tools volume, as rancher/rke-tools has them.
const (
	rkeToolsDir        = "/opt/rke-tools"
	rkeToolsEntrypoint = rkeToolsDir + "/entrypoint.sh"
	rkeToolsCRIDockerd = rkeToolsDir + "/bin/cri-dockerd"
	// rkeToolsBusybox is the shell and tools of the entrypoint: it runs in
	// the kubelet's image, which has neither.
	rkeToolsBusybox = rkeToolsDir + "/bin/busybox"
)

// rkeToolsEntrypointScript is /opt/rke-tools/entrypoint.sh. For kube-proxy
// with RKE_KUBE_PROXY_BR_NETFILTER=true it loads br_netfilter, and runs
// every other command as it is, as rke-tools' does. For the kubelet
// it does what rancher/rke-tools' entrypoint does on a Linux node (its
// Azure and AWS parts aside): it asks the engine (GET /info on
// /var/run/docker.sock) for its cgroup driver, cgroup version and root
// directory; unmounts, inside the kubelet's container, the mounts below the
// Docker root, /run and /var/run that the kubelet's binds brought along;
// binds /host/dev on /dev, makes the kubepods cgroups (cgroup v1), sets
// net.bridge.bridge-nf-call-iptables and links the host's os-release. With
// RKE_KUBELET_CRIDOCKERD=true it starts cri-dockerd with the kubelet's pod
// infra image and CRI endpoint (the socket cri-dockerd serves), the CNI
// network plugin on /etc/cni/net.d and /opt/cni/bin and the streaming
// server on 127.0.0.1:10010 (CRIDOCKERD_STREAM_SERVER_ADDRESS and _PORT,
// expanded unquoted as rke-tools does, so that words after the port reach
// cri-dockerd too),
// then the kubelet with --cgroup-driver from the engine, and ends when
// either ends, so that the container restarts. rke-tools sleeps 10 s before
// starting the kubelet; this one starts it as soon as cri-dockerd answers
// on its socket (at most 10 s), having removed the socket an earlier run
// left. With private registries (RKE_KUBELET_DOCKER_CONFIG), it writes
// their Docker config to RKE_KUBELET_DOCKER_FILE, mode 0600, and binds it
// on /.docker/config.json for cri-dockerd, as rke-tools does, but without
// printing it.
//
// It traces only the commands it starts (sh -x), not the engine's answer.
//
// Its tools are busybox's, from the volume; socat (to reach the engine's
// socket) is the kubelet image's, which also has what cri-dockerd runs:
// nsenter, ip, socat, conntrack and iptables.
const rkeToolsEntrypointScript = `#!` + rkeToolsBusybox + ` sh
# /opt/rke-tools/entrypoint.sh of the rigger sandbox's rke-tools image.
bb=` + rkeToolsBusybox + `

# kube-proxy: flannel and canal need bridged traffic to pass through
# iptables (RKE sets this for enable_br_netfilter).
if [ "$1" = kube-proxy ] && [ "${RKE_KUBE_PROXY_BR_NETFILTER:-}" = true ]; then
	$bb modprobe br_netfilter || true
fi
if [ "$1" != kubelet ]; then
	exec "$@"
fi

# What the engine says of itself.
info=$(printf 'GET /info HTTP/1.0\r\nHost: docker\r\n\r\n' | socat -t 10 - UNIX-CONNECT:/var/run/docker.sock | $bb tail -n 1)
field() {
	printf '%s' "$info" | $bb sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p"
}
CGROUPDRIVER=$(field CgroupDriver)
CGROUPVERSION=$(field CgroupVersion)
DOCKER_ROOT=$(field DockerRootDir)
if [ -z "$CGROUPDRIVER" ] || [ -z "$DOCKER_ROOT" ]; then
	echo "entrypoint: the Docker engine on /var/run/docker.sock did not say its cgroup driver and root directory" >&2
	exit 1
fi
echo "entrypoint: Docker's cgroup driver $CGROUPDRIVER, cgroup v$CGROUPVERSION, root $DOCKER_ROOT"

# The mounts that the binds of the Docker root, /run and /var/run brought
# into this container (other containers' file systems, network namespaces),
# but the Docker root's own entries.
DOCKER_DIRS=$($bb find "$DOCKER_ROOT" -maxdepth 1)
for i in "$DOCKER_ROOT" /var/lib/docker /run /var/run; do
	for m in $($bb tac /proc/mounts | $bb awk '{print $2}' | $bb grep "^$i/"); do
		case $m in /var/run/nscd | /run/nscd) continue ;; esac
		if ! echo "$DOCKER_DIRS" | $bb grep -qF "$m"; then
			$bb umount "$m" || true
		fi
	done
done
$bb mount --rbind /host/dev /dev
$bb mount -o rw,remount /sys/fs/cgroup 2>/dev/null || true
if [ "$CGROUPVERSION" = 1 ]; then
	for i in /sys/fs/cgroup/*; do
		if [ -d "$i" ]; then
			$bb mkdir -p "$i/kubepods"
		fi
	done
	# Where the hierarchies are mounted together, the names some programs
	# look for.
	if [ -d /sys/fs/cgroup/cpu,cpuacct ]; then
		$bb mkdir -p /sys/fs/cgroup/cpuacct,cpu
		$bb mount --bind /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpuacct,cpu
	fi
	if [ -d /sys/fs/cgroup/net_cls,net_prio ]; then
		$bb mkdir -p /sys/fs/cgroup/net_prio,net_cls
		$bb mount --bind /sys/fs/cgroup/net_cls,net_prio /sys/fs/cgroup/net_prio,net_cls
	fi
fi
$bb mkdir -p /opt/cni /etc/cni
# Network plugins need bridged traffic to pass through iptables.
$bb sysctl -w net.bridge.bridge-nf-call-iptables=1 || true
# The kubelet reports the host's operating system.
if [ -f /host/usr/lib/os-release ]; then
	$bb ln -sf /host/usr/lib/os-release /usr/lib/os-release
elif [ -f /host/etc/os-release ]; then
	$bb ln -sf /host/etc/os-release /usr/lib/os-release
fi

# Private registries: their credentials, where the kubelet reads those of
# its pulls (rke-tools also prints them; this one does not).
if [ -n "${RKE_KUBELET_DOCKER_CONFIG:-}" ]; then
	(umask 077 && printf '%s' "$RKE_KUBELET_DOCKER_CONFIG" | $bb base64 -d >"$RKE_KUBELET_DOCKER_FILE")
fi

if [ "${RKE_KUBELET_CRIDOCKERD:-}" != true ]; then
	exec "$@" --cgroup-driver="$CGROUPDRIVER"
fi

# cri-dockerd reads them from /.docker/config.json.
if [ -n "${RKE_KUBELET_DOCKER_CONFIG:-}" ]; then
	$bb mkdir -p /.docker && $bb touch /.docker/config.json
	$bb mount --bind "$RKE_KUBELET_DOCKER_FILE" /.docker/config.json
fi

PAUSE=
ENDPOINT=
for a in "$@"; do
	case $a in
	--pod-infra-container-image=*) PAUSE=$a ;;
	--container-runtime-endpoint=*) ENDPOINT=${a#*=} ;;
	esac
done
if [ "$ENDPOINT" = /var/run/dockershim.sock ]; then
	ENDPOINT=unix://$ENDPOINT
fi
EXTRA=
if [ "${RKE_KUBELET_CRIDOCKERD_DUALSTACK:-}" = true ]; then
	EXTRA=--ipv6-dual-stack
fi
set -- "$@" --cgroup-driver="$CGROUPDRIVER"
# A socket left by an earlier cri-dockerd (the container restarted) is not
# one that answers.
socket=${ENDPOINT#unix://}
$bb rm -f "$socket"
set -x
# The address and port are expanded unquoted, as rke-tools' entrypoint
# expands them: from Kubernetes 1.35 rigger passes the pause image after
# the port (the kubelet has no --pod-infra-container-image any more).
` + rkeToolsCRIDockerd + ` --network-plugin=cni --cni-conf-dir=/etc/cni/net.d --cni-bin-dir=/opt/cni/bin $PAUSE \
	--container-runtime-endpoint="$ENDPOINT" \
	--streaming-bind-addr=${CRIDOCKERD_STREAM_SERVER_ADDRESS:-127.0.0.1}:${CRIDOCKERD_STREAM_SERVER_PORT:-10010} $EXTRA &
{ set +x; } 2>/dev/null
cri=$!

# The kubelet needs cri-dockerd to answer on its socket.
n=0
while ! socat -u OPEN:/dev/null "UNIX-CONNECT:$socket" 2>/dev/null && [ $n -lt 100 ]; do
	if ! kill -0 "$cri" 2>/dev/null; then
		wait "$cri"
		rc=$?
		echo "entrypoint: cri-dockerd ended (exit status $rc) before it answered on $socket" >&2
		exit "$rc"
	fi
	$bb sleep 0.1
	n=$((n + 1))
done
echo "entrypoint: starting the kubelet: $*"
"$@" &
# Either ending ends the container, which the engine restarts.
wait -n
exit $?
`

// rkeToolsImageSpec is the volume /opt/rke-tools with entrypoint.sh,
// cri-dockerd and busybox (the entrypoint's shell and tools), and busybox
// as the image's own shell: the service-sidekick container runs /bin/true.
func rkeToolsImageSpec(progs builtPrograms) imageSpec {
	spec := imageSpec{
		ref: RKEToolsImage,
		files: []imageFile{
			{src: busybox, dst: "/bin/busybox", mode: 0o755},
			{src: busybox, dst: rkeToolsBusybox, mode: 0o755},
			{src: progs.bin(criDockerdProgram, "cri-dockerd"), dst: rkeToolsCRIDockerd, mode: 0o755},
			{content: rkeToolsEntrypointScript, dst: rkeToolsEntrypoint, mode: 0o755},
		},
		dirs:         []imageDir{{"/tmp", 0o1777}},
		changes:      []string{"ENV PATH=/bin", "VOLUME " + rkeToolsDir, `CMD ["/bin/sh"]`},
		systemImages: []string{"kubernetes_services_sidecar"},
	}
	for _, c := range []string{"sh", "true", "cat", "ls"} {
		spec.links = append(spec.links, imageLink{path: "/bin/" + c, target: "busybox"})
	}
	return spec
}
