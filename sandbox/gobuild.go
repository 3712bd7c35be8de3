package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// goBuildFormat changes when the way goPrograms are built changes, so that
// cached builds are made anew.
const goBuildFormat = "rigger-sandbox-gobuild/1"

// goBuildProgressEvery is how often a long Go build reports.
const goBuildProgressEvery = 20 * time.Second

// goProgram is a program the sandbox builds from the Go module proxy, in
// the module's own directory (the Dir of `go mod download -json`), with
// the module's own go.mod and go.sum (-mod=readonly) and the local
// toolchain: the build is what upstream's would be, without a registry.
type goProgram struct {
	// Name names the build in the cache and in progress lines.
	Name    string
	Module  string
	Version string
	// Packages are built, relative to the module's directory ("." or
	// "./plugins/main/bridge"). Each gives one binary, named as go build
	// names it: the last element of its import path.
	Packages []string
	// CGO builds with cgo; LDFlags then links statically, since the
	// images hold no libraries.
	CGO  bool
	Tags []string
	// LDFlags are the -ldflags besides "-s -w" (version stamps).
	LDFlags []string
	// Patches change the module's source for this machine: the build then
	// runs in a patched copy of the module (the module cache keeps what was
	// downloaded).
	Patches []sourcePatch
}

// sourcePatch replaces Old, which must occur exactly once, with New in the
// module's File (a path relative to the module's directory). Why says why
// this machine needs it.
type sourcePatch struct {
	File, Old, New, Why string
}

// Binaries are the names of the files the build leaves.
func (g goProgram) Binaries() []string {
	out := make([]string, len(g.Packages))
	for i, p := range g.Packages {
		if p == "." {
			out[i] = path.Base(g.Module)
		} else {
			out[i] = path.Base(p)
		}
	}
	return out
}

// ldflags is the -ldflags value of the build.
func (g goProgram) ldflags() string {
	f := []string{"-s", "-w"}
	if g.CGO {
		f = append(f, "-extldflags=-static")
	}
	return strings.Join(append(f, g.LDFlags...), " ")
}

// buildArgs is the `go build` command line, writing into out/.
func (g goProgram) buildArgs(out string) []string {
	args := []string{"build", "-v", "-trimpath"}
	if len(g.Tags) > 0 {
		args = append(args, "-tags", strings.Join(g.Tags, ","))
	}
	args = append(args, "-ldflags", g.ldflags(), "-o", out+"/")
	return append(args, g.Packages...)
}

// buildEnv is the environment of the build, on top of the process's.
func (g goProgram) buildEnv() []string {
	cgo := "CGO_ENABLED=0"
	if g.CGO {
		cgo = "CGO_ENABLED=1"
	}
	return []string{cgo, "GOFLAGS=-mod=readonly -buildvcs=false", "GOTOOLCHAIN=local", "GOWORK=off"}
}

