// Package rkegen turns the kontainer-driver-metadata embedded in an RKE
// release (its data/data.json) into the Go source and template files of
// package spec/rkemeta. It is the whole of `go generate ./spec/rkemeta`;
// spec/rkemeta's tests call it too, to check that the committed files are
// what it makes.
//
// What it keeps, and why, is said in spec/rkemeta's package comment.
package rkegen

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/blang/semver"
)

// The RKE release the metadata comes from.
const (
	Module  = "github.com/rancher/rke"
	Version = "v1.8.14"
	// DataFile is the metadata file, relative to the module's root.
	DataFile = "data/data.json"
)

// MinMinor is the oldest Kubernetes 1.x minor version kept: dockershim is
// gone from 1.24 on, and rigger runs nothing older.
const MinMinor = 24

// The generated files, relative to the package.
const (
	GoFile = "zz_generated.go"
	// TemplatesDir holds the template texts kept, one gzip-compressed
	// file per template key (KEY.gz): 7.8 MB of text, mostly Calico's and
	// ACI's, that compress to about 1 MB, and a command reads only the few
	// it renders.
	TemplatesDir = "templates"
)

// data is the part of RKE's kdm.Data that rigger keeps.
type data struct {
	K8sVersionRKESystemImages map[string]map[string]string            `json:"K8sVersionRKESystemImages"`
	K8sVersionServiceOptions  map[string]map[string]map[string]string `json:"K8sVersionServiceOptions"`
	K8sVersionInfo            map[string]map[string]string            `json:"K8sVersionInfo"`
	K8sVersionDockerInfo      map[string][]string                     `json:"K8sVersionDockerInfo"`
	K8sVersionedTemplates     map[string]map[string]string            `json:"K8sVersionedTemplates"`
	RKEDefaultK8sVersions     map[string]string                       `json:"RKEDefaultK8sVersions"`
}

// imageFields maps the keys of RKE's K8sVersionRKESystemImages (the json
// tags of its RKESystemImages) to the Go field names of that struct, which
// rigger's rkemeta.Images and spec.SystemImages use too.
var imageFields = [][2]string{
	{"etcd", "Etcd"},
	{"alpine", "Alpine"},
	{"nginxProxy", "NginxProxy"},
	{"certDownloader", "CertDownloader"},
	{"kubernetesServicesSidecar", "KubernetesServicesSidecar"},
	{"kubedns", "KubeDNS"},
	{"dnsmasq", "DNSmasq"},
	{"kubednsSidecar", "KubeDNSSidecar"},
	{"kubednsAutoscaler", "KubeDNSAutoscaler"},
	{"coredns", "CoreDNS"},
	{"corednsAutoscaler", "CoreDNSAutoscaler"},
	{"nodelocal", "Nodelocal"},
	{"kubernetes", "Kubernetes"},
	{"flannel", "Flannel"},
	{"flannelCni", "FlannelCNI"},
	{"calicoNode", "CalicoNode"},
	{"calicoCni", "CalicoCNI"},
	{"calicoControllers", "CalicoControllers"},
	{"calicoCtl", "CalicoCtl"},
	{"calicoFlexVol", "CalicoFlexVol"},
	{"canalNode", "CanalNode"},
	{"canalCni", "CanalCNI"},
	{"canalControllers", "CanalControllers"},
	{"canalFlannel", "CanalFlannel"},
	{"canalFlexVol", "CanalFlexVol"},
	{"weaveNode", "WeaveNode"},
	{"weaveCni", "WeaveCNI"},
	{"podInfraContainer", "PodInfraContainer"},
	{"ingress", "Ingress"},
	{"ingressBackend", "IngressBackend"},
	{"ingressWebhook", "IngressWebhook"},
	{"metricsServer", "MetricsServer"},
	{"windowsPodInfraContainer", "WindowsPodInfraContainer"},
	{"aciCniDeployContainer", "AciCniDeployContainer"},
	{"aciHostContainer", "AciHostContainer"},
	{"aciOpflexContainer", "AciOpflexContainer"},
	{"aciMcastContainer", "AciMcastContainer"},
	{"aciOvsContainer", "AciOpenvSwitchContainer"},
	{"aciControllerContainer", "AciControllerContainer"},
	{"aciGbpServerContainer", "AciGbpServerContainer"},
	{"aciOpflexServerContainer", "AciOpflexServerContainer"},
}

