package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kubeCommands are the Kubernetes commands of the hyperkube image.
func kubeCommands() []string {
	return []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}
}

// etcdCommands are the etcd commands of the etcd image: rigger's restore
// runs etcdutl for etcd 3.6 and later, etcdctl before.
func etcdCommands() []string { return []string{"etcd", "etcdctl", "etcdutl"} }

// kubeBuildArgs is the `go build` of the Kubernetes commands, static
// (CGO_ENABLED=0 in the environment), into out, with the version stamps
// that Kubernetes' own build sets (the API server reports them, and the
// kubelet's version is checked against the API server's).
func kubeBuildArgs(out, version string) []string {
	major, minor := "", ""
	if parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	var ld []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ld = append(ld,
			"-X", pkg+".gitVersion="+version,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean",
			"-X", pkg+".buildDate=1970-01-01T00:00:00Z",
		)
	}
	args := []string{"build", "-v", "-trimpath", "-ldflags", "-s -w " + strings.Join(ld, " "), "-o", out + "/"}
	for _, c := range kubeCommands() {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	return args
}

// pauseBuildArgs is the `go build` of the pause program, in its module
// (hack/kube-build/pause), into out.
func pauseBuildArgs(out string) []string {
	return []string{"build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(out, "pause"), "."}
}

// etcdModules are the modules of the etcd commands, in the order of
// etcdCommands: go build names etcd's server "server", and the build
// renames it.
var etcdModules = []string{"go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/etcdctl/v3", "go.etcd.io/etcd/etcdutl/v3"}

// etcdBuildArgs is the `go build` of etcd, etcdctl and etcdutl, static
// (CGO_ENABLED=0 in the environment), into out. etcd's version is a
// constant of its api module: no stamp needed.
func etcdBuildArgs(out string) []string {
	return append([]string{"build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", out + "/"}, etcdModules...)
}

// kubeModuleVersion reads the k8s.io/kubernetes version that a kube-build
// go.mod requires.
func kubeModuleVersion(gomod string) (string, error) {
	v := moduleRequires(gomod)["k8s.io/kubernetes"]
	if v == "" {
		return "", fmt.Errorf("go.mod requires no k8s.io/kubernetes")
	}
	return v, nil
}

// etcdModuleVersion reads the etcd version that an etcd-build go.mod
// requires: the same for each of etcdModules.
func etcdModuleVersion(gomod string) (string, error) {
	req := moduleRequires(gomod)
	v := req[etcdModules[0]]
	for _, m := range etcdModules {
		if req[m] == "" || req[m] != v {
			return "", fmt.Errorf("go.mod requires %s %q and %s %q: want one etcd version for %s", etcdModules[0], v, m, req[m], strings.Join(etcdModules, ", "))
		}
	}
	return v, nil
}

// moduleRequires maps each module a go.mod requires (in a require line or
// block) to its version.
func moduleRequires(gomod string) map[string]string {
	req := map[string]string{}
	block := false
	for _, line := range strings.Split(gomod, "\n") {
		line, _, _ = strings.Cut(line, "//")
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			req[f[0]] = f[1]
		}
	}
	return req
}

// versionBuild is the build of one version of Kubernetes or etcd from its
// module checked in under hack/ (hack/kube-build/v1.32.13), into
// <cache>/<cacheSub>/<version>.
type versionBuild struct {
	what     string // "Kubernetes", "etcd": progress lines and errors
	version  string
	cacheSub string   // "kube", "etcd"
	hackDir  string   // "kube-build", "etcd-build"
	binaries []string // what the build leaves in its directory
	estimate string   // how long a cold build takes, for the progress line
	// moduleVersion reads the version the module's go.mod pins.
	moduleVersion func(gomod string) (string, error)
	// build builds the binaries of source (hack/<hackDir>) into out.
	build func(ctx context.Context, source, out string, p *progress) error
}

func kubeBuild(version string) versionBuild {
	return versionBuild{
		what: "Kubernetes", version: version, cacheSub: "kube", hackDir: "kube-build",
		binaries:      append(kubeCommands(), "pause"),
		estimate:      "about 9 minutes on a cold Go cache",
		moduleVersion: kubeModuleVersion,
		build: func(ctx context.Context, source, out string, p *progress) error {
			log := filepath.Join(filepath.Dir(out), "kube-build-"+version+".log")
			if err := runGoBuild(ctx, goBuildRun{
				dir:  filepath.Join(source, version),
				env:  []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off"},
				args: kubeBuildArgs(out, version),
				log:  log,
				what: "Kubernetes " + version,
			}, p); err != nil {
				return err
			}
			return runGoBuild(ctx, goBuildRun{
				dir:  filepath.Join(source, "pause"),
				env:  []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off"},
				args: pauseBuildArgs(out),
				log:  filepath.Join(filepath.Dir(out), "pause-build.log"),
				what: "pause",
			}, p)
		},
	}
}

