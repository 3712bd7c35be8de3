package sandbox

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/image"
	"golang.org/x/sync/errgroup"

	"github.com/rigger/rigger/internal/atomicfile"
)

// Versions and refs of the images the sandbox builds (the versions of
// Kubernetes and etcd are in versions.go).
const (
	// PauseVersion tags the pause image (the kubelet's pod sandbox).
	PauseVersion = "3.10"

	RiggerImage = "rigger/rigger:dev"
	// ToolsImage is the helper image (system_images.alpine): a shell and
	// the file tools rigger's cleanup runs, as rancher/rke-tools has them.
	ToolsImage = "rigger-sandbox/tools:busybox"
	// HyperkubeImage and EtcdImage are the default release's; HyperkubeRef
	// and EtcdRef name those of the others.
	HyperkubeImage = hyperkubeRepo + ":" + KubernetesVersion
	EtcdImage      = etcdImageRepo + ":" + EtcdVersion
	PauseImage     = "rigger-sandbox/pause:" + PauseVersion
	hyperkubeRepo  = "rigger-sandbox/hyperkube"
	etcdImageRepo  = "rigger-sandbox/etcd"

	// contentLabel carries the key of an image's inputs: an image whose
	// label matches is not imported again.
	contentLabel = "io.rigger.sandbox.content"
	// archiveFormat changes when the way archives are made changes, so that
	// cached ones are made anew.
	archiveFormat = "rigger-sandbox-rootfs/1"
)

// builtImage is an image rootfs archive in the cache, ready to import.
type builtImage struct {
	Ref     string
	Archive string   // rootfs tarball
	Key     string   // hash of the inputs; the content label
	Changes []string // Dockerfile instructions applied on import
	// SystemImages are the RKE system_images keys this image serves.
	SystemImages []string
	// Rigger says the image holds rigger's own binary, which changes with
	// every build of rigger: the engine store leaves it out, and each node
	// imports it.
	Rigger bool
}

// imageSpec says what goes into an image.
type imageSpec struct {
	ref          string
	files        []imageFile
	dirs         []imageDir
	links        []imageLink
	changes      []string
	systemImages []string
	rigger       bool // holds rigger's binary (builtImage.Rigger)
}

// imageFile is a file of an image: a copy of src, or content when src is
// empty (a script the sandbox writes).
type imageFile struct {
	src, dst string
	content  string
	mode     int64
}

// open returns the file's content.
func (f imageFile) open() (io.ReadCloser, int64, error) {
	if f.src == "" {
		return io.NopCloser(strings.NewReader(f.content)), int64(len(f.content)), nil
	}
	r, err := os.Open(f.src)
	if err != nil {
		return nil, 0, err
	}
	st, err := r.Stat()
	if err != nil {
		r.Close()
		return nil, 0, err
	}
	return r, st.Size(), nil
}

// imageLink is a symbolic link at path to target.
type imageLink struct {
	path, target string
}

type imageDir struct {
	path string
	mode int64
}

// systemImages maps RKE's system_images keys to the refs that serve them.
func systemImages(imgs []builtImage) map[string]string {
	m := map[string]string{}
	for _, img := range imgs {
		for _, k := range img.SystemImages {
			m[k] = img.Ref
		}
	}
	return m
}

// cacheDir is where the slow outputs live.
func (o Options) cacheDir() string {
	if o.CacheDir != "" {
		return o.CacheDir
	}
	if d := os.Getenv("RIGGER_CACHE"); d != "" {
		return d
	}
	return "/var/cache/rigger"
}

// BuildImages makes (or finds in the cache) every image archive that Up
// loads, and as root the engine store Up seeds new nodes from, without
// making nodes, and returns the system_images keys they serve. Progress
// goes to progress (nil: nowhere).
func BuildImages(ctx context.Context, opts Options, progress io.Writer) (map[string]string, error) {
	p := newProgress(progress)
	imgs, err := buildImages(ctx, opts, p)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if _, err := ensureEngineStore(ctx, opts.cacheDir(), imgs, p); err != nil {
			return nil, err
		}
	}
	return systemImages(imgs), nil
}

