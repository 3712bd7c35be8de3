package spec

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// validator checks a decoded, defaulted cluster as a whole.
type validator struct {
	file string
	pos  map[string]Pos
	bad  map[string]bool // paths that failed to decode: nothing more is said about them
	// holdsBad holds every path with a bad path inside it.
	holdsBad map[string]bool
	zero     map[string]bool // paths given an explicit 0
	diags    *collector
	// givenImages are the services' image keys as the file gave them,
	// before the defaults replaced them (serviceImages).
	givenImages map[string]string
	// noBackupConfig: the file's services.etcd.backup_config was null or
	// absent, so creation and retention make the schedule (legacySchedule).
	noBackupConfig bool
}

// newValidator makes the validator of what d decoded.
func newValidator(d *decoder) *validator {
	v := &validator{file: d.file, pos: d.pos, bad: d.bad, holdsBad: map[string]bool{}, zero: d.zero, diags: d.diags}
	for b := range d.bad {
		for i := 1; i < len(b); i++ {
			if b[i] == '.' || b[i] == '[' {
				v.holdsBad[b[:i]] = true
			}
		}
	}
	return v
}

// at returns the position of path, or of its closest ancestor that has one.
func (v *validator) at(p string) Pos {
	for p != "" {
		if pos, ok := v.pos[p]; ok {
			return pos
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return Pos{}
}

// related reports whether p is, contains or lies inside a path that failed
// to decode. Its work grows with the length of p, not with the number of
// bad paths.
func (v *validator) related(p string) bool {
	if v.bad[p] || v.holdsBad[p] {
		return true
	}
	for i := len(p) - 1; i > 0; i-- {
		if (p[i] == '.' || p[i] == '[') && v.bad[p[:i]] {
			return true
		}
	}
	return false
}

func (v *validator) add(sev Severity, p, detail, format string, args ...any) {
	if v.related(p) {
		return
	}
	pos := v.at(p)
	v.diags.add(Diagnostic{
		Severity: sev, File: v.file, Line: pos.Line, Column: pos.Column,
		Path: p, Summary: sprintf(format, args...), Detail: detail,
	})
}

func (v *validator) errorf(p, detail, format string, args ...any) {
	v.add(SeverityError, p, detail, format, args...)
}

func (v *validator) warnf(p, detail, format string, args ...any) {
	v.add(SeverityWarning, p, detail, format, args...)
}

// oneOf reports value at p unless it is one of allowed (or empty, when empty is allowed).
func (v *validator) oneOf(p, value string, emptyOK bool, allowed ...string) bool {
	if (value == "" && emptyOK) || slices.Contains(allowed, value) {
		return true
	}
	detail := "Allowed: " + strings.Join(allowed, ", ") + "."
	if s := suggest(value, allowed); s != "" {
		detail = fmt.Sprintf("Did you mean %q? ", s) + detail
	}
	v.errorf(p, detail, "%q is not a valid value", value)
	return false
}

// positiveInts are the whole-number keys whose 0 would be read as "unset"
// and replaced by the default, where RKE does not read 0 so: an explicit 0
// there is a mistake. (RKE reads a 0 addon_job_timeout, and backup_config's
// interval_hours, retention and timeout, as unset: `rke config` writes
// addon_job_timeout: 0 in every file. Its drain timeout 0 waits forever.)
var positiveInts = []string{
	"upgrade_strategy.node_drain_input.timeout",
	"rigger.max_parallel",
}

// validate checks c, part after part; between two parts, it stops with
// the cause when ctx ends.
func (v *validator) validate(ctx context.Context, c *Cluster) error {
	for _, p := range positiveInts {
		if v.zero[p] {
			v.errorf(p, "Leave the key out to get the default.", "%s must be at least 1, got 0", p[strings.LastIndex(p, ".")+1:])
		}
	}
	for _, check := range []func(*Cluster){
		v.clusterName, v.version, v.nodes, v.services, v.network, v.auth, v.addons,
		v.upgradeStrategy, v.registries, v.bastion, v.misc, v.rigger, v.notWritten,
		v.pinnedKubernetes, v.removedFlags, v.retiredIngress,
	} {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		check(c)
	}
	return nil
}

func (v *validator) clusterName(c *Cluster) {
	if errs := labelValueErrors(c.ClusterName); c.ClusterName == "" || len(errs) > 0 {
		v.errorf("cluster_name", "It names containers' labels and kubeconfig contexts: use letters, digits, '-', '_' and '.', at most 63 characters.",
			"cluster_name %q is not valid", c.ClusterName)
	}
}

// version checks kubernetes_version as RKE does (it must be `v` and a
// semantic version, and a version outside the table needs its images set),
// and that rigger can run it: Kubernetes 1.24 or later, with RKE's default
// flags for the version the kubernetes image runs.
func (v *validator) version(c *Cluster) {
	kv, err := rkemeta.ParseVersion(c.KubernetesVersion)
	if err != nil {
		v.errorf("kubernetes_version", "Write it as RKE does, with the leading v: v1.32.3-rancher1-1, or v1.31.4 with system_images set.", "%v", err)
		return
	}
	if kv.Major != 1 || kv.Minor < rkemeta.MinMinor {
		v.errorf("kubernetes_version", fmt.Sprintf("Upgrade the cluster to Kubernetes 1.%d or later with RKE first (the oldest version rigger knows is %s), then move it to rigger.", rkemeta.MinMinor, KubernetesVersions()[0]),
			"%s: rigger runs Kubernetes 1.%d and later", c.KubernetesVersion, rkemeta.MinMinor)
		return
	}
	if _, known := KnownImages(c.KubernetesVersion); !known {
		if instead, retired := riggermeta.Retired(c.KubernetesVersion); retired {
			v.errorf("kubernetes_version", fmt.Sprintf("rigger's table now runs each component from upstream's own images (docs/versions.md): write %s.", instead),
				"%s was an entry of an earlier rigger's table, on an image its table no longer names", c.KubernetesVersion)
			return
		}
		if missing, first := missingImages(c); len(missing) > 0 {
			v.errorf("kubernetes_version", versionDetail(c.KubernetesVersion, missing),
				"%s is an unsupported Kubernetes version and system images are not populated: %s", c.KubernetesVersion, first)
			return
		}
	}
	// RKE picks the components' default flags by the tag of the
	// kubernetes image first; rigger knows them from 1.24 on.
	if c.SystemImages.Kubernetes == "" {
		return
	}
	if _, series, err := riggermeta.ServiceOptionsFor(c.KubernetesVersion, c.SystemImages.Kubernetes); err != nil {
		p, detail := "kubernetes_version", ""
		if tag := rkemeta.ImageTag(c.SystemImages.Kubernetes); rkemeta.Series(tag) != "" {
			p = "system_images.kubernetes"
			detail = fmt.Sprintf("The tag %s of the image says Kubernetes %s, and RKE takes the components' default flags from the image's tag. ", tag, series)
		}
		if sv, err := rkemeta.ParseVersion(series + ".0"); err == nil && sv.Major == 1 && sv.Minor < rkemeta.MinMinor {
			// RKE has flags back to 1.9; running nothing before 1.24 is
			// rigger's own rule (dockershim is gone from 1.24 on).
			detail += fmt.Sprintf("rigger runs Kubernetes 1.%d and later only: that is rigger's policy, not RKE's. Upgrade the cluster to 1.%d or later with RKE first, then move it to rigger with an image of 1.%d or later.", rkemeta.MinMinor, rkemeta.MinMinor, rkemeta.MinMinor)
			v.errorf(p, detail, "%s: rigger runs Kubernetes 1.%d and later, not %s", c.SystemImages.Kubernetes, rkemeta.MinMinor, series)
			return
		}
		rkeNewest := strings.TrimPrefix(rkemeta.Series(rkemeta.Versions()[len(rkemeta.Versions())-1]), "v")
		newest := strings.TrimPrefix(rkemeta.Series(KubernetesVersions()[len(KubernetesVersions())-1]), "v")
		detail += fmt.Sprintf("RKE %s, RKE's last release, has default flags up to Kubernetes %s, rigger's own table goes on to %s, and rigger runs 1.%d to %s; use an image of one of those.", rkemeta.RKEVersion, rkeNewest, newest, rkemeta.MinMinor, newest)
		v.errorf(p, detail, "%s: no default component flags for Kubernetes %s", c.SystemImages.Kubernetes, series)
	}
}

func (v *validator) registries(c *Cluster) {
	if len(c.PrivateRegistries) > 0 && c.EnableCRIDockerd != nil && !*c.EnableCRIDockerd {
		v.warnf("private_registries", "Set enable_cri_dockerd: true, or have the nodes hold the pods' images.",
			"the kubelet's pulls of pod images get no credentials: as RKE, rigger hands them to rke-tools' kubelet entrypoint, which runs only with enable_cri_dockerd: true")
	}
	defaults := 0
	seen := map[string]bool{}
	for i, r := range c.PrivateRegistries {
		p := fmt.Sprintf("private_registries[%d]", i)
		if url := cmp.Or(r.URL, "docker.io"); seen[url] {
			v.warnf(p+".url", "Give each registry once.", "registry %s is given more than once: the last entry's credentials are used, as in RKE", url)
		} else {
			seen[url] = true
		}
		// As in RKE, a registry without url is Docker Hub's (docker.io).
		if strings.Contains(r.URL, "://") {
			v.errorf(p+".url", "Give host[:port], as in image names.", "url %q must not include a scheme", r.URL)
		}
		if r.Password != "" && r.User == "" {
			v.warnf(p+".user", "Give the registry's user too.", "a password is given without a user: it is sent with an empty user name, as RKE sends it, which most registries refuse")
		}
		if r.ECRCredentialPlugin != nil {
			v.errorf(p+".ecr_credential_plugin", "Give the registry's user and password instead: for Amazon ECR, user AWS and the password `aws ecr get-login-password` prints (valid 12 hours).",
				"ecr_credential_plugin is not supported by rigger: it does not ask Amazon ECR for tokens, nor set up the kubelet's ecr-login credential helper as RKE does")
		}
		if r.IsDefault {
			if defaults++; defaults > 1 {
				v.warnf(p+".is_default", "Mark one registry is_default.", "more than one registry is marked is_default: the first one's url prefixes the system images, as in RKE")
			}
		}
	}
}

func (v *validator) misc(c *Cluster) {
	v.restore(&c.Restore)
	if c.IgnoreDockerVersion != nil && *c.IgnoreDockerVersion {
		v.warnf("ignore_docker_version", "Run rigger plan, apply or serve with --ignore-docker-version to skip the check, as rke up's flag.",
			"rke up ignores ignore_docker_version and checks each node's Docker version unless given --ignore-docker-version, and so does rigger")
	}
	if rc := c.RotateCertificates; rc != nil {
		for i, s := range rc.Services {
			v.oneOf(fmt.Sprintf("rotate_certificates.services[%d]", i), s, false,
				"etcd", "kubelet", "kube-apiserver", "kube-proxy", "kube-scheduler", "kube-controller-manager")
		}
	}
	if c.AddonJobTimeout < 0 {
		v.errorf("addon_job_timeout", "", "addon_job_timeout must be at least 1 second")
	}
	if c.PrefixPath != "" && !path.IsAbs(c.PrefixPath) {
		v.errorf("prefix_path", "", "prefix_path %q is not an absolute path", c.PrefixPath)
	}
}

// notWritten refuses settings that rigger reads but cannot carry out yet,
// so that they are refused when cluster.yml is read rather than when a plan
// is made. (The planner's own refusals stay as a second line.)
func (v *validator) notWritten(c *Cluster) {
	if c.PrefixPath != "" {
		v.errorf("prefix_path", "Remove prefix_path: rigger does not write its files under a prefix path yet.", "prefix_path is not supported by rigger yet")
	}
	// As RKE (rke encrypt rotate-key refuses both): only the key rigger
	// generates is rotated.
	if se := c.Services.KubeAPI.SecretsEncryptionConfig; c.RotateEncryptionKey {
		switch {
		case se == nil || !se.Enabled:
			v.errorf("rotate_encryption_key", "Set services.kube-api.secrets_encryption_config.enabled: true, or remove rotate_encryption_key.",
				"rotate_encryption_key: secrets encryption is not enabled, there is no key to rotate")
		case se.CustomConfig != nil:
			v.errorf("rotate_encryption_key", "Remove rotate_encryption_key. To rotate a key of your custom_config, add the new key second in custom_config and apply, move it first and apply, rewrite the Secrets (kubectl get secrets -A -o json | kubectl replace -f -), then remove the old key and apply again.",
				"rotate_encryption_key: rigger rotates only the key it generates, not one of secrets_encryption_config.custom_config")
		}
	}
}

// snapshotNameRE and maxSnapshotName are the rules of
// etcdsnap.CheckName (which imports spec), so that a restore request
// rigger cannot carry out is refused when cluster.yml is read.
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]*$`)

const (
	maxSnapshotName = 200
	// maxRestoreID bounds restore.id, which is kept in the state directory
	// and printed.
	maxRestoreID = 200
)

func (v *validator) restore(r *Restore) {
	if !r.Restore {
		if r.ID != "" {
			v.warnf("restore.id", "Set restore.restore to true to request the restore, or remove restore.id.", "restore.id is set but restore.restore is false: nothing is restored")
		}
		return
	}
	n := r.SnapshotName
	switch {
	case n == "":
		v.errorf("restore.snapshot_name", "Name the snapshot to restore (see `rigger snapshot list`).", "restore is requested without a snapshot_name")
	case len(n) > maxSnapshotName || !snapshotNameRE.MatchString(n) || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".part"):
		v.errorf("restore.snapshot_name", "Snapshot names have letters, digits, '.', '_', '-', ':' and '+' only, start with a letter or digit, do not end in .json or .part and have at most 200 characters (see `rigger snapshot list`).",
			"%q cannot name a snapshot rigger restores", n)
	}
	id := r.ID
	switch {
	case id == "":
	case len(id) > maxRestoreID:
		v.errorf("restore.id", "Use a shorter id: a date, a ticket number.", "restore.id has %d characters, at most %d are allowed", len(id), maxRestoreID)
	case strings.TrimSpace(id) != id || strings.IndexFunc(id, unicode.IsControl) >= 0:
		v.errorf("restore.id", "Use printable characters without leading or trailing spaces.", "restore.id %q has control characters or leading or trailing spaces", id)
	}
}

func (v *validator) rigger(c *Cluster) {
	r := &c.Rigger
	if v.oneOf("rigger.ssh.host_key_policy", r.SSH.HostKeyPolicy, false, HostKeyStrict, HostKeyAcceptNew, HostKeyOff) && r.SSH.HostKeyPolicy == HostKeyOff {
		v.warnf("rigger.ssh.host_key_policy", "Anyone on the path to a node can impersonate it. Use accept-new to trust first keys and check them afterwards.", "SSH host keys are not checked")
	}
	if r.SSH.ConnectTimeout.Std() < time.Second {
		v.errorf("rigger.ssh.connect_timeout", "", "connect_timeout must be at least 1s")
	}
	if r.SSH.KeepaliveInterval.Std() < time.Second {
		v.errorf("rigger.ssh.keepalive_interval", "", "keepalive_interval must be at least 1s")
	}
	if r.MaxParallel < 0 {
		v.errorf("rigger.max_parallel", "", "max_parallel must be at least 1")
	}
	v.budget("rigger.max_removed_nodes", r.MaxRemovedNodes, 0)
	v.oneOf("rigger.stale_nodes", r.StaleNodes, false, StaleNodesReport, StaleNodesDelete)
	for i, o := range r.Addons.Exclude {
		p := fmt.Sprintf("rigger.addons.exclude[%d]", i)
		if o.Kind == "" || o.Name == "" {
			v.errorf(p, "Give the object's kind and name, and its namespace unless the kind is cluster-scoped.", "an excluded object needs a kind and a name")
		}
	}
}

// Kubernetes name syntax (k8s.io/apimachinery/pkg/util/validation), written
// out here so that spec stays free of Kubernetes dependencies.
var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	qualifiedRE  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

func dns1123SubdomainErrors(s string) []string {
	var errs []string
	if len(s) > 253 {
		errs = append(errs, "must be no more than 253 characters")
	}
	for label := range strings.SplitSeq(s, ".") {
		if !dns1123Label.MatchString(label) || len(label) > 63 {
			errs = append(errs, "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
			break
		}
	}
	return errs
}

func qualifiedNameErrors(s string) []string {
	name := s
	if prefix, n, ok := strings.Cut(s, "/"); ok {
		if prefix == "" || len(dns1123SubdomainErrors(prefix)) > 0 {
			return []string{"prefix part must be a DNS subdomain"}
		}
		name = n
	}
	switch {
	case name == "":
		return []string{"name part must be non-empty"}
	case len(name) > 63:
		return []string{"name part must be no more than 63 characters"}
	case !qualifiedRE.MatchString(name):
		return []string{"name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"}
	}
	return nil
}

func labelValueErrors(s string) []string {
	switch {
	case s == "":
		return nil
	case len(s) > 63:
		return []string{"must be no more than 63 characters"}
	case !qualifiedRE.MatchString(s):
		return []string{"must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"}
	}
	return nil
}

// validSocketPath: an absolute, clean path of at most 1024 bytes made of
// letters, digits and / . _ - + @, so that it reads the same in a shell
// line and in a bind mount.
func validSocketPath(p string) bool {
	if len(p) > 1024 || !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@", r)) {
			return false
		}
	}
	return true
}