// key hashes everything that decides the build's output but the toolchain:
// module, version, packages, flags and environment.
func (g goProgram) key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s@%s\n%q\n%q\n", goBuildFormat, g.Module, g.Version, g.Packages, g.buildEnv())
	fmt.Fprintf(h, "%q\n", g.buildArgs("OUT"))
	for _, p := range g.Patches {
		fmt.Fprintf(h, "patch %q %q %q\n", p.File, p.Old, p.New)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cacheDir is where the build's binaries live in cache:
// <cache>/gobuild/<name>-<version>-<key>.
func (g goProgram) cacheDir(cache string) string {
	return filepath.Join(cache, "gobuild", g.Name+"-"+g.Version+"-"+g.key()[:12])
}

// Versions of the add-on programs and of the runtime the sandbox builds.
const (
	FlannelVersion       = "v0.26.1"
	FlannelCNIVersion    = "v0.9.1" // containernetworking/plugins' flannel plugin
	CNIPluginsVersion    = "v1.6.2"
	CoreDNSVersion       = "v1.11.3"
	MetricsServerVersion = "v0.7.2"
	CRIDockerdVersion    = "v0.4.0"
)

// The programs the add-on images and the rke-tools stand-in are made of.
var (
	flannelProgram = goProgram{
		Name: "flannel", Module: "github.com/flannel-io/flannel", Version: FlannelVersion,
		Packages: []string{"."},
		// The udp backend needs cgo.
		CGO:     true,
		Tags:    []string{"netgo", "osusergo"},
		LDFlags: []string{"-X github.com/flannel-io/flannel/pkg/version.Version=" + FlannelVersion},
	}
	// flannelCNIProgram is the flannel CNI plugin: flannel-io/cni-plugin is
	// not served by the proxy; containernetworking/plugins had it until v1.0.
	flannelCNIProgram = goProgram{
		Name: "cni-flannel", Module: "github.com/containernetworking/plugins", Version: FlannelCNIVersion,
		Packages: []string{"./plugins/meta/flannel"},
		LDFlags:  []string{"-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=" + FlannelCNIVersion},
	}
	cniPluginsProgram = goProgram{
		Name: "cni-plugins", Module: "github.com/containernetworking/plugins", Version: CNIPluginsVersion,
		Packages: []string{"./plugins/main/bridge", "./plugins/main/loopback", "./plugins/ipam/host-local", "./plugins/meta/portmap", "./plugins/meta/bandwidth"},
		LDFlags:  []string{"-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=" + CNIPluginsVersion},
	}
	coreDNSProgram = goProgram{
		Name: "coredns", Module: "github.com/coredns/coredns", Version: CoreDNSVersion,
		Packages: []string{"."},
	}
	metricsServerProgram = goProgram{
		Name: "metrics-server", Module: "sigs.k8s.io/metrics-server", Version: MetricsServerVersion,
		Packages: []string{"./cmd/metrics-server"},
		LDFlags:  []string{"-X k8s.io/client-go/pkg/version.gitVersion=" + MetricsServerVersion},
	}
	criDockerdProgram = goProgram{
		Name: "cri-dockerd", Module: "github.com/Mirantis/cri-dockerd", Version: CRIDockerdVersion,
		Packages: []string{"."},
		LDFlags:  []string{"-X github.com/Mirantis/cri-dockerd/cmd/version.Version=" + strings.TrimPrefix(CRIDockerdVersion, "v")},
		Patches:  criDockerdDocker2010Patches(),
	}
)

// criDockerdDocker2010Patches make cri-dockerd v0.4.0 work with the
// sandbox's engine, Debian 12's Docker 20.10 (API 1.41); the module proxy
// serves no older cri-dockerd (RKE's rke-tools ships a 0.3 release, which
// works with Docker 20.10). v0.4.0 refuses an engine older than API 1.42,
// and creates containers with HostConfig.Mounts whose BindOptions.
// CreateMountpoint (API 1.42) makes a missing hostPath directory: Docker
// 20.10 ignores that option and fails ("bind source path does not exist",
// e.g. flannel's /run/flannel). The patches lower the minimum to 1.41 and
// pass the same binds as HostConfig.Binds, which Docker creates when missing,
// as cri-dockerd 0.3 did.
func criDockerdDocker2010Patches() []sourcePatch {
	return []sourcePatch{
		{
			File: "libdocker/client.go",
			Old:  `MinimumDockerAPIVersion = "1.42.0"`,
			New:  `MinimumDockerAPIVersion = "1.41.0"`,
			Why:  "cri-dockerd v0.4.0 refuses an engine older than Docker 23 (API 1.42); the sandbox's is Debian 12's Docker 20.10 (API 1.41)",
		},
		{
			File: "libdocker/helpers.go",
			Old:  "func isSingleFileMount(",
			New: `// GenerateLegacyBinds (added by rigger sandbox) is mounts as
// HostConfig.Binds, which Docker 20.10 creates when the host path is missing.
func GenerateLegacyBinds(mounts []dockermount.Mount) []string {
	binds := make([]string, 0, len(mounts))
	for _, m := range mounts {
		var opts []string
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		if m.BindOptions != nil && m.BindOptions.Propagation != "" {
			opts = append(opts, string(m.BindOptions.Propagation))
		}
		b := m.Source + ":" + m.Target
		if len(opts) > 0 {
			b += ":" + strings.Join(opts, ",")
		}
		binds = append(binds, b)
	}
	return binds
}

func isSingleFileMount(`,
			Why: "Docker 20.10 ignores BindOptions.CreateMountpoint (API 1.42): a bind whose host path is missing fails",
		},
		{
			File: "core/container_create.go",
			Old:  "Mounts: mountBindings,",
			New:  "Binds: libdocker.GenerateLegacyBinds(mountBindings),",
			Why:  "pods' hostPath volumes as Binds, which Docker 20.10 creates when missing",
		},
	}
}

// goPrograms are every program the sandbox builds besides Kubernetes, in
// build order (the quick ones first).
func goPrograms() []goProgram {
	return []goProgram{flannelCNIProgram, cniPluginsProgram, flannelProgram, coreDNSProgram, metricsServerProgram, criDockerdProgram}
}

// builtPrograms maps each goProgram's Name to the cache directory that
// holds its binaries.
type builtPrograms map[string]string

// bin is the path of binary bin of program g.
func (b builtPrograms) bin(g goProgram, bin string) string {
	return filepath.Join(b[g.Name], bin)
}

// ensureGoPrograms builds the programs that the cache lacks, one after the
// other, under one lock (two sandboxes building at once would only share
// the two cores), and returns where each one's binaries are.
func ensureGoPrograms(ctx context.Context, cache string, progs []goProgram, p *progress) (builtPrograms, error) {
	out := builtPrograms{}
	var missing []goProgram
	for _, g := range progs {
		out[g.Name] = g.cacheDir(cache)
		if !complete(g.cacheDir(cache)) {
			missing = append(missing, g)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	lockPath := filepath.Join(cache, "gobuild.lock")
	lock, err := lockFile(ctx, lockPath, func() { p.info("waiting for another build of the add-on programs (%s)", lockPath) })
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	if _, err := exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("building the add-on programs needs the Go toolchain: %w", err)
	}
	for _, g := range missing {
		if complete(g.cacheDir(cache)) { // built by whoever held the lock
			continue
		}
		if err := buildGoProgram(ctx, cache, g, p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// complete says whether dir holds a finished build.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}

// buildGoProgram downloads g's module and builds it into its cache
// directory (a temporary one renamed into place when done).
func buildGoProgram(ctx context.Context, cache string, g goProgram, p *progress) error {
	what := g.Name + " " + g.Version
	start := time.Now()
	dir, err := moduleDir(ctx, g.Module, g.Version)
	if err != nil {
		return fmt.Errorf("build %s: %w", what, err)
	}
	final := g.cacheDir(cache)
	tmp := final + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	p.info("building %s (%s@%s) from the Go module proxy", what, g.Module, g.Version)
	if len(g.Patches) > 0 {
		src := final + ".src"
		defer os.RemoveAll(src)
		if err := patchedCopy(dir, src, g.Patches); err != nil {
			return fmt.Errorf("build %s: %w", what, err)
		}
		for _, pt := range g.Patches {
			p.info("%s: patched %s: %s", what, pt.File, pt.Why)
		}
		dir = src
	}
	logPath := filepath.Join(cache, "gobuild", g.Name+"-build.log")
	if err := runGoBuild(ctx, goBuildRun{dir: dir, env: g.buildEnv(), args: g.buildArgs(tmp), log: logPath, what: what}, p); err != nil {
		return err
	}
	for _, b := range g.Binaries() {
		if err := checkStaticBinary(filepath.Join(tmp, b)); err != nil {
			return fmt.Errorf("build %s: %w", what, err)
		}
	}
	stamp := fmt.Sprintf("%s@%s built %s in %s\n", g.Module, g.Version, time.Now().UTC().Format(time.RFC3339), time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(stamp), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	p.info("built %s in %s", what, time.Since(start).Round(time.Second))
	return nil
}

// patchedCopy copies the module's directory to work (go build refuses to
// overlay files of the module cache) and applies the patches there.
func patchedCopy(moduleDir, work string, patches []sourcePatch) error {
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.CopyFS(work, os.DirFS(moduleDir)); err != nil {
		return fmt.Errorf("copy %s: %w", moduleDir, err)
	}
	for _, pt := range patches {
		path := filepath.Join(work, pt.File)
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("patch %s: %w", pt.File, err)
		}
		if n := strings.Count(string(b), pt.Old); n != 1 {
			return fmt.Errorf("patch %s: %q occurs %d times, want once", pt.File, pt.Old, n)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), pt.Old, pt.New, 1)), 0o644); err != nil {
			return fmt.Errorf("patch %s: %w", pt.File, err)
		}
	}
	return nil
}

// moduleDir downloads module@version into the module cache (through the
// Go module proxy) and returns its directory there.
func moduleDir(ctx context.Context, module, version string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	// Outside any module: no go.mod or go.work of the caller applies.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	var info struct {
		Dir   string
		Error string
	}
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("download %s@%s: %s", module, version, info.Error)
	}
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("download %s@%s: %w %s", module, version, err, msg)
	}
	if info.Dir == "" {
		return "", fmt.Errorf("download %s@%s: go mod download gave no directory", module, version)
	}
	return info.Dir, nil
}