// buildImages makes (or finds in the cache) the archives of every image.
func buildImages(ctx context.Context, opts Options, p *progress) ([]builtImage, error) {
	cache := opts.cacheDir()
	p.phase("Build images (cache %s)", cache)
	releases, err := releasesToBuild(opts.KubernetesVersions)
	if err != nil {
		return nil, err
	}
	var kubeDir, etcdDefault string // the default release's: pause (and RKE's stand-ins' etcdctl) come from them
	var versionSpecs []imageSpec
	for _, r := range releases {
		dir, err := ensureKubeBinaries(ctx, cache, opts.BuildSource, r.Kubernetes, p)
		if err != nil {
			return nil, err
		}
		etcdDir, err := ensureEtcdBinaries(ctx, cache, opts.BuildSource, r.Etcd, p)
		if err != nil {
			return nil, err
		}
		extra := r.Kubernetes != KubernetesVersion
		if !extra {
			kubeDir, etcdDefault = dir, etcdDir
		}
		hyperkube, err := hyperkubeSpec(ctx, dir, r.Kubernetes, extra)
		if err != nil {
			return nil, err
		}
		etcd, err := etcdImageSpec(ctx, etcdDir, r.Etcd, extra)
		if err != nil {
			return nil, err
		}
		versionSpecs = append(versionSpecs, etcd, hyperkube)
	}
	riggerBin, err := ensureRiggerBinary(ctx, cache, opts.RiggerBinary, riggerBinaryPath(opts), p)
	if err != nil {
		return nil, err
	}
	progs, err := ensureGoPrograms(ctx, cache, goPrograms(), p)
	if err != nil {
		return nil, err
	}
	addons, err := addonImageSpecs(ctx, progs)
	if err != nil {
		return nil, err
	}
	specs := []imageSpec{
		{
			ref:          RiggerImage,
			files:        []imageFile{{src: riggerBin, dst: "/usr/local/bin/rigger", mode: 0o755}},
			dirs:         []imageDir{{"/tmp", 0o1777}},
			changes:      []string{`ENTRYPOINT ["/usr/local/bin/rigger"]`},
			systemImages: []string{"nginx_proxy", "cert_downloader"},
			rigger:       true,
		},
		toolsImageSpec(),
		{
			ref:          PauseImage,
			files:        []imageFile{{src: filepath.Join(kubeDir, "pause"), dst: "/pause", mode: 0o755}},
			changes:      []string{`ENTRYPOINT ["/pause"]`},
			systemImages: []string{"pod_infra_container"},
		},
	}
	specs = append(specs, versionSpecs...)
	specs = append(specs, addons...)
	specs = append(specs, rkeToolsImageSpec(progs))
	if opts.RKE {
		if opts.Kubectl == "" {
			return nil, fmt.Errorf("the images of RKE's own rke up need kubectl for its add-on Jobs: give its path (--kubectl, or $RIGGER_KUBECTL: make kubectl builds it)")
		}
		tools, err := rkeToolsStandInSpec(ctx, progs, riggerBin, etcdDefault)
		if err != nil {
			return nil, err
		}
		hyperkube, err := rkeHyperkubeSpec(ctx, kubeDir, opts.Kubectl)
		if err != nil {
			return nil, err
		}
		specs = append(specs, tools, hyperkube)
	}
	// One writer of the archive cache at a time: test packages run in
	// parallel, and a new archive replaces the old one of its ref.
	lock, err := lockFile(ctx, filepath.Join(cache, "images.lock"), func() { p.info("waiting for another build of the image archives") })
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	var imgs []builtImage
	for _, spec := range specs {
		start := time.Now()
		img, made, err := buildArchive(filepath.Join(cache, "images"), spec)
		if err != nil {
			return nil, fmt.Errorf("build image %s: %w", spec.ref, err)
		}
		how := "cached"
		if made {
			how = "built in " + time.Since(start).Round(10*time.Millisecond).String()
		}
		p.info("%s: %s (%s)", spec.ref, how, humanSize(img.Archive))
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// busybox is Debian's static busybox (busybox-static).
const busybox = "/bin/busybox"

// toolsImageSpec is busybox with the commands the helper containers call.
func toolsImageSpec() imageSpec {
	spec := imageSpec{
		ref:          ToolsImage,
		files:        []imageFile{{src: busybox, dst: "/bin/busybox", mode: 0o755}},
		dirs:         []imageDir{{"/tmp", 0o1777}},
		changes:      []string{"ENV PATH=/bin"},
		systemImages: []string{"alpine"},
	}
	for _, c := range []string{"sh", "rm", "find", "ls", "cat", "mkdir", "test", "sha256sum"} {
		spec.links = append(spec.links, imageLink{path: "/bin/" + c, target: "busybox"})
	}
	return spec
}

// xtables is the iptables multi-call binary kube-proxy and the kubelet
// run (Debian's iptables package, nftables back end).
const xtables = "/usr/sbin/xtables-nft-multi"

// xtablesExtensions holds iptables' extension modules.
const xtablesExtensions = "/usr/lib/x86_64-linux-gnu/xtables"

// hyperkubeSpec is the hyperkube image of Kubernetes version, its
// commands from kubeDir. An extra release's serves no system_images key.
func hyperkubeSpec(ctx context.Context, kubeDir, version string, extra bool) (imageSpec, error) {
	spec := imageSpec{
		ref:     HyperkubeRef(version),
		dirs:    []imageDir{{"/tmp", 0o1777}, {"/run", 0o755}, {"/var/lib", 0o755}},
		changes: []string{"ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	if !extra {
		spec.systemImages = []string{"kubernetes"}
	}
	for _, c := range kubeCommands() {
		spec.files = append(spec.files, imageFile{src: filepath.Join(kubeDir, c), dst: "/usr/local/bin/" + c, mode: 0o755})
	}
	// The user and group databases every distribution's image has: from
	// 1.33 on the kubelet reads /etc/passwd for its user namespaces'
	// mappings (the user kubelet), and fails to start without the file.
	spec.files = append(spec.files,
		imageFile{dst: "/etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", mode: 0o644},
		imageFile{dst: "/etc/group", content: "root:x:0:\nnogroup:x:65534:\n", mode: 0o644})
	files, links, err := iptablesFiles(ctx)
	if err != nil {
		return imageSpec{}, fmt.Errorf("hyperkube image: %w", err)
	}
	spec.files = append(spec.files, files...)
	spec.links = append(spec.links, links...)
	tools, err := withLibs(ctx, kubeletTools()...)
	if err != nil {
		return imageSpec{}, fmt.Errorf("hyperkube image: %w (install mount, util-linux, iproute2, socat and conntrack: make prereqs)", err)
	}
	spec.files = appendNew(spec.files, tools...)
	return spec, nil
}

// kubeletTools are the programs the kubelet's container runs from its
// PATH: the kubelet's mount and umount (tmpfs of projected and secret
// volumes), and what cri-dockerd runs where the kubelet runs (rke-tools'
// entrypoint starts it in the kubelet's container): nsenter and ip (a pod's
// addresses, in its network namespace), socat (port forwarding) and
// conntrack (host ports); the entrypoint also asks the engine for its
// settings with socat.
func kubeletTools() []string {
	return []string{"/usr/bin/mount", "/usr/bin/umount", "/usr/bin/nsenter", "/usr/bin/ip", "/usr/bin/socat", "/usr/sbin/conntrack"}
}

// appendNew appends the files whose destination files lacks.
func appendNew(files []imageFile, more ...imageFile) []imageFile {
	have := map[string]bool{}
	for _, f := range files {
		have[f.dst] = true
	}
	for _, f := range more {
		if !have[f.dst] {
			have[f.dst] = true
			files = append(files, f)
		}
	}
	return files
}

// iptablesFiles are iptables (the nft back end) and the match and target
// extensions it loads (conntrack, statistic…), with the libraries of both,
// and the links iptables, iptables-save, iptables-restore and their ip6
// forms in /usr/sbin.
func iptablesFiles(ctx context.Context) ([]imageFile, []imageLink, error) {
	exts, err := filepath.Glob(filepath.Join(xtablesExtensions, "*.so"))
	if err != nil || len(exts) == 0 {
		return nil, nil, fmt.Errorf("no iptables extensions in %s (install iptables: make prereqs)", xtablesExtensions)
	}
	files, err := withLibs(ctx, append([]string{xtables}, exts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (install iptables: make prereqs)", err)
	}
	var links []imageLink
	for _, c := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		links = append(links, imageLink{path: "/usr/sbin/" + c, target: "xtables-nft-multi"})
	}
	return files, links, nil
}

// withLibs is a dynamically linked binary and the shared libraries it
// loads (ldd), at their own paths.
func withLibs(ctx context.Context, bins ...string) ([]imageFile, error) {
	var files []imageFile
	seen := map[string]bool{}
	for _, bin := range bins {
		if _, err := os.Stat(bin); err != nil {
			return nil, err
		}
		files = append(files, imageFile{src: bin, dst: bin, mode: 0o755})
		out, err := run(ctx, "ldd", bin)
		if err != nil {
			continue // a static binary: "not a dynamic executable"
		}
		for _, lib := range parseLdd(out) {
			if !seen[lib] {
				seen[lib] = true
				files = append(files, imageFile{src: lib, dst: lib, mode: 0o755})
			}
		}
	}
	return files, nil
}

var etcdVersionRE = regexp.MustCompile(`(?m)^etcd Version: (\S+)$`)

// etcdImageSpec is the etcd image of etcd version: etcd, etcdctl and
// etcdutl (static, built from the Go module proxy) from etcdDir, where the
// upstream image has them. An extra release's serves no system_images key.
func etcdImageSpec(ctx context.Context, etcdDir, version string, extra bool) (imageSpec, error) {
	out, err := run(ctx, filepath.Join(etcdDir, "etcd"), "--version")
	if err != nil {
		return imageSpec{}, fmt.Errorf("etcd image: %w", err)
	}
	if m := etcdVersionRE.FindStringSubmatch(out); m == nil || "v"+m[1] != version {
		return imageSpec{}, fmt.Errorf("etcd image: %s/etcd --version says %q, want etcd %s", etcdDir, out, version)
	}
	spec := imageSpec{
		ref:     EtcdRef(version),
		dirs:    []imageDir{{"/tmp", 0o1777}, {"/var/lib/etcd", 0o700}},
		changes: []string{"ENV PATH=/usr/local/bin:/usr/bin:/bin", `CMD ["/usr/local/bin/etcd"]`},
	}
	for _, c := range etcdCommands() {
		spec.files = append(spec.files, imageFile{src: filepath.Join(etcdDir, c), dst: "/usr/local/bin/" + c, mode: 0o755})
	}
	if !extra {
		spec.systemImages = []string{"etcd"}
	}
	return spec, nil
}

// parseLdd returns the files that ldd(1) lists: "libc.so.6 => /lib/…
// (0x…)" and "/lib64/ld-linux-x86-64.so.2 (0x…)"; not the vDSO.
func parseLdd(out string) []string {
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs
}

// inputKey hashes everything that goes into an image: format, ref,
// changes, and every file's destination, mode and content.
func inputKey(spec imageSpec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%q\n", archiveFormat, spec.ref, spec.changes)
	for _, d := range spec.dirs {
		fmt.Fprintf(h, "dir %s %o\n", d.path, d.mode)
	}
	for _, l := range spec.links {
		fmt.Fprintf(h, "link %s %s\n", l.path, l.target)
	}
	for _, f := range spec.files {
		fmt.Fprintf(h, "file %s %o\n", f.dst, f.mode)
		r, _, err := f.open()
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// archiveName is the cache file of ref's archive with inputs key.
func archiveName(ref, key string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(ref) + "-" + key[:16] + ".tar"
}

// buildArchive writes spec's rootfs tarball to dir unless the cache has
// it; made says whether it was written. Older archives of the same ref go.
func buildArchive(dir string, spec imageSpec) (img builtImage, made bool, err error) {
	key, err := inputKey(spec)
	if err != nil {
		return builtImage{}, false, err
	}
	changes := append(append([]string(nil), spec.changes...), fmt.Sprintf("LABEL %s=%s", contentLabel, key))
	img = builtImage{Ref: spec.ref, Key: key, Changes: changes, SystemImages: spec.systemImages, Rigger: spec.rigger,
		Archive: filepath.Join(dir, archiveName(spec.ref, key))}
	if _, err := os.Stat(img.Archive); err == nil {
		return img, false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return builtImage{}, false, err
	}
	if err := atomicfile.WriteFunc(img.Archive, 0o600, func(w io.Writer) error { return writeRootfs(w, spec) }); err != nil {
		return builtImage{}, false, err
	}
	prefix := strings.TrimSuffix(archiveName(spec.ref, key), key[:16]+".tar")
	old, _ := filepath.Glob(filepath.Join(dir, prefix+"*.tar"))
	for _, o := range old {
		if o != img.Archive {
			_ = os.Remove(o)
		}
	}
	return img, true, nil
}

// writeRootfs writes a tarball of the image's files and directories (and
// their parents), with fixed owners and times: the same inputs give the
// same bytes.
func writeRootfs(w io.Writer, spec imageSpec) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	dirs := map[string]int64{}
	var addParents func(p string)
	addParents = func(p string) {
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	for _, d := range spec.dirs {
		dirs[d.path] = d.mode
		addParents(d.path)
	}
	for _, f := range spec.files {
		addParents(f.dst)
	}
	for _, l := range spec.links {
		addParents(l.path)
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: dirs[d], ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	for _, f := range spec.files {
		r, size, err := f.open()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.dst, "/"), Mode: f.mode, Size: size, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			r.Close()
			return err
		}
		_, err = io.Copy(tw, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("archive %s: %w", f.dst, err)
		}
	}
	for _, l := range spec.links {
		hdr := &tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(l.path, "/"), Linkname: l.target, Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	return tw.Close()
}

// loadImages imports every image into every node's engine, skipping those
// whose content label shows they are there already.
func (s *Sandbox) loadImages(ctx context.Context, imgs []builtImage, p *progress) error {
	p.phase("Load images into every node")
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nodeParallelism)
	for _, n := range s.Nodes {
		g.Go(func() error {
			start := time.Now()
			loaded, err := loadNodeImages(gctx, n, imgs)
			if err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
			if loaded == 0 {
				p.node(n.Name, "all %d images present", len(imgs))
			} else {
				p.node(n.Name, "imported %d of %d images (%s)", loaded, len(imgs), time.Since(start).Round(10*time.Millisecond))
			}
			return nil
		})
	}
	return g.Wait()
}

func loadNodeImages(ctx context.Context, n Node, imgs []builtImage) (int, error) {
	c, err := dockerClient(n.DockerSocket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	loaded := 0
	for _, img := range imgs {
		insp, err := c.ImageInspect(ctx, img.Ref)
		if err == nil && insp.Config != nil && insp.Config.Labels[contentLabel] == img.Key {
			continue
		}
		if err := importImage(ctx, c, img); err != nil {
			return loaded, fmt.Errorf("import %s: %w", img.Ref, err)
		}
		loaded++
	}
	return loaded, nil
}

// imageImporter is the part of the Docker client that importImage uses.
type imageImporter interface {
	ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
}

func importImage(ctx context.Context, c imageImporter, img builtImage) error {
	f, err := os.Open(img.Archive)
	if err != nil {
		return err
	}
	defer f.Close()
	rc, err := c.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, img.Ref, image.ImportOptions{Changes: img.Changes})
	if err != nil {
		return err
	}
	defer rc.Close()
	return readJSONStream(rc)
}

// readJSONStream reads a Docker progress stream to its end and returns the
// error it reports, if any.
func readJSONStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&msg)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read engine's answer: %w", err)
		}
		if msg.ErrorDetail.Message != "" {
			return errors.New(msg.ErrorDetail.Message)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// riggerBinaryPath is the static rigger binary of rigger's image:
// Options.RiggerBinary, else where ensureRiggerBinary builds it.
func riggerBinaryPath(opts Options) string {
	if opts.RiggerBinary != "" {
		return opts.RiggerBinary
	}
	return filepath.Join(opts.cacheDir(), "rigger", "rigger")
}

// ensureRiggerBinary returns a static rigger binary for rigger's image:
// path when given, else one built from the rigger module found above the
// working directory into out, in the cache.
func ensureRiggerBinary(ctx context.Context, cache, path, out string, p *progress) (string, error) {
	if path != "" {
		if err := CheckStatic(path); err != nil {
			return "", err
		}
		return path, nil
	}
	root, err := findUp(func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && strings.HasPrefix(string(b), "module github.com/rigger/rigger\n")
	})
	if err != nil {
		return "", fmt.Errorf("rigger's image needs a static rigger binary: run from the rigger repository, or pass one (--rigger-binary, Options.RiggerBinary): %w", err)
	}
	lock, err := lockFile(ctx, filepath.Join(cache, "rigger.lock"), func() { p.info("waiting for another build of rigger") })
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	p.info("building rigger from %s", root)
	cmd := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/rigger"}
	if _, err := runInDir(ctx, root, []string{"CGO_ENABLED=0"}, "go", cmd...); err != nil {
		return "", fmt.Errorf("build rigger for its image: %w", err)
	}
	return out, nil
}

// CheckStatic refuses a dynamically linked binary: rigger's image has no
// libraries.
func CheckStatic(path string) error {
	static, err := isStatic(path)
	if err != nil {
		return fmt.Errorf("rigger binary %s: %w", path, err)
	}
	if !static {
		return fmt.Errorf("rigger binary %s is dynamically linked; rigger's image needs a static one: build it with `make build` (CGO_ENABLED=0)", path)
	}
	return nil
}

// checkStaticBinary refuses a binary that is missing or dynamically linked.
func checkStaticBinary(path string) error {
	static, err := isStatic(path)
	if err != nil {
		return err
	}
	if !static {
		return fmt.Errorf("%s is dynamically linked; its image has no libraries", path)
	}
	return nil
}

// isStatic says whether the ELF binary at path has no program interpreter.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// findUp returns the first of the working directory and its parents for
// which ok is true.
func findUp(ok func(dir string) bool) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if ok(dir) {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("not found in %s or above: %w", wd, fs.ErrNotExist)
		}
	}
}

func humanSize(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f MB", float64(st.Size())/1e6)
}
