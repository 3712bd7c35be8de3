package secretstate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/pki"
)

// Moved is what Import or Export moved: each file with its size in bytes,
// and the files the destination held that the source does not, removed
// (with force only).
type Moved struct {
	Files   map[string]int
	Removed []string
}

// String lists the files moved, one a line, for people; never their
// content.
func (m Moved) String() string {
	var b strings.Builder
	for _, f := range slices.Sorted(maps.Keys(m.Files)) {
		fmt.Fprintf(&b, "  %s (%d bytes)\n", f, m.Files[f])
	}
	for _, f := range m.Removed {
		fmt.Fprintf(&b, "  %s removed\n", f)
	}
	return b.String()
}

func moved(files map[string][]byte) Moved {
	m := Moved{Files: map[string]int{}}
	for f, b := range files {
		m.Files[f] = len(b)
	}
	return m
}

// Import copies the state directory dir of cluster (rigger apply's, say)
// into the cluster's Secrets, each file byte for byte. It refuses a
// directory without state, one whose PKI does not load, and a cluster that
// has Secrets already unless force: then the Secrets become the
// directory's, each write a compare-and-swap against the versions listed.
func (s *Store) Import(ctx context.Context, cluster, dir string, force bool) (Moved, error) {
	local, err := StateFiles(dir)
	if err != nil {
		return Moved{}, err
	}
	if len(local) == 0 {
		return Moved{}, fmt.Errorf("the state directory %s holds no state of cluster %s: give the directory of its rigger apply (--state-dir)", dir, cluster)
	}
	if _, ok := local[pki.CACertName+".pem"]; ok {
		if _, err := pki.Load(dir); err != nil {
			return Moved{}, fmt.Errorf("import %s: %w", dir, err)
		}
	}
	files, secrets, err := s.read(ctx, cluster)
	if err != nil {
		return Moved{}, err
	}
	if len(files) > 0 && !force {
		return Moved{}, fmt.Errorf("namespace %s holds state of cluster %s already (%d Secrets labelled %s=%s): "+
			"give --force to replace it with %s", s.Namespace, cluster, len(files), ClusterLabel, cluster, dir)
	}
	c := &Cluster{store: s, name: cluster}
	c.remember(files, secrets)
	m := moved(local)
	for _, f := range slices.Sorted(maps.Keys(local)) {
		if err := c.Put(f, local[f]); err != nil {
			return Moved{}, fmt.Errorf("import %s: %w", dir, err)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(files)) {
		if _, ok := local[f]; !ok {
			if err := c.Delete(f); err != nil {
				return Moved{}, fmt.Errorf("import %s: %w", dir, err)
			}
			m.Removed = append(m.Removed, f)
		}
	}
	return m, nil
}

// Export copies cluster's Secrets into the state directory dir, each file
// byte for byte (mode 0600, directories 0700), for rigger apply to use. It
// refuses a cluster without Secrets, and a directory that holds state
// already unless force: then dir's state files become the Secrets' (its
// lock stays).
func (s *Store) Export(ctx context.Context, cluster, dir string, force bool) (Moved, error) {
	files, _, err := s.read(ctx, cluster)
	if err != nil {
		return Moved{}, err
	}
	if len(files) == 0 {
		return Moved{}, fmt.Errorf("namespace %s holds no state of cluster %s (no Secret labelled %s=%s)", s.Namespace, cluster, ClusterLabel, cluster)
	}
	local, err := StateFiles(dir)
	if err != nil {
		return Moved{}, err
	}
	if len(local) > 0 && !force {
		return Moved{}, fmt.Errorf("the state directory %s holds state already (%d files): give --force to replace it with the Secrets of cluster %s",
			dir, len(local), cluster)
	}
	if err := mirror(dir, files, local); err != nil {
		return Moved{}, fmt.Errorf("export to %s: %w", dir, err)
	}
	m := moved(files)
	for _, f := range slices.Sorted(maps.Keys(local)) {
		if _, ok := files[f]; !ok {
			m.Removed = append(m.Removed, f)
		}
	}
	return m, nil
}
