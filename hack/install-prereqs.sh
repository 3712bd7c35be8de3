#!/usr/bin/env bash
# Installs what rigger's sandbox, demo and tests need from Debian's archive.
# Shared by `make demo`, `make test` and CI. Does nothing when all is present.
#
# What each package is for:
#   iproute2                    ip: bridge, veth pairs, network namespaces, routes (sandbox)
#   util-linux                  nsenter, unshare, mount (sandbox node namespaces)
#   openssh-server              sshd, one per sandbox node
#   openssh-client              ssh-keygen (sandbox keys), ssh for people
#   docker.io                   dockerd (Docker Engine 20.10) and runc, one engine per node
#   containerd                  containerd 1.6 and ctr, one per node: the CRI runtime of a real kubelet,
#                               and the containerd of the node's engine
#   jq                          the sandbox's runc wrapper edits the OCI bundle with it
#   tini                        the sandbox's init (a child subreaper: this machine's PID 1 is slow to reap orphans)
#   git                         the GitOps loop and its tests
#   busybox-static              the shell and file tools of the sandbox's helper image (system_images.alpine)
#   iptables                    iptables for kube-proxy, the kubelet and flanneld, copied into the sandbox's
#                               hyperkube and flannel images
#   socat conntrack             what cri-dockerd runs beside the kubelet (port forwarding, host ports), copied
#                               with nsenter (util-linux) and ip (iproute2) into the sandbox's hyperkube image
#   gcc libc6-dev               cgo and a static libc for flanneld (its udp backend needs cgo), built by the sandbox
#   docker-registry             a Docker Registry v2 (distribution 2.8.2) behind htpasswd auth on the sandbox's
#                               bridge, for the private_registries tests (sandboxtest.StartRegistry)
#   chromium                    headless Chromium: the browser test of serve's status page (gitops/statuspage)
#   zip                         Info-ZIP's zip, copied with its libraries into the sandbox's rke-tools stand-in
#                               (rigger sandbox up --rke): its rke-etcd-backup zips snapshots as rke-tools does
set -euo pipefail

# file that must exist -> Debian package that provides it
declare -A want=(
  [/usr/sbin/ip]=iproute2
  [/usr/bin/nsenter]=util-linux
  [/usr/bin/unshare]=util-linux
  [/usr/sbin/sshd]=openssh-server
  [/usr/bin/ssh-keygen]=openssh-client
  [/usr/sbin/dockerd]=docker.io
  [/usr/sbin/runc]=runc
  [/usr/bin/containerd]=containerd
  [/usr/bin/ctr]=containerd
  [/usr/bin/jq]=jq
  [/usr/bin/tini]=tini
  [/usr/bin/git]=git
  [/bin/busybox]=busybox-static
  [/usr/sbin/xtables-nft-multi]=iptables
  [/usr/bin/socat]=socat
  [/usr/sbin/conntrack]=conntrack
  [/usr/bin/gcc]=gcc
  [/usr/lib/x86_64-linux-gnu/libc.a]=libc6-dev
  [/usr/bin/docker-registry]=docker-registry
  [/usr/bin/chromium]=chromium
  [/usr/bin/zip]=zip
)

missing=()
for path in "${!want[@]}"; do
  [ -e "$path" ] && continue
  pkg=${want[$path]}
  case " ${missing[*]:-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-prereqs: missing ${missing[*]}; run as root or install them: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "install-prereqs: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends keeps docker.io from pulling in extras; the
# packages do not start their services here (no systemd), and the sandbox
# starts its own sshd, containerd and dockerd per node.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-prereqs: done"
