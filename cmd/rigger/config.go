package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

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
minor version from 1.33 on, spelled v1.33.7-rigger1 (the upstream version, then
-rigger and the entry's revision), marked "rigger's" ("table": "rigger" with
-o json; RKE's are "table": "rke"), with images a user can pull from public
registries (docs/versions.md names the source of each). Where no public image
holds the five Kubernetes components, the version names no kubernetes image
(marked so; "needs_kubernetes_image": true): build one with deploy/hyperkube and
set system_images.kubernetes.

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
				return printJSON(w, versionsJSON{RKEVersion: rkemeta.RKEVersion, Default: spec.DefaultKubernetesVersion, Versions: list})
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
				if v.NeedsKubernetesImage {
					mark += " (no public kubernetes image: build one with " + spec.HyperkubeRecipe + " and set system_images.kubernetes)"
				}
				fmt.Fprintf(w, "%s%s\n", v.Version, mark)
				for _, im := range v.images {
					fmt.Fprintf(w, "  %s: %s\n", im[0], im[1])
				}
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
	// NeedsKubernetesImage: the version names no kubernetes image (no
	// public one exists); system_images.kubernetes must be set.
	NeedsKubernetesImage bool `json:"needs_kubernetes_image,omitempty"`
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
			if slices.Contains(versions, n) {
				continue
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
			v.NeedsKubernetesImage = riggermeta.NeedsKubernetesImage(name)
		}
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
