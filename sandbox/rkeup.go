package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// The images that RKE v1.8.14's own `rke up` needs on the sandbox
// (Options.RKE), where a real machine would pull RKE's: what RKE runs in
// them is RKE's, so they must answer as RKE's images do. rigger's own
// clusters never use them.
const (
	// RKEToolsStandInImage stands in for rancher/rke-tools:v0.1.114, which
	// RKE's table gives alpine, nginx_proxy, cert_downloader and
	// kubernetes_services_sidecar: RKE runs, in it, `sh -c` scripts
	// (the file deployer, the log links, the state deployer),
	// cert-deployer, nginx-proxy, /opt/rke-tools/rke-etcd-backup and, from
	// the service-sidekick's volume, /opt/rke-tools/entrypoint.sh.
	RKEToolsStandInImage = "rigger-sandbox/rke-tools:v0.1.114-standin"
	// rkeHyperkubeTag marks the hyperkube image with kubectl and a shell,
	// as rancher/hyperkube has them: RKE's add-on Jobs run `kubectl apply`
	// (and `sh -c` to delete) in system_images.kubernetes.
	rkeHyperkubeTag = "-rke"
)

// RKEHyperkubeImage is the hyperkube image of the sandbox's default
// Kubernetes with kubectl and a shell.
var RKEHyperkubeImage = HyperkubeRef(KubernetesVersion) + rkeHyperkubeTag

// RKESystemImages returns the system_images entries that make a
// cluster.yml for `rke up` use the stand-ins in place of RKE's images
// (with Sandbox.SystemImages for the rest).
func RKESystemImages() map[string]string {
	return map[string]string{
		"alpine":                      RKEToolsStandInImage,
		"nginx_proxy":                 RKEToolsStandInImage,
		"cert_downloader":             RKEToolsStandInImage,
		"kubernetes_services_sidecar": RKEToolsStandInImage,
		"kubernetes":                  RKEHyperkubeImage,
	}
}

// certDeployerScript is /usr/bin/cert-deployer, as rke-tools' does it:
// each KUBE_* variable is written to /etc/kubernetes/ssl/<name>.pem
// (lower case, '_' as '-') unless the file is there and FORCE_DEPLOY is
// not true, each KUBECFG_* variable to <name>.yaml unless it is there,
// each with one trailing newline (rke-tools takes the value through a
// command substitution, which drops those it had, and echoes it).
// rke-tools' is bash (${!name}); this one is busybox's sh.
const certDeployerScript = `#!/bin/sh
# cert-deployer of the rigger sandbox's stand-in for rancher/rke-tools.
set -e
dir=${CRTS_DEPLOY_PATH:-/etc/kubernetes/ssl}
mkdir -p "$dir"
for kind in KUBE_:pem KUBECFG_:yaml; do
	prefix=${kind%%:*}
	ext=${kind#*:}
	for var in $(env | grep -o "^${prefix}[A-Z0-9_]*=" | tr -d =); do
		name=$(echo "$var" | tr '[:upper:]' '[:lower:]' | tr _ -).$ext
		if [ -f "$dir/$name" ] && { [ "$ext" = yaml ] || [ "${FORCE_DEPLOY:-}" != true ]; }; then
			continue
		fi
		# As rke-tools: the value without its trailing newlines, then one.
		value=$(eval "printf '%s' \"\$$var\"")
		printf '%s\n' "$value" >"$dir/$name"
	done
done
`

// nginxProxyScript is /usr/bin/nginx-proxy: rke-tools renders an nginx
// configuration from CP_HOSTS and runs nginx; the stand-in runs rigger's
// TCP proxy of the same contract (CP_HOSTS, port 6443).
const nginxProxyScript = `#!/bin/sh
exec /usr/local/bin/rigger nginx-proxy "$@"
`