// goBuildRun is one `go` command of a long build.
type goBuildRun struct {
	dir  string   // working directory
	env  []string // on top of the process's environment
	args []string // go's arguments; -v makes it list the packages it compiles
	log  string   // the full output goes here
	what string   // names the build in progress lines
}

// runGoBuild runs r, reporting how many packages it compiled every
// goBuildProgressEvery; the error carries the log's last lines.
// buildGOGC is the garbage collector's target of the compilers and linkers
// of the sandbox's builds, unless GOGC is set: they allocate much and keep
// little, and collecting a quarter as often took 15 to 20 % less CPU to
// build Kubernetes' scheduler or etcd from an empty build cache (1.3 GB
// at most in one compiler instead of 0.5 GB).
const buildGOGC = "400"

func runGoBuild(ctx context.Context, r goBuildRun, p *progress) error {
	if err := os.MkdirAll(filepath.Dir(r.log), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(r.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "go", r.args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	if os.Getenv("GOGC") == "" {
		cmd.Env = append(cmd.Env, "GOGC="+buildGOGC)
	}
	cmd.Stdout = logf
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	var compiled atomic.Int64
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if !strings.HasPrefix(line, "go: ") { // "go: downloading …"
				compiled.Add(1)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	if err := cmd.Start(); err != nil {
		pw.Close()
		<-scanned
		return fmt.Errorf("build %s: %w", r.what, err)
	}
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(goBuildProgressEvery)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.info("building %s: %d packages compiled, %s", r.what, compiled.Load(), time.Since(start).Round(time.Second))
			}
		}
	}()
	err = cmd.Wait()
	close(stop)
	<-ticked
	pw.Close()
	<-scanned
	if err != nil {
		return fmt.Errorf("build %s: %w: %s", r.what, err, logTail(r.log, 10))
	}
	return nil
}
