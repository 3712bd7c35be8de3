package desired

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// EnvKubeBinDirs lists directories (separated as PATH is) that each hold
// the five Kubernetes binaries of one version, the directory named for the
// version: /var/cache/rigger/kube/v1.32.13.
const EnvKubeBinDirs = "RIGGER_KUBE_BIN_DIRS"

// helpFlag is a flag in a component's --help: `  --name string` or
// `  -v, --v Level`.
var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)`)

// TestFlagsAgainstBinaries renders a cluster's desired containers at the
// version of each directory of RIGGER_KUBE_BIN_DIRS (with RIGGER_E2E and
// without it: every version the sandbox built) and checks every flag
// rigger would pass to each component against that version's binary: the
// flag must be listed by `<binary> --help`. A flag the help does not list
// is tried on the binary itself (`--flag=value --version`): one it accepts
// is deprecated and hidden, and is logged, not failed, since the component
// starts with it; one it refuses fails the test.
func TestFlagsAgainstBinaries(t *testing.T) {
	dirs := filepath.SplitList(os.Getenv(EnvKubeBinDirs))
	if len(dirs) == 0 && sandboxtest.Enabled() {
		// The sandbox's builds: the default's always (make test builds it
		// first), the others' once built (make test-long).
		for _, r := range sandbox.KubeReleases() {
			dir, built := sandbox.KubeBinaries(sandbox.Options{}, r.Kubernetes)
			switch {
			case built:
				dirs = append(dirs, dir)
			case r.Kubernetes == sandbox.KubernetesVersion:
				t.Fatalf("the sandbox's Kubernetes %s is not built in %s: run `rigger sandbox images` (make test does)", r.Kubernetes, dir)
			}
		}
	}
	if len(dirs) == 0 {
		t.Skipf("%s is not set: no Kubernetes binaries to check rigger's flags against", EnvKubeBinDirs)
	}
	for _, dir := range dirs {
		version := filepath.Base(filepath.Clean(dir))
		t.Run(version, func(t *testing.T) {
			passed := flagsAt(t, version)
			for _, component := range []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet, KubeProxy} {
				bin := filepath.Join(dir, component)
				if _, err := os.Stat(bin); err != nil {
					t.Fatalf("%s: %v", component, err)
				}
				checkFlags(t, component, version, bin, passed[component])
				// The flag is listed, but a gate it names may not be:
				// the component parses the gates with its flags.
				if gates, ok := passed[component]["feature-gates"]; ok {
					if out, err := runBinary(t, bin, "--feature-gates="+gates, "--version"); err != nil {
						t.Errorf("%s %s: rigger passes --feature-gates=%s, which %s refuses: %v\n%s", component, version, gates, component, err, out)
					}
				}
			}
		})
	}
	// etcd's flags do not follow the Kubernetes version: each etcd the
	// sandbox built is checked against those of RKE's default.
	passed := map[string]map[string]string{}
	for _, r := range sandbox.KubeReleases() {
		dir, built := sandbox.EtcdBinaries(sandbox.Options{}, r.Etcd)
		if !built || passed[r.Etcd] != nil {
			continue
		}
		passed[r.Etcd] = map[string]string{}
		t.Run("etcd "+r.Etcd, func(t *testing.T) {
			checkFlags(t, Etcd, r.Etcd, filepath.Join(dir, "etcd"), flagsAt(t, sandbox.KubernetesVersion)[Etcd])
		})
	}
}

// checkFlags checks each flag of passed (name → value) against component's
// binary bin of version: listed by its --help, or accepted by it
// (deprecated and hidden: logged).
func checkFlags(t *testing.T, component, version, bin string, passed map[string]string) {
	t.Helper()
	if len(passed) == 0 {
		t.Fatalf("rigger passes %s no flag: nothing to check", component)
	}
	listed := helpFlags(t, bin)
	for _, name := range slices.Sorted(maps.Keys(passed)) {
		if listed[name] {
			continue
		}
		arg := "--" + name + "=" + passed[name]
		if out, err := runBinary(t, bin, arg, "--version"); err != nil {
			t.Errorf("%s %s: rigger passes %s, which %s neither lists in --help nor accepts: %v\n%s", component, version, arg, component, err, out)
			continue
		}
		t.Logf("%s %s: rigger passes --%s, which --help does not list (deprecated): a later version may remove it", component, version, name)
	}
}

// flagsAt renders a cluster whose components run Kubernetes version (the
// kubernetes image's tag names it) and returns, per component, every flag
// rigger passes on any node with its value; the kubelet's include the
// --cgroup-driver that rke-tools' entrypoint adds.
func flagsAt(t *testing.T, version string) map[string]map[string]string {
	t.Helper()
	sv, err := rkemeta.ParseVersion(version)
	if err != nil {
		t.Fatalf("directory %s is not named for a Kubernetes version: %v", version, err)
	}
	// The newest version of the table of that minor, else RKE's default;
	// the image's tag makes the components run version's flags.
	clusterVersion := spec.DefaultKubernetesVersion
	for _, v := range riggermeta.AllVersions() {
		if rkemeta.Series(v) == fmt.Sprintf("v%d.%d", sv.Major, sv.Minor) {
			clusterVersion = v
		}
	}
	extra := "system_images: {kubernetes: registry.example.com/hyperkube:" + version + "}\n" +
		"ingress: {provider: none}\n" +
		"cloud_provider: {name: external}\n" +
		"services:\n" +
		"  kube-api:\n" +
		"    audit_log: {enabled: true}\n" +
		"    secrets_encryption_config: {enabled: true}\n" +
		"    event_rate_limit: {enabled: true}\n" +
		"    always_pull_images: true\n" +
		"  kubelet: {generate_serving_certificate: true}\n"
	c := loadAt(t, "three-role", clusterVersion, extra)
	d, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, n := range d.Nodes {
		for _, ct := range n.Containers {
			args := ct.Args
			if ct.Name == Kubelet && len(args) > 0 && args[0] == Kubelet {
				args = args[1:] // rke-tools' entrypoint runs `kubelet <args>`
			}
			if out[ct.Name] == nil {
				out[ct.Name] = map[string]string{}
			}
			for _, a := range args {
				name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				out[ct.Name][name] = value
			}
		}
	}
	if out[Kubelet] != nil {
		out[Kubelet]["cgroup-driver"] = "cgroupfs"
	}
	return out
}

// helpFlags returns the flags `bin --help` lists.
func helpFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := runBinary(t, bin, "--help")
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, out)
	}
	listed := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
		listed[m[1]] = true
	}
	if len(listed) < 20 {
		t.Fatalf("%s --help lists %d flags: not a help text?\n%s", bin, len(listed), out)
	}
	return listed
}

// runBinary runs a binary for at most a minute, with no environment of ours
// that could change what it does, and returns its output.
func runBinary(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}
