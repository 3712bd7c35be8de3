// Package secretstate keeps clusters' state directories in Kubernetes
// Secrets, for rigger serve running in a cluster (--state-backend
// kubernetes): one Secret per state file, in one namespace, labelled with
// the cluster. The engine keeps working on a local directory (a working
// copy, an emptyDir in a pod): Load fills it from the Secrets and binds it
// (statedir.Bind), so that every write and remove of statedir under it goes
// to its Secret first, as a compare-and-swap on the Secret's
// resourceVersion. A write another writer got in before is refused, never
// overwritten.
//
// The recovery rules are the state directory's: a cluster without Secrets
// is an empty state directory, whose PKI is recovered from the
// control-plane nodes (package pkisource), never made anew for a cluster
// whose nodes hold one.
package secretstate

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rigger/rigger/internal/atomicfile"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
)

// The labels, annotation, type and key of a state Secret.
const (
	// ClusterLabel names the cluster (its cluster_name) a Secret holds a
	// state file of.
	ClusterLabel = "rigger.io/cluster"
	// ManagedByLabel is app.kubernetes.io/managed-by, ManagedBy its value.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "rigger"
	// FileAnnotation is the file's path in the state directory (slash
	// separated), e.g. kube-ca.pem or ca-rotation/old/kube-ca.pem.
	FileAnnotation = "rigger.io/state-file"
	// SecretType is the type of every state Secret.
	SecretType corev1.SecretType = "rigger.io/state"
	// DataKey holds the file's bytes.
	DataKey = "content"
	// MaxFileSize is the largest state file a Secret holds: the API
	// server refuses a Secret whose data is larger than 1 MiB.
	MaxFileSize = corev1.MaxSecretSize
	// DefaultWriteTimeout bounds each write and remove of a state file.
	DefaultWriteTimeout = 30 * time.Second
)

// Store keeps the state of clusters in the Secrets of one namespace.
type Store struct {
	// Secrets is the API of the namespace (client.CoreV1().Secrets(ns)).
	Secrets corev1client.SecretInterface
	// Namespace names it, in messages.
	Namespace string
	// WriteTimeout bounds each write (DefaultWriteTimeout when 0).
	WriteTimeout time.Duration

	mu       sync.Mutex
	clusters map[string]*Cluster
}

// Cluster is the backend (statedir.Backend) of one cluster's state: the
// resourceVersion of each of its Secrets as last read or written, against
// which the next write of that file is compared.
type Cluster struct {
	store *Store
	name  string

	mu sync.Mutex
	// rv is the resourceVersion of each file's Secret; a file that is
	// not in it had no Secret when last read.
	rv map[string]string
	// sum is the SHA-256 of each file's content, so that writing a file
	// again unchanged costs no request.
	sum map[string][32]byte
}

var _ statedir.Backend = (*Cluster)(nil)

