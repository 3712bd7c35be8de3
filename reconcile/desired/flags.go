package desired

import (
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
)

// flags is a component's command line being built: flag name (without the
// dashes) to its values; a flag with several values is repeated.
type flags map[string][]string

func (f flags) set(name, value string) { f[name] = []string{value} }

// options applies RKE's default service options of a component (one map
// of rkemeta.Options): each sets its flag, and an empty value removes the
// flag altogether, as RKE does ("if the value is empty, we remove that
// option"): the kubelet's enforce-node-allocatable is not passed at all.
func (f flags) options(opts map[string]string) {
	for k, v := range opts {
		if v == "" {
			delete(f, k)
			continue
		}
		f.set(k, v)
	}
}

// kubeletOptions is options with the two extra rules RKE applies to the
// kubelet's (used by its Windows options): a value of two single quotes
// sets the flag to the empty string, and a value starting with
// [PREFIX_PATH] is put under prefix_path.
func (f flags) kubeletOptions(opts map[string]string, prefix string) {
	for k, v := range opts {
		switch {
		case v == "":
			delete(f, k)
		case v == "''":
			f.set(k, "")
		case strings.HasPrefix(v, "[PREFIX_PATH]"):
			f.set(k, path.Join(prefix, strings.ReplaceAll(v, "[PREFIX_PATH]", "")))
		default:
			f.set(k, v)
		}
	}
}

// dropRemoved removes the flags that Kubernetes 1.minor no longer accepts
// from a component's command line (riggermeta.RemovedFlags; none before
// 1.33).
func (f flags) dropRemoved(component string, minor int) {
	for k := range f {
		if _, gone := riggermeta.Removed(component, k, minor); gone {
			delete(f, k)
		}
	}
}

// featureGates merges the gates rigger sets on a component of Kubernetes
// 1.minor (riggermeta.FeatureGates) into its --feature-gates, each unless
// the flag names that gate already (the cluster's extra_args win).
func (f flags) featureGates(component string, minor int) {
	const name = "feature-gates"
	for _, g := range riggermeta.FeatureGates() {
		if g.Component != component || minor < g.Minor {
			continue
		}
		gate := g.Gate + "=" + strconv.FormatBool(g.Enabled)
		v := f[name]
		switch {
		case len(v) == 0 || v[len(v)-1] == "":
			f.set(name, gate)
		case !slices.ContainsFunc(v, func(s string) bool { return namesGate(s, g.Gate) }):
			v[len(v)-1] += "," + gate
		}
	}
}

// namesGate reports whether a --feature-gates value (A=true,B=false) sets
// gate.
func namesGate(value, gate string) bool {
	for kv := range strings.SplitSeq(value, ",") {
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == gate {
			return true
		}
	}
	return false
}

// appendValue appends suffix to the single value of a flag that is set,
// as RKE appends admission plugins to its enable-admission-plugins.
func (f flags) appendValue(name, suffix string) {
	if v, ok := f[name]; ok && len(v) == 1 {
		f[name] = []string{v[0] + suffix}
	}
}

// extra applies a component's extra_args (each overrides rigger's value of
// the same flag) and then its extra_args_array (each replaces the flag with
// one occurrence per value; RKE would append them and keep its own too).
func (f flags) extra(s spec.BaseService) {
	for k, v := range s.ExtraArgs {
		f.set(k, v)
	}
	for k, v := range s.ExtraArgsArray {
		f[k] = slices.Clone(v)
	}
}

// render returns `--flag=value` for every value, sorted by flag name; the
// values of a repeated flag keep their order.
func (f flags) render() []string {
	names := make([]string, 0, len(f))
	n := 0
	for k, v := range f {
		names = append(names, k)
		n += len(v)
	}
	slices.Sort(names)
	out := make([]string, 0, n)
	for _, k := range names {
		for _, v := range f[k] {
			out = append(out, "--"+k+"="+v)
		}
	}
	return out
}

// hostPath puts a node path under prefix_path, as RKE does for the paths
// it owns (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, …).
func hostPath(prefix, p string) string {
	if prefix == "" {
		return p
	}
	return path.Join(prefix, p)
}

// uniq drops repeated entries, keeping the first (RKE's getUniqStringList):
// an extra bind or env that repeats one of rigger's is given once.
func uniq(list []string) []string {
	out := make([]string, 0, len(list))
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// joinHostPort is net.JoinHostPort for addresses that may be IPv6.
func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
