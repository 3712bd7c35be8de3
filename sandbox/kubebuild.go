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

// kubeBuildArgs is the `go build` of the Kubernetes commands and the pause
// program, static (CGO_ENABLED=0 in the environment), into out, with the
// version stamps that Kubernetes' own build sets (the API server reports
// them, and the kubelet's version is checked against the API server's).
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
	return append(args, "./pause")
}

// kubeModuleVersion reads the k8s.io/kubernetes version that a kube-build
// go.mod requires.
func kubeModuleVersion(gomod string) (string, error) {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("go.mod requires no k8s.io/kubernetes")
}

// ensureKubeBinaries returns the cache directory that holds the Kubernetes
// commands and pause, building them first when they are not there. A lock
// in the cache keeps two builds (two test packages) from colliding: the
// second waits and finds the first's result.
func ensureKubeBinaries(ctx context.Context, cache, source string, p *progress) (string, error) {
	dir := filepath.Join(cache, "kube", KubernetesVersion)
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	lock, err := lockFile(ctx, dir+".lock", func() { p.info("waiting for another build of Kubernetes %s (%s.lock)", KubernetesVersion, dir) })
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}

	if source == "" {
		source, err = findUp(func(d string) bool {
			_, err := os.Stat(filepath.Join(d, "hack", "kube-build", "go.mod"))
			return err == nil
		})
		if err != nil {
			return "", fmt.Errorf("the Kubernetes binaries are not in %s yet and hack/kube-build was not found to build them: run from the rigger repository or pass --kube-src: %w", dir, err)
		}
		source = filepath.Join(source, "hack", "kube-build")
	}
	gomod, err := os.ReadFile(filepath.Join(source, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("kube-build module: %w", err)
	}
	if v, err := kubeModuleVersion(string(gomod)); err != nil || v != KubernetesVersion {
		return "", fmt.Errorf("%s/go.mod pins k8s.io/kubernetes %q, this rigger wants %s: change them together", source, v, KubernetesVersion)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("building the Kubernetes components needs the Go toolchain: %w", err)
	}

	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	p.info("building Kubernetes %s from the Go module proxy (%s): about 9 minutes on a cold Go cache, once", KubernetesVersion, source)
	start := time.Now()
	if err := runKubeBuild(ctx, source, tmp, p); err != nil {
		return "", err
	}
	for _, c := range append(kubeCommands(), "pause") {
		if _, err := os.Stat(filepath.Join(tmp, c)); err != nil {
			return "", fmt.Errorf("build Kubernetes: %s missing after the build: %w", c, err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	p.info("built Kubernetes %s in %s", KubernetesVersion, time.Since(start).Round(time.Second))
	return dir, nil
}

// runKubeBuild runs the build, reporting progress; the log goes to
// out/../kube-build.log.
func runKubeBuild(ctx context.Context, source, out string, p *progress) error {
	return runGoBuild(ctx, goBuildRun{
		dir:  source,
		env:  []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false"},
		args: kubeBuildArgs(out, KubernetesVersion),
		log:  filepath.Join(filepath.Dir(out), "kube-build.log"),
		what: "Kubernetes",
	}, p)
}