func etcdBuild(version string) versionBuild {
	return versionBuild{
		what: "etcd", version: version, cacheSub: "etcd", hackDir: "etcd-build",
		binaries:      etcdCommands(),
		estimate:      "about 2 minutes on a cold Go cache",
		moduleVersion: etcdModuleVersion,
		build: func(ctx context.Context, source, out string, p *progress) error {
			if err := runGoBuild(ctx, goBuildRun{
				dir:  filepath.Join(source, version),
				env:  []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off"},
				args: etcdBuildArgs(out),
				log:  filepath.Join(filepath.Dir(out), "etcd-build-"+version+".log"),
				what: "etcd " + version,
			}, p); err != nil {
				return err
			}
			return os.Rename(filepath.Join(out, "server"), filepath.Join(out, "etcd"))
		},
	}
}

// ensureKubeBinaries returns the cache directory that holds the commands
// of Kubernetes version and pause, building them first when they are not
// there.
func ensureKubeBinaries(ctx context.Context, cache, source, version string, p *progress) (string, error) {
	return ensureVersionBuild(ctx, cache, source, kubeBuild(version), p)
}

// ensureEtcdBinaries returns the cache directory that holds etcd,
// etcdctl and etcdutl of etcd version, building them first when they are
// not there.
func ensureEtcdBinaries(ctx context.Context, cache, source, version string, p *progress) (string, error) {
	return ensureVersionBuild(ctx, cache, source, etcdBuild(version), p)
}

// ensureVersionBuild returns the cache directory of b, building it first
// when it is not there. A lock in the cache keeps two builds (two test
// packages) from colliding: the second waits and finds the first's result.
// source is the hack directory of the rigger repository; empty: found
// above the working directory.
func ensureVersionBuild(ctx context.Context, cache, source string, b versionBuild, p *progress) (string, error) {
	name := b.what + " " + b.version
	dir := filepath.Join(cache, b.cacheSub, b.version)
	if complete(dir) {
		return dir, nil
	}
	lock, err := lockFile(ctx, dir+".lock", func() { p.info("waiting for another build of %s (%s.lock)", name, dir) })
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	if complete(dir) {
		return dir, nil
	}

	if source == "" {
		source, err = findUp(func(d string) bool {
			_, err := os.Stat(filepath.Join(d, "hack", b.hackDir, b.version, "go.mod"))
			return err == nil
		})
		if err != nil {
			return "", fmt.Errorf("%s is not in %s yet and hack/%s/%s was not found to build it: run from the rigger repository or pass --build-src: %w", name, dir, b.hackDir, b.version, err)
		}
		source = filepath.Join(source, "hack")
	}
	source = filepath.Join(source, b.hackDir)
	gomod, err := os.ReadFile(filepath.Join(source, b.version, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("%s build module: %w", name, err)
	}
	v, err := b.moduleVersion(string(gomod))
	if err != nil {
		return "", fmt.Errorf("%s/%s/go.mod: %w", source, b.version, err)
	}
	if v != b.version {
		return "", fmt.Errorf("%s/%s/go.mod pins %s %s, not %s: its directory and its go.mod change together", source, b.version, b.what, v, b.version)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("building %s needs the Go toolchain: %w", name, err)
	}

	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	p.info("building %s from the Go module proxy (%s/%s): %s, once", name, source, b.version, b.estimate)
	start := time.Now()
	if err := b.build(ctx, source, tmp, p); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	for _, c := range b.binaries {
		if err := checkStaticBinary(filepath.Join(tmp, c)); err != nil {
			return "", fmt.Errorf("build %s: %s: %w", name, c, err)
		}
	}
	stamp := fmt.Sprintf("%s built %s in %s\n", name, time.Now().UTC().Format(time.RFC3339), time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(stamp), 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	p.info("built %s in %s", name, time.Since(start).Round(time.Second))
	return dir, nil
}
