package main

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver"
	"github.com/spf13/cobra"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show how rigger reads a cluster.yml",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newConfigDefaultsCommand(), newConfigVersionsCommand())
	return cmd
}

func newConfigDefaultsCommand() *cobra.Command {
	var file string
	var showSecrets bool
	cmd := &cobra.Command{
		Use:   "defaults",
		Short: "Print the cluster.yml with every default filled in",
		Long: `Defaults prints cluster.yml as rigger will apply it: every key left empty
is shown with its default (RKE's defaults for RKE's keys), images are resolved
from kubernetes_version, and keys are in schema order. Secret values (SSH keys,
passwords, S3 keys, secrets_encryption_config.custom_config, the webhook's
config_file, the values of extra_env, the credentials of any URL) are shown
as "` + spec.Redacted + `" unless --show-secrets is given.

The file must be valid; otherwise the problems are printed as by validate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(cmd, file)
			if err != nil {
				return err
			}
			out, err := spec.Marshal(c, showSecrets)
			if err != nil {
				return fmt.Errorf("write cluster.yml: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	addFileFlag(cmd, &file)
	cmd.Flags().BoolVar(&showSecrets, "show-secrets", false, "print secret values instead of "+spec.Redacted)
	return cmd
}

func newConfigVersionsCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "versions [VERSION...]",
		Short: "List the Kubernetes versions rigger knows, with their images",
		Long: `Versions lists the kubernetes_version values whose system_images rigger fills
in, each with its images, and marks the default. The table is RKE ` + rkemeta.RKEVersion + `'s: every
Kubernetes version it knows from 1.` + fmt.Sprint(rkemeta.MinMinor) + ` on, with exactly its images. A version is
found only when written exactly as listed (v1.31.5-rancher1-1, not v1.31.5), as
in RKE. Other versions work when system_images names every image they need.

From v1.31.11 and v1.32.7 on, RKE's table names the kubernetes image in RKE's
extended-life namespace (` + rkemeta.ExtendedLifeNamespace + `/hyperkube:…), which SUSE Rancher
serves to its subscribers only; those versions are marked "extended life"
("extended_life": true with -o json). Without a subscription, pull them from a
registry that serves them (private_registries) or set system_images.kubernetes.

After RKE's table (Kubernetes 1.32), rigger keeps its own: one version per
minor version from 1.33 on, upstream's newest patch release when rigger was
released, spelled v1.35.10-rigger1 (the upstream version, then -rigger and the
entry's revision), marked "rigger's" ("table": "rigger" with -o json; RKE's are
"table": "rke"). Each Kubernetes component runs an image of its own, listed
under components: upstream's registry.k8s.io images for kube-apiserver,
kube-controller-manager, kube-scheduler and kube-proxy, and Talos'
ghcr.io/siderolabs/kubelet (upstream's kubelet binary) for the kubelet; a
system_images.kubernetes that is set runs all five instead, as in RKE. Any
other patch release of those minor versions, written as upstream writes it
(v1.35.12), takes the images of the same rule: a patch released after rigger
needs no new rigger. docs/versions.md names the source of every image.

Each version is marked with upstream's end of life of its minor version, and
the list ends with the newest patch release of each minor version rigger runs.

Give versions as arguments to show only those.`,
		Example: `  rigger config versions v1.32.3-rancher1-1
  rigger config versions -o json | jq -r '.versions[].version'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			list, err := knownVersions(args)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if output == outputJSON {
				return printJSON(w, versionsJSON{RKEVersion: rkemeta.RKEVersion, Default: spec.DefaultKubernetesVersion, Versions: list, Minors: minorsOf(list)})
			}
			for i, v := range list {
				if i > 0 {
					fmt.Fprintln(w)
				}
				mark := ""
				if v.Default {
					mark = " (default)"
				}
				if v.ExtendedLife {
					mark += " (extended life: " + rkemeta.ExtendedLifeNamespace + " images need a SUSE Rancher subscription)"
				}
				if v.Table == tableRigger {
					mark += " (rigger's: past RKE's table)"
				}
				mark += endOfLifeMark(v.EndOfLife, v.PastEndOfLife)
				fmt.Fprintf(w, "%s%s\n", v.Version, mark)
				for _, im := range v.images {
					fmt.Fprintf(w, "  %s: %s\n", im[0], im[1])
				}
				if len(v.Components) > 0 {
					fmt.Fprintln(w, "  components:")
					for _, c := range slices.Sorted(maps.Keys(v.Components)) {
						fmt.Fprintf(w, "    %s: %s\n", c, v.Components[c])
					}
				}
			}
			if len(args) == 0 {
				fmt.Fprintln(w, "\nThe newest patch release of each minor version:")
				for _, m := range minorsOf(list) {
					fmt.Fprintf(w, "  1.%d: %s%s\n", m.Minor, m.Newest, endOfLifeMark(m.EndOfLife, m.PastEndOfLife))
				}
				vs := riggermeta.Versions()
				newest, _ := rkemeta.ParseVersion(vs[len(vs)-1])
				fmt.Fprintf(w, "Another patch release of 1.%d to 1.%d, written as upstream writes it (v1.%d.%d), runs with the images of the same rule.\n",
					riggermeta.FirstMinor, riggermeta.LastMinor, newest.Minor, newest.Patch+1)
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// versionsJSON is the output of `rigger config versions -o json`.
type versionsJSON struct {
	// RKEVersion is the RKE release the table comes from.
	RKEVersion string `json:"rke_version"`
	// Default is the kubernetes_version of a cluster.yml that sets none.
	Default  string        `json:"default"`
	Versions []versionJSON `json:"versions"`
	// Minors are the newest versions of each minor version listed.
	Minors []minorJSON `json:"minors"`
}

// minorJSON is a minor version's newest version of the table.
type minorJSON struct {
	Minor         int    `json:"minor"`
	Newest        string `json:"newest"`
	EndOfLife     string `json:"end_of_life,omitempty"`
	PastEndOfLife bool   `json:"past_end_of_life"`
}

// today is the day end-of-life marks are judged by (a variable for tests).
var today = func() string { return time.Now().UTC().Format(time.DateOnly) }

// endOfLife returns upstream's end of life of a version's minor version
// and whether it has passed.
func endOfLife(version string) (string, bool) {
	sv, err := rkemeta.ParseVersion(version)
	if err != nil || sv.Major != 1 {
		return "", false
	}
	d, ok := riggermeta.EndOfLife(int(sv.Minor))
	if !ok {
		return "", false
	}
	return d, d < today()
}

// endOfLifeMark is the text mark of an end of life.
func endOfLifeMark(day string, past bool) string {
	switch {
	case day == "":
		return ""
	case past:
		return " (past end of life: " + day + ")"
	}
	return " (supported upstream until " + day + ")"
}

// minorsOf returns the newest version of each minor version in list,
// oldest minor first.
func minorsOf(list []versionJSON) []minorJSON {
	var out []minorJSON
	newest := map[int]semver.Version{}
	for _, v := range list {
		sv, err := rkemeta.ParseVersion(v.Version)
		if err != nil {
			continue
		}
		m := minorJSON{Minor: int(sv.Minor), Newest: v.Version, EndOfLife: v.EndOfLife, PastEndOfLife: v.PastEndOfLife}
		i := slices.IndexFunc(out, func(o minorJSON) bool { return o.Minor == m.Minor })
		switch {
		case i < 0:
			out = append(out, m)
		case sv.GT(newest[m.Minor]):
			out[i] = m
		default:
			continue
		}
		newest[m.Minor] = sv
	}
	slices.SortFunc(out, func(a, b minorJSON) int { return a.Minor - b.Minor })
	return out
}

type versionJSON struct {
	Version string `json:"version"`
	Default bool   `json:"default"`
	// ExtendedLife: an image of the version is in RKE's extended-life
	// namespace (rke-extended-life/…), which SUSE Rancher serves to its
	// subscribers only.
	ExtendedLife bool `json:"extended_life"`
	// Table is the table the version comes from: tableRKE (RKE's, as RKE
	// wrote it) or tableRigger (rigger's own, past RKE's end).
	Table string `json:"table"`
	// Components are the images of the Kubernetes components, by name,
	// for rigger's versions (their system_images.kubernetes is empty).
	Components map[string]string `json:"components,omitempty"`
	// EndOfLife is upstream's end of life of the version's minor version
	// (YYYY-MM-DD), and PastEndOfLife whether it is over.
	EndOfLife     string `json:"end_of_life,omitempty"`
	PastEndOfLife bool   `json:"past_end_of_life"`
	// SystemImages are the images, by their system_images key.
	SystemImages map[string]string `json:"system_images"`
	images       [][2]string       // SystemImages in the order of the schema
}

// The tables a version comes from (versionJSON.Table).
const (
	tableRKE    = "rke"
	tableRigger = "rigger"
)

// knownVersions returns the table's versions, or those named, each with
// its images by system_images key.
func knownVersions(names []string) ([]versionJSON, error) {
	versions := spec.KubernetesVersions()
	if len(names) > 0 {
		for _, n := range names {
			if slices.Contains(versions, n) || riggermeta.IsRigger(n) {
				continue
			}
			if instead, ok := riggermeta.Retired(n); ok {
				return nil, fmt.Errorf("%s was an entry of an earlier rigger's table, whose images rigger's table no longer names: write %s", n, instead)
			}
			var near []string
			for _, v := range versions {
				if strings.HasPrefix(v, n+"-") {
					near = append(near, v)
				}
			}
			if len(near) > 0 {
				return nil, fmt.Errorf("%s is not in rigger's version table, which writes versions as RKE does: did you mean %s?", n, strings.Join(near, " or "))
			}
			return nil, fmt.Errorf("%s is not in rigger's version table: rigger config versions lists them", n)
		}
		versions = names
	}
	out := make([]versionJSON, 0, len(versions))
	for _, name := range versions {
		im, _ := spec.KnownImages(name)
		v := versionJSON{Version: name, Default: name == spec.DefaultKubernetesVersion, ExtendedLife: rkemeta.ExtendedLife(name), Table: tableRKE, SystemImages: map[string]string{}}
		if riggermeta.IsRigger(name) {
			v.Table = tableRigger
			v.Components, _ = riggermeta.Components(name)
		}
		v.EndOfLife, v.PastEndOfLife = endOfLife(name)
		rv, rt := reflect.ValueOf(im), reflect.TypeFor[spec.SystemImages]()
		for i := range rt.NumField() {
			key, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if s := rv.Field(i).String(); s != "" {
				v.SystemImages[key] = s
				v.images = append(v.images, [2]string{key, s})
			}
		}
		out = append(out, v)
	}
	return out, nil
}