// rkeEtcdBackupScript is /opt/rke-tools/rke-etcd-backup, for what RKE runs
// of it: `etcd-backup save` with --cacert, --cert, --key, --name and
// --endpoints, either --once (one snapshot named --name) or every
// --creation (default 5m) a snapshot named <RFC 3339 time>_etcd, removing
// those older than --retention (default 24h), in /backup (RKE binds
// /opt/rke/etcd-snapshots there), as rke-tools does, from etcdctl's
// snapshot. As rke-tools' CreateBackup, it zips each snapshot to
// /backup/<name>.zip (deflated), with /etc/kubernetes/<name>.rkestate when
// RKE put the cluster's state there (rke etcd snapshot-save does), makes it
// mode 0600 and removes the files it zipped; rke-tools zips with Go's
// archive/zip, the stand-in with Debian's zip (rkeZip), whose entries are
// rke-tools' paths without their leading '/' (backup/<name>: Info-ZIP
// stores no absolute path).
const rkeEtcdBackupScript = `#!/bin/sh
# rke-etcd-backup of the rigger sandbox's stand-in for rancher/rke-tools.
set -u
[ "${1:-}" = etcd-backup ] && [ "${2:-}" = save ] || { echo "rke-etcd-backup: only 'etcd-backup save' is stood in for: $*" >&2; exit 2; }
shift 2
once=false name= creation=300 retention=86400 cacert= cert= key= endpoints=
secs() {
	case $1 in
	*h) echo $(( ${1%h} * 3600 )) ;;
	*m) echo $(( ${1%m} * 60 )) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
while [ $# -gt 0 ]; do
	case $1 in
	--once) once=true ;;
	--name) name=$2; shift ;;
	--name=*) name=${1#*=} ;;
	--cacert) cacert=$2; shift ;;
	--cert) cert=$2; shift ;;
	--key) key=$2; shift ;;
	--endpoints=*) endpoints=${1#*=} ;;
	--endpoints) endpoints=$2; shift ;;
	--creation=*) creation=$(secs "${1#*=}") ;;
	--retention=*) retention=$(secs "${1#*=}") ;;
	*) ;; # S3 and the others: not stood in for
	esac
	shift
done
save() {
	tmp=/backup/.$1.part
	if ! ETCDCTL_API=3 etcdctl --cacert="$cacert" --cert="$cert" --key="$key" --endpoints="$endpoints" snapshot save "$tmp"; then
		rm -f "$tmp"
		return 1
	fi
	mv "$tmp" "/backup/$1"
	set -- "$1" "backup/$1"
	state="etc/kubernetes/$1.rkestate"
	[ -f "/$state" ] && set -- "$@" "$state"
	ztmp=/backup/.$1.zip.part
	rm -f "$ztmp"
	shift
	if ! (cd / && zip -q -X "$ztmp" "$@"); then
		rm -f "$ztmp"
		echo "rke-etcd-backup: zip of /backup/${1#backup/} failed" >&2
		return 1
	fi
	chmod 600 "$ztmp"
	mv "$ztmp" "/$1.zip"
	for f in "$@"; do rm -f "/$f"; done
	echo "rke-etcd-backup: snapshot /$1.zip saved"
}
if [ "$once" = true ]; then
	save "$name"
	exit $?
fi
# rke-tools' is a Go program, which exits on SIGTERM as its container's
# PID 1 too; a shell there ignores it unless it traps it, and a trap runs
# once the command in the foreground ends: the sleep waits in the background.
trap 'exit 0' TERM
echo "rke-etcd-backup: a snapshot every ${creation}s, kept ${retention}s"
while :; do
	sleep "$creation" &
	wait $!
	save "$(date -u +%Y-%m-%dT%H:%M:%SZ)_etcd" || echo "rke-etcd-backup: snapshot failed" >&2
	now=$(date +%s)
	for f in /backup/*_etcd /backup/*_etcd.zip; do
		[ -f "$f" ] || continue
		if [ $(( now - $(stat -c %Y "$f") )) -gt "$retention" ]; then
			rm -f "$f" && echo "rke-etcd-backup: $f past its retention, removed"
		fi
	done
done
`

// rkeZip is Debian's zip, which the stand-in's rke-etcd-backup zips
// snapshots with (busybox has no zip).
const rkeZip = "/usr/bin/zip"

// rkeToolsStandInSpec is RKEToolsStandInImage: busybox's applets as the
// image's commands (rke-tools' are alpine's, its sh bash), cert-deployer,
// nginx-proxy (with rigger's binary) and rke-etcd-backup (with etcdctl of
// etcdDir and rkeZip with its libraries), and the /opt/rke-tools volume of
// the sandbox's rke-tools stand-in (entrypoint.sh, cri-dockerd).
func rkeToolsStandInSpec(ctx context.Context, progs builtPrograms, riggerBin, etcdDir string) (imageSpec, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return imageSpec{}, fmt.Errorf("rke-tools stand-in: list busybox's applets: %w", err)
	}
	spec := rkeToolsImageSpec(progs)
	spec.ref = RKEToolsStandInImage
	spec.systemImages = nil
	spec.rigger = true
	spec.links = nil
	spec.files = append(spec.files,
		imageFile{content: certDeployerScript, dst: "/usr/bin/cert-deployer", mode: 0o755},
		imageFile{content: nginxProxyScript, dst: "/usr/bin/nginx-proxy", mode: 0o755},
		imageFile{src: riggerBin, dst: "/usr/local/bin/rigger", mode: 0o755},
		imageFile{content: rkeEtcdBackupScript, dst: rkeToolsDir + "/rke-etcd-backup", mode: 0o755},
		imageFile{src: etcdDir + "/etcdctl", dst: "/usr/local/bin/etcdctl", mode: 0o755},
	)
	zip, err := withLibs(ctx, rkeZip)
	if err != nil {
		return imageSpec{}, fmt.Errorf("rke-tools stand-in: %w (install zip: make prereqs)", err)
	}
	spec.files = appendNew(spec.files, zip...)
	spec.dirs = append(spec.dirs, imageDir{"/backup", 0o755})
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		spec.links = append(spec.links, imageLink{path: "/bin/" + applet, target: "busybox"})
	}
	spec.changes = []string{"ENV PATH=/usr/local/bin:/usr/bin:/bin", "VOLUME " + rkeToolsDir, `CMD ["/bin/sh"]`}
	return spec, nil
}

// rkeHyperkubeSpec is RKEHyperkubeImage: the default release's hyperkube
// with kubectl and busybox's sh.
func rkeHyperkubeSpec(ctx context.Context, kubeDir, kubectl string) (imageSpec, error) {
	spec, err := hyperkubeSpec(ctx, kubeDir, KubernetesVersion, true)
	if err != nil {
		return imageSpec{}, err
	}
	spec.ref = RKEHyperkubeImage
	spec.files = append(spec.files,
		imageFile{src: kubectl, dst: "/usr/local/bin/kubectl", mode: 0o755},
		imageFile{src: busybox, dst: "/bin/busybox", mode: 0o755})
	spec.links = append(spec.links, imageLink{path: "/bin/sh", target: "busybox"})
	return spec, nil
}
