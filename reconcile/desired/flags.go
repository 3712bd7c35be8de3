package desired

import (
	"path"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec"
)

// flags is a component's command line being built: flag name (without the
// dashes) to its values; a flag with several values is repeated.
type flags map[string][]string

func (f flags) set(name, value string) { f[name] = []string{value} }

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