// serviceFields maps the keys of RKE's KubernetesServicesOptions to its
// Go field names.
var serviceFields = [][2]string{
	{"etcd", "Etcd"},
	{"kubeapi", "KubeAPI"},
	{"kubeController", "KubeController"},
	{"scheduler", "Scheduler"},
	{"kubelet", "Kubelet"},
	{"kubeproxy", "Kubeproxy"},
}

// infoFields maps the keys of RKE's K8sVersionInfo to its Go field names.
var infoFields = [][2]string{
	{"minRKEVersion", "MinRKEVersion"},
	{"maxRKEVersion", "MaxRKEVersion"},
	{"deprecateRKEVersion", "DeprecateRKEVersion"},
	{"minRancherVersion", "MinRancherVersion"},
	{"maxRancherVersion", "MaxRancherVersion"},
	{"deprecateRancherVersion", "DeprecateRancherVersion"},
}

// templateKeys is the key of K8sVersionedTemplates that holds the texts
// (RKE's kdm.TemplateKeys); every other key is an add-on's range table.
const templateKeys = "templateKeys"

// LocateRKE returns the root of the RKE module Version in the module
// cache, downloading it through the module proxy when it is not there.
func LocateRKE() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", Module+"@"+Version)
	// Outside any module, so that no go.mod or go.sum is touched.
	cmd.Dir = os.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr == nil && m.Error != "" {
		return "", fmt.Errorf("download %s@%s: %s", Module, Version, m.Error)
	}
	if err != nil {
		return "", fmt.Errorf("download %s@%s: %w: %s", Module, Version, err, strings.TrimSpace(stderr.String()))
	}
	if m.Dir == "" {
		return "", fmt.Errorf("download %s@%s: go mod download printed no directory", Module, Version)
	}
	return m.Dir, nil
}

// ReadData reads RKE's metadata from the module root dir.
func ReadData(dir string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(DataFile)))
	if err != nil {
		return nil, fmt.Errorf("read RKE's metadata: %w", err)
	}
	return b, nil
}

// Output is what Generate makes of RKE's data.json.
type Output struct {
	// Go is the content of GoFile.
	Go []byte
	// Templates are the template texts kept, by key: the content of
	// TemplatesDir before compression, by key.
	Templates map[string]string
}

// Generate makes package rkemeta's data from RKE's data.json.
func Generate(raw []byte) (*Output, error) {
	var d data
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("decode RKE's metadata: %w", err)
	}
	g := &gen{d: d, out: &Output{}}
	if err := g.run(); err != nil {
		return nil, err
	}
	return g.out, nil
}

// Files returns the files of package rkemeta, by name (a slash-separated
// path below the package's directory).
func (o *Output) Files() (map[string][]byte, error) {
	files := map[string][]byte{GoFile: o.Go}
	for key, text := range o.Templates {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := zw.Write([]byte(text)); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		files[TemplatesDir+"/"+key+".gz"] = buf.Bytes()
	}
	return files, nil
}