// ConflictError is a write refused because another writer changed, made or
// removed the file's Secret since this one read it.
type ConflictError struct {
	Namespace, Secret, Cluster, File string
	Err                              error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("state file %s of cluster %s: Secret %s/%s was changed by another writer since rigger read it, "+
		"so it was not overwritten: the next reconcile reads it again (if two rigger serve follow this cluster, stop one)",
		e.File, e.Cluster, e.Namespace, e.Secret)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// TooLargeError is a state file larger than a Secret holds.
type TooLargeError struct {
	Cluster, File string
	Size          int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("state file %s of cluster %s is %d bytes, and a Secret holds at most %d (1 MiB): "+
		"keep this cluster's state in a directory (--state-backend directory)", e.File, e.Cluster, e.Size, MaxFileSize)
}

// SecretName is the name of the Secret of file (slash separated) of
// cluster: readable, and unique by the hash of both.
func SecretName(cluster, file string) string {
	h := sha256.Sum256([]byte(cluster + "\x00" + file))
	return "rigger-state-" + nameSafe(cluster, 40) + "-" + nameSafe(file, 120) + "-" + hex.EncodeToString(h[:5])
}

// nameSafe is s in lower case with every character but letters and digits
// replaced by '-', runs of them collapsed, at most n bytes.
func nameSafe(s string, n int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	out := b.String()
	if len(out) > n {
		out = out[:n]
	}
	return strings.Trim(out, "-")
}

func (s *Store) selector(cluster string) string {
	return labels.Set{ClusterLabel: cluster, ManagedByLabel: ManagedBy}.String()
}

func (s *Store) writeTimeout() time.Duration { return cmp.Or(s.WriteTimeout, DefaultWriteTimeout) }

// checkCluster refuses a cluster name that cannot be a label value (spec
// allows none such).
func checkCluster(name string) error {
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 || name == "" {
		return fmt.Errorf("cluster_name %q cannot label its state Secrets: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// read lists the cluster's Secrets: each file's content and Secret. A
// Secret that does not hold a state file as rigger writes it is a
// *statedir.DamagedError naming it, which stalls (stall.StateDamaged).
func (s *Store) read(ctx context.Context, cluster string) (map[string][]byte, map[string]*corev1.Secret, error) {
	if err := checkCluster(cluster); err != nil {
		return nil, nil, err
	}
	list, err := s.Secrets.List(ctx, metav1.ListOptions{LabelSelector: s.selector(cluster)})
	if err != nil {
		return nil, nil, fmt.Errorf("list the state Secrets of cluster %s in namespace %s: %w", cluster, s.Namespace, err)
	}
	files, secrets := map[string][]byte{}, map[string]*corev1.Secret{}
	var errs []error
	for i := range list.Items {
		sec := &list.Items[i]
		file, err := fileOf(cluster, sec)
		if err != nil {
			errs = append(errs, &statedir.DamagedError{Path: "Secret " + s.Namespace + "/" + sec.Name, Err: fmt.Errorf("%w: "+
				"rigger did not write it so; delete it (the state it held is recovered from the nodes where it can be) or repair it", err)})
			continue
		}
		files[file], secrets[file] = sec.Data[DataKey], sec
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, stall.Stalls(stall.StateDamaged, err)
	}
	return files, secrets, nil
}

// fileOf is the state file a Secret of cluster holds, or why it holds none.
func fileOf(cluster string, sec *corev1.Secret) (string, error) {
	file := sec.Annotations[FileAnnotation]
	switch {
	case file == "":
		return "", fmt.Errorf("no %s annotation", FileAnnotation)
	case !filepath.IsLocal(file) || path.Clean(file) != file || strings.Contains(file, `\`):
		return "", fmt.Errorf("annotation %s=%q is not a path inside a state directory", FileAnnotation, file)
	case sec.Type != SecretType:
		return "", fmt.Errorf("type %q, not %q", sec.Type, SecretType)
	case sec.Name != SecretName(cluster, file):
		return "", fmt.Errorf("it says it holds %s of cluster %s, whose Secret is named %s", file, cluster, SecretName(cluster, file))
	}
	if _, ok := sec.Data[DataKey]; !ok || len(sec.Data) != 1 {
		return "", fmt.Errorf("its data is not the one key %q", DataKey)
	}
	return file, nil
}

// cluster is the backend of cluster, made on first use.
func (s *Store) cluster(name string) *Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clusters == nil {
		s.clusters = map[string]*Cluster{}
	}
	c := s.clusters[name]
	if c == nil {
		c = &Cluster{store: s, name: name, rv: map[string]string{}, sum: map[string][32]byte{}}
		s.clusters[name] = c
	}
	return c
}

// remember makes secrets what c last read.
func (c *Cluster) remember(files map[string][]byte, secrets map[string]*corev1.Secret) {
	c.rv, c.sum = map[string]string{}, map[string][32]byte{}
	for f, sec := range secrets {
		c.rv[f], c.sum[f] = sec.ResourceVersion, sha256.Sum256(files[f])
	}
}

// Load makes dir the working copy of cluster's state: it reads the
// cluster's Secrets, writes their files into dir, removes the state files
// dir holds that they do not (the Secrets are the state; the lock file and
// hidden files stay), and binds dir to the cluster's backend (statedir.Bind),
// so that statedir's writes under dir reach the Secrets first. Call it
// before each reconcile of the cluster: another writer may have changed
// the Secrets since.
//
// A cluster without Secrets whose dir holds state files is refused (it
// stalls, StateDirectoryDamaged): that state was never imported (rigger
// state import), and taking it up would keep a CA only this directory has.
// So is a damaged Secret, a *statedir.DamagedError.
func (s *Store) Load(ctx context.Context, cluster, dir string) (*Cluster, error) {
	files, secrets, err := s.read(ctx, cluster)
	if err != nil {
		return nil, err
	}
	local, err := StateFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 && len(local) > 0 {
		return nil, stall.Stalls(stall.StateDamaged, fmt.Errorf("the state directory %s of cluster %s holds %d state file(s) (%s) "+
			"and namespace %s has no state Secret of it: import them first (rigger state import --cluster %s --state-dir %s), or remove them",
			dir, cluster, len(local), strings.Join(slices.Sorted(maps.Keys(local)), ", "), s.Namespace, cluster, dir))
	}
	if err := mirror(dir, files, local); err != nil {
		return nil, fmt.Errorf("fill the state directory %s of cluster %s from its Secrets: %w", dir, cluster, err)
	}
	c := s.cluster(cluster)
	c.mu.Lock()
	c.remember(files, secrets)
	c.mu.Unlock()
	if _, err := statedir.Bind(dir, c); err != nil {
		return nil, err
	}
	return c, nil
}

// StateFiles reads the state files of dir, by slash-separated path: every
// regular file but the cluster's lock and hidden files (an atomic write's
// temporary file). A missing dir has none; a file larger than a Secret
// holds is an error that names it.
func StateFiles(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == statedir.LockFile {
			return nil
		}
		b, err := readCapped(p)
		if err != nil {
			return err
		}
		files[rel] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the state directory %s: %w", dir, err)
	}
	return files, nil
}

// readCapped reads the state file p, refusing one larger than a Secret
// holds without reading it whole.
func readCapped(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than a Secret holds (1 MiB): rigger writes no such state file; move it away", p)
	}
	return b, nil
}

// mirror makes the state files of dir, which are local, files.
func mirror(dir string, files, local map[string][]byte) error {
	for _, f := range slices.Sorted(maps.Keys(files)) {
		if b, ok := local[f]; ok && bytes.Equal(b, files[f]) {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(f))
		if err := statedir.Make(filepath.Dir(p)); err != nil {
			return err
		}
		if err := atomicfile.Write(p, files[f], 0o600); err != nil {
			return err
		}
	}
	removed := false
	for f := range local {
		if _, ok := files[f]; !ok {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(f))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			removed = true
		}
	}
	if removed {
		return atomicfile.SyncDir(dir)
	}
	return nil
}

func (c *Cluster) conflict(file string, err error) error {
	return &ConflictError{Namespace: c.store.Namespace, Secret: SecretName(c.name, file), Cluster: c.name, File: file, Err: err}
}

// Put writes file's Secret: it creates it when the cluster had none when
// last read, and otherwise updates the version last read or written. A
// Secret made, changed or removed by another writer since is a
// *ConflictError, and is left as it is. Put returns once the API server
// has the Secret.
func (c *Cluster) Put(file string, b []byte) error {
	if len(b) > MaxFileSize {
		return &TooLargeError{Cluster: c.name, File: file, Size: len(b)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rv, exists := c.rv[file]
	sum := sha256.Sum256(b)
	if exists && c.sum[file] == sum {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.store.writeTimeout())
	defer cancel()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            SecretName(c.name, file),
			Namespace:       c.store.Namespace,
			Labels:          map[string]string{ClusterLabel: c.name, ManagedByLabel: ManagedBy},
			Annotations:     map[string]string{FileAnnotation: file},
			ResourceVersion: rv,
		},
		Type: SecretType,
		Data: map[string][]byte{DataKey: b},
	}
	var got *corev1.Secret
	var err error
	if exists {
		got, err = c.store.Secrets.Update(ctx, sec, metav1.UpdateOptions{})
	} else {
		got, err = c.store.Secrets.Create(ctx, sec, metav1.CreateOptions{})
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), exists && apierrors.IsNotFound(err):
		return c.conflict(file, err)
	case err != nil:
		return fmt.Errorf("write state file %s of cluster %s to Secret %s/%s: %w", file, c.name, c.store.Namespace, sec.Name, err)
	}
	c.rv[file], c.sum[file] = got.ResourceVersion, sum
	return nil
}

// Delete removes file's Secret, if the version last read or written is
// still the Secret's: one changed by another writer since is a
// *ConflictError, and is kept.
func (c *Cluster) Delete(file string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	rv, exists := c.rv[file]
	if !exists {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.store.writeTimeout())
	defer cancel()
	name := SecretName(c.name, file)
	err := c.store.Secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case apierrors.IsConflict(err):
		return c.conflict(file, err)
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("remove state file %s of cluster %s, Secret %s/%s: %w", file, c.name, c.store.Namespace, name, err)
	}
	delete(c.rv, file)
	delete(c.sum, file)
	return nil
}