// Write puts files into dir, replacing what TemplatesDir held.
func Write(dir string, files map[string][]byte) error {
	if err := os.RemoveAll(filepath.Join(dir, TemplatesDir)); err != nil {
		return err
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ReadTemplates reads the template texts of TemplatesDir in fsys, by key.
func ReadTemplates(fsys fs.FS) (map[string]string, error) {
	entries, err := fs.ReadDir(fsys, TemplatesDir)
	if err != nil {
		return nil, err
	}
	texts := map[string]string{}
	for _, e := range entries {
		key, ok := strings.CutSuffix(e.Name(), ".gz")
		if !ok {
			return nil, fmt.Errorf("%s/%s: not a template", TemplatesDir, e.Name())
		}
		text, err := ReadTemplate(fsys, key)
		if err != nil {
			return nil, err
		}
		texts[key] = text
	}
	return texts, nil
}

// ReadTemplate reads the text of template key in fsys's TemplatesDir.
func ReadTemplate(fsys fs.FS, key string) (string, error) {
	f, err := fsys.Open(TemplatesDir + "/" + key + ".gz")
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("template %s: %w", key, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return "", fmt.Errorf("template %s: %w", key, err)
	}
	return string(b), nil
}

type gen struct {
	d   data
	out *Output
	b   bytes.Buffer
}

func (g *gen) printf(format string, args ...any) { fmt.Fprintf(&g.b, format, args...) }

var versionKeyRE = regexp.MustCompile(`^v(\d+)\.(\d+)(\.|$)`)

// kept reports whether a version key ("v1.31.5-rancher1-1" or a series
// "v1.31") is of Kubernetes 1.MinMinor or later.
func kept(key string) bool {
	m := versionKeyRE.FindStringSubmatch(key)
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major > 1 || (major == 1 && minor >= MinMinor)
}

// sortVersions sorts RKE version keys by semver (series keys "v1.31" as
// v1.31.0), ties by the key.
func sortVersions(keys []string) {
	parse := func(k string) semver.Version {
		s := strings.TrimPrefix(k, "v")
		if strings.Count(s, ".") == 1 {
			s += ".0"
		}
		v, err := semver.Parse(s)
		if err != nil {
			return semver.Version{}
		}
		return v
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := parse(keys[i]), parse(keys[j])
		if c := a.Compare(b); c != 0 {
			return c < 0
		}
		return keys[i] < keys[j]
	})
}

func (g *gen) run() error {
	d := g.d
	if len(d.K8sVersionRKESystemImages) == 0 || len(d.K8sVersionedTemplates) == 0 {
		return errors.New("RKE's metadata has no K8sVersionRKESystemImages or K8sVersionedTemplates: is it data/data.json of RKE?")
	}
	def := d.RKEDefaultK8sVersions["default"]
	if _, ok := d.K8sVersionRKESystemImages[def]; !ok || !kept(def) {
		return fmt.Errorf("RKE's default Kubernetes version %q is not among the versions kept", def)
	}

	g.printf("// Code generated by hack/rke-metadata from %s@%s %s. DO NOT EDIT.\n\n", Module, Version, DataFile)
	g.printf("package rkemeta\n\n")
	g.printf("// RKEVersion is the RKE release whose metadata this package holds.\nconst RKEVersion = %q\n\n", Version)
	g.printf("// DefaultVersion is RKE's default kubernetes_version (its RKEDefaultK8sVersions[\"default\"]).\nconst DefaultVersion = %q\n\n", def)
	g.printf("// MinMinor is the oldest Kubernetes 1.x minor version whose metadata is kept.\nconst MinMinor = %d\n\n", MinMinor)

	if err := g.images(); err != nil {
		return err
	}
	if err := g.serviceOptions(); err != nil {
		return err
	}
	if err := g.info(); err != nil {
		return err
	}
	g.docker()
	if err := g.templates(); err != nil {
		return err
	}
	src, err := format.Source(g.b.Bytes())
	if err != nil {
		return fmt.Errorf("format the generated source: %w", err)
	}
	g.out.Go = src
	return nil
}

func (g *gen) images() error {
	known := map[string]string{}
	for _, f := range imageFields {
		known[f[0]] = f[1]
	}
	var versions []string
	for v, im := range g.d.K8sVersionRKESystemImages {
		if !kept(v) {
			continue
		}
		for k := range im {
			if _, ok := known[k]; !ok {
				return fmt.Errorf("version %s has image key %q, which rkegen does not know: add it to imageFields, rkemeta.Images and spec.SystemImages", v, k)
			}
		}
		versions = append(versions, v)
	}
	sortVersions(versions)

	g.printf("// SystemImages is RKE's RKESystemImages: the image of each component.\ntype SystemImages struct {\n")
	for _, f := range imageFields {
		g.printf("\t%s string `json:\"%s,omitempty\"`\n", f[1], f[0])
	}
	g.printf("}\n\n")

	g.printf("// releases are RKE's K8sVersionRKESystemImages of Kubernetes 1.%d and later, oldest first.\n", MinMinor)
	g.printf("func releases() []release {\n\treturn []release{\n")
	for _, v := range versions {
		g.printf("\t\t{%q, SystemImages{\n", v)
		im := g.d.K8sVersionRKESystemImages[v]
		for _, f := range imageFields {
			if s, ok := im[f[0]]; ok {
				g.printf("\t\t\t%s: %q,\n", f[1], s)
			}
		}
		g.printf("\t\t}},\n")
	}
	g.printf("\t}\n}\n\n")
	return nil
}

func (g *gen) serviceOptions() error {
	known := map[string]bool{}
	for _, f := range serviceFields {
		known[f[0]] = true
	}
	var keys []string
	for k, o := range g.d.K8sVersionServiceOptions {
		if !kept(k) {
			continue
		}
		for svc := range o {
			if !known[svc] {
				return fmt.Errorf("service options of %s name service %q, which rkegen does not know", k, svc)
			}
		}
		keys = append(keys, k)
	}
	sortVersions(keys)
	g.printf("// serviceOptions are RKE's K8sVersionServiceOptions of Kubernetes 1.%d and later, by version or series.\n", MinMinor)
	g.printf("func serviceOptions() map[string]Options {\n\treturn map[string]Options{\n")
	for _, k := range keys {
		g.printf("\t\t%q: {\n", k)
		o := g.d.K8sVersionServiceOptions[k]
		for _, f := range serviceFields {
			flags, ok := o[f[0]]
			if !ok {
				continue
			}
			g.printf("\t\t\t%s: map[string]string{\n", f[1])
			for _, name := range sortedKeys(flags) {
				g.printf("\t\t\t\t%q: %q,\n", name, flags[name])
			}
			g.printf("\t\t\t},\n")
		}
		g.printf("\t\t},\n")
	}
	g.printf("\t}\n}\n\n")
	return nil
}

func (g *gen) info() error {
	known := map[string]string{}
	for _, f := range infoFields {
		known[f[0]] = f[1]
	}
	var keys []string
	for k, info := range g.d.K8sVersionInfo {
		if !kept(k) {
			continue
		}
		for field := range info {
			if _, ok := known[field]; !ok {
				return fmt.Errorf("version info of %s has field %q, which rkegen does not know", k, field)
			}
		}
		keys = append(keys, k)
	}
	sortVersions(keys)
	g.printf("// versionInfo is RKE's K8sVersionInfo of Kubernetes 1.%d and later, by version or series.\n", MinMinor)
	g.printf("func versionInfo() map[string]VersionInfo {\n\treturn map[string]VersionInfo{\n")
	for _, k := range keys {
		g.printf("\t\t%q: {", k)
		info := g.d.K8sVersionInfo[k]
		var parts []string
		for _, f := range infoFields {
			if s, ok := info[f[0]]; ok {
				parts = append(parts, fmt.Sprintf("%s: %q", f[1], s))
			}
		}
		g.printf("%s},\n", strings.Join(parts, ", "))
	}
	g.printf("\t}\n}\n\n")
	return nil
}

func (g *gen) docker() {
	var keys []string
	for k := range g.d.K8sVersionDockerInfo {
		if kept("v" + k) {
			keys = append(keys, k)
		}
	}
	sortVersions(keys)
	g.printf("// dockerVersions are RKE's K8sVersionDockerInfo of Kubernetes 1.%d and later, by major.minor.\n", MinMinor)
	g.printf("func dockerVersions() map[string][]string {\n\treturn map[string][]string{\n")
	for _, k := range keys {
		quoted := make([]string, 0, len(g.d.K8sVersionDockerInfo[k]))
		for _, v := range g.d.K8sVersionDockerInfo[k] {
			quoted = append(quoted, strconv.Quote(v))
		}
		g.printf("\t\t%q: {%s},\n", k, strings.Join(quoted, ", "))
	}
	g.printf("\t}\n}\n\n")
}

// templates writes every add-on's range table whole (so that a lookup
// answers as RKE's for any version) and the texts that a version of
// Kubernetes 1.MinMinor or later can reach.
func (g *gen) templates() error {
	texts := g.d.K8sVersionedTemplates[templateKeys]
	var addons []string
	for a := range g.d.K8sVersionedTemplates {
		if a != templateKeys {
			addons = append(addons, a)
		}
	}
	slices.Sort(addons)

	floor := semver.MustParse(fmt.Sprintf("1.%d.0-0", MinMinor))
	keep := map[string]bool{}
	g.printf("// templateRanges are RKE's K8sVersionedTemplates: for each add-on, semver ranges (blang/semver syntax, written as in RKE's data) and the template key of each.\n")
	g.printf("func templateRanges() map[string]map[string]string {\n\treturn map[string]map[string]string{\n")
	for _, a := range addons {
		ranges := g.d.K8sVersionedTemplates[a]
		probes, err := probeVersions(ranges, floor)
		if err != nil {
			return fmt.Errorf("add-on %s: %w", a, err)
		}
		if err := checkDisjoint(a, ranges, probes); err != nil {
			return err
		}
		g.printf("\t\t%q: {\n", a)
		for _, r := range sortedKeys(ranges) {
			key := ranges[r]
			if _, ok := texts[key]; !ok {
				return fmt.Errorf("add-on %s: range %q names template %q, which RKE's metadata does not hold", a, r, key)
			}
			g.printf("\t\t\t%q: %q,\n", r, key)
			fn, err := semver.ParseRange(r)
			if err != nil {
				continue // RKE skips such a range too
			}
			for _, p := range probes {
				if p.GTE(floor) && fn(p) {
					keep[key] = true
					break
				}
			}
		}
		g.printf("\t\t},\n")
	}
	g.printf("\t}\n}\n")

	g.out.Templates = map[string]string{}
	for key := range keep {
		g.out.Templates[key] = texts[key]
	}
	return nil
}

// comparatorRE finds the comparators of a blang/semver range, allowing the
// stray spaces of RKE's data ("< 1.27.15-rancher1-1").
var comparatorRE = regexp.MustCompile(`(>=|<=|!=|==|>|<|=|!)?\s*(\d[0-9A-Za-z.+-]*)`)

// probeVersions returns versions at which the ranges' answers can change:
// every version a range names, the lowest version of all and floor. Every
// range RKE's data holds is a conjunction of >=, < and <= comparators, so a
// non-empty intersection of ranges (or of a range with [floor, ∞)) holds
// one of these. A range with other comparators is refused, so that the
// reasoning is revisited when RKE's data changes.
func probeVersions(ranges map[string]string, floor semver.Version) ([]semver.Version, error) {
	probes := []semver.Version{semver.MustParse("0.0.0-0"), floor}
	for r := range ranges {
		if strings.Contains(r, "||") {
			return nil, fmt.Errorf("range %q has ||, which rkegen's checks do not handle", r)
		}
		for _, m := range comparatorRE.FindAllStringSubmatch(r, -1) {
			if op := m[1]; op != ">=" && op != "<" && op != "<=" {
				return nil, fmt.Errorf("range %q has comparator %q, which rkegen's checks do not handle", r, op)
			}
			v, err := semver.Parse(m[2])
			if err != nil {
				continue
			}
			probes = append(probes, v)
		}
	}
	return probes, nil
}

// checkDisjoint fails when two ranges of an add-on match one version: RKE
// would then pick either (it walks a map), and no lookup can answer as it does.
func checkDisjoint(addon string, ranges map[string]string, probes []semver.Version) error {
	fns := map[string]semver.Range{}
	for r := range ranges {
		if fn, err := semver.ParseRange(r); err == nil {
			fns[r] = fn
		}
	}
	for _, p := range probes {
		var hit []string
		for r, fn := range fns {
			if fn(p) {
				hit = append(hit, r)
			}
		}
		if len(hit) > 1 {
			slices.Sort(hit)
			return fmt.Errorf("add-on %s: version %s matches ranges %q: RKE's answer depends on map order", addon, p, hit)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
