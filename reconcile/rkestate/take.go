package rkestate

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// EncryptionFile is the name of the secrets encryption configuration in
// the state directory: the EncryptionConfiguration YAML, as RKE writes it to
// /etc/kubernetes/ssl/encryption.yaml on controlplane nodes.
const EncryptionFile = "encryption.yaml"

// Check says whether the state is of the cluster c describes: the same
// cluster_name, and every node of the state in c (by address) with the
// same roles, internal addresses and hostnames, which name the etcd
// members and the certificates. A node of c that the state lacks is no
// difference: RKE did not provision it (rke up drops a node it cannot
// reach, with a warning), and rigger adds it (ToAdd). Every difference is
// listed.
func (st *State) Check(c *spec.Cluster) error {
	var errs []error
	if st.ClusterName != "" && st.ClusterName != c.ClusterName {
		errs = append(errs, fmt.Errorf("cluster_name is %q in cluster.yml but %q in %s", c.ClusterName, st.ClusterName, st.Source))
	}
	theirs := map[string]Node{}
	for _, n := range st.Nodes {
		theirs[n.Address] = n
	}
	ours := map[string]bool{}
	for _, n := range c.Nodes {
		ours[n.Address] = true
		r, ok := theirs[n.Address]
		if !ok {
			continue // ToAdd
		}
		if a, b := sortedRoles(n.Role), sortedRoles(r.Roles); !slices.Equal(a, b) {
			errs = append(errs, fmt.Errorf("node %s has roles %s in cluster.yml but %s in %s", n.Address,
				clipped(strings.Join(a, ",")), clipped(strings.Join(b, ",")), st.Source))
		}
		if a, b := orAddress(n.InternalAddress, n.Address), orAddress(r.InternalAddress, r.Address); a != b {
			errs = append(errs, fmt.Errorf("node %s has internal_address %s in cluster.yml but %s in %s", n.Address, a, clipped(b), st.Source))
		}
		if a, b := strings.ToLower(orAddress(n.HostnameOverride, n.Address)), strings.ToLower(orAddress(r.HostnameOverride, r.Address)); a != b {
			errs = append(errs, fmt.Errorf("node %s has hostname_override %s in cluster.yml but %s in %s", n.Address, a, clipped(b), st.Source))
		}
	}
	for _, n := range st.Nodes {
		if !ours[n.Address] {
			errs = append(errs, fmt.Errorf("node %s is in %s but not in cluster.yml", clipped(n.Address), st.Source))
		}
	}
	if len(errs) > 0 {
		if len(errs) > maxListed {
			errs = append(errs[:maxListed], fmt.Errorf("and %d more differences", len(errs)-maxListed))
		}
		return fmt.Errorf("the state read from %s is not that of this cluster.yml: %w; adopt the cluster as RKE last deployed it (the cluster.yml of the last rke up), then change cluster.yml with rigger",
			st.Source, errors.Join(errs...))
	}
	return nil
}

// ToAdd are the addresses of the nodes of c that the state lacks: RKE did
// not provision them, and the next apply adds them, as nodes added to
// cluster.yml.
func (st *State) ToAdd(c *spec.Cluster) []string {
	theirs := map[string]bool{}
	for _, n := range st.Nodes {
		theirs[n.Address] = true
	}
	var add []string
	for _, n := range c.Nodes {
		if !theirs[n.Address] {
			add = append(add, n.Address)
		}
	}
	return add
}

// maxListed bounds the differences Check lists (and the errors Take
// lists): a state file of a huge or hostile cluster must not make an
// error of megabytes.
const maxListed = 20

// clipped shortens a value from the state (an address, a name) quoted in
// an error.
func clipped(s string) string { return clip.Ellipsis(s, 256) }

func sortedRoles(r []string) []string {
	out := slices.Clone(r)
	slices.Sort(out)
	return slices.Compact(out)
}

func orAddress(v, address string) string {
	if v == "" {
		return address
	}
	return v
}

// ItemAction is what Take does with one of RKE's names.
type ItemAction string

const (
	// Imported: rigger uses it as RKE made it.
	Imported ItemAction = "imported"
	// Unused: RKE has it, rigger does not use it (the kubelets' serving
	// certificates, the external etcd's files); not imported.
	Unused ItemAction = "not used by rigger"
	// Missing: rigger needs it, RKE's state lacks it; the next apply
	// issues it, signed by RKE's CA.
	Missing ItemAction = "missing: rigger issues it, signed by the imported CA"
)

// Item is one name of what was taken over and what became of it. It
// holds no key.
type Item struct {
	Name   string
	Action ItemAction
	// NotAfter is when the certificate expires (zero for the
	// service-account key and what was not imported).
	NotAfter time.Time
	// Source is where it came from (State.Source).
	Source string
}

// Taken is the PKI and encryption configuration rigger takes over.
type Taken struct {
	Set              *pki.Set
	Items            []Item
	EncryptionConfig []byte
	// ToAdd are the nodes of cluster.yml RKE did not provision
	// (State.ToAdd): the next apply adds them.
	ToAdd []string
}

// Take picks from the state what the cluster of req needs (pki.Request's
// names), checks it (every key matches its certificate, every certificate
// chains to its CA: pki.FromFiles) and the encryption configuration (an
// EncryptionConfiguration), and lists what it took, left out and lacks.
func (st *State) Take(req pki.Request, now time.Time) (*Taken, error) {
	need, err := req.Names()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	t := &Taken{}
	for _, name := range slices.Sorted(maps.Keys(st.Certs)) {
		c := st.Certs[name]
		if !slices.Contains(need, name) {
			t.Items = append(t.Items, Item{Name: name, Action: Unused, Source: st.Source})
			continue
		}
		cp, kp := pki.NodePath(name)
		files[cp] = c.CertPEM
		if c.KeyPEM != nil {
			files[kp] = c.KeyPEM
		}
	}
	if _, ok := st.Certs[pki.CACertName]; !ok {
		return nil, fmt.Errorf("take certificates from %s: it has no %s: rigger will not make a new CA for a running cluster", st.Source, pki.CACertName)
	}
	for _, name := range []string{pki.CACertName, pki.RequestHeaderCACertName} {
		if c, ok := st.Certs[name]; ok && slices.Contains(need, name) {
			err := checkCA(name, c.CertPEM, c.KeyPEM, now)
			if err == nil {
				// Proven by what it signs: its certificate may say
				// CA and still forbid the cluster's names or usages.
				err = pki.ProveCA(name, c, req, now)
			}
			if err != nil {
				return nil, fmt.Errorf("take certificates from %s: %s: rigger would issue certificates no one can verify, and replace RKE's working ones with them; "+
					"give the state of the running cluster (its %s is in /etc/kubernetes/ssl on a controlplane node)", st.Source, clip.Ellipsis(err.Error(), 1024), name)
			}
		}
	}
	set, err := pki.FromFiles(files)
	if err != nil {
		return nil, fmt.Errorf("take certificates from %s: %w", st.Source, err)
	}
	t.Set = set
	expiry := pki.Expiry(set)
	for _, name := range need {
		if _, ok := set.Certs[name]; ok {
			t.Items = append(t.Items, Item{Name: name, Action: Imported, NotAfter: expiry[name], Source: st.Source})
		} else {
			t.Items = append(t.Items, Item{Name: name, Action: Missing})
		}
	}
	slices.SortStableFunc(t.Items, func(a, b Item) int { return strings.Compare(a.Name, b.Name) })
	if st.EncryptionConfig != nil {
		if err := checkEncryption(st.EncryptionConfig); err != nil {
			return nil, fmt.Errorf("take the encryption configuration from %s: %w", st.Source, err)
		}
		t.EncryptionConfig = st.EncryptionConfig
	}
	return t, nil
}

// checkCA checks that a CA's certificate can sign certificates others
// verify: a CA (basic constraints), allowed to sign certificates
// (keyCertSign), valid now, with its key, which matches it.
func checkCA(name string, certPEM, keyPEM []byte, now time.Time) error {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return fmt.Errorf("%s: no CERTIFICATE block", name)
	}
	crt, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case !crt.BasicConstraintsValid || !crt.IsCA:
		return fmt.Errorf("%s is not a CA certificate (basic constraints CA:FALSE or absent)", name)
	case crt.KeyUsage != 0 && crt.KeyUsage&x509.KeyUsageCertSign == 0:
		return fmt.Errorf("%s may not sign certificates (its key usage lacks keyCertSign)", name)
	case now.Before(crt.NotBefore):
		return fmt.Errorf("%s is not valid before %s", name, crt.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(crt.NotAfter):
		return fmt.Errorf("%s expired on %s", name, crt.NotAfter.UTC().Format(time.RFC3339))
	case len(keyPEM) == 0:
		return fmt.Errorf("%s comes without its key", name)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("%s: its key does not match its certificate", name)
	}
	return nil
}

// encryptionKeyLengths are the key lengths (bytes) the API server takes
// for each provider with keys.
var encryptionKeyLengths = map[string][]int{"aescbc": {16, 24, 32}, "aesgcm": {16, 24, 32}, "secretbox": {32}}

// checkEncryption checks that b is an EncryptionConfiguration whose keys
// are base64 of a length the API server takes; its errors quote nothing
// of it (it holds the keys).
func checkEncryption(b []byte) error {
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Resources  []struct {
			Providers []map[string]struct {
				Keys []struct {
					Name   string `yaml:"name"`
					Secret string `yaml:"secret"`
				} `yaml:"keys"`
			} `yaml:"providers"`
		} `yaml:"resources"`
	}
	if err := yaml.Unmarshal(b, &head); err != nil {
		return errors.New("encryptionConfig is not YAML")
	}
	if head.Kind != "EncryptionConfiguration" || !strings.HasPrefix(head.APIVersion, "apiserver.config.k8s.io/") {
		return fmt.Errorf("encryptionConfig is a %s of %s, not an apiserver.config.k8s.io EncryptionConfiguration", head.Kind, head.APIVersion)
	}
	if len(head.Resources) == 0 {
		return errors.New("encryptionConfig lists no resources")
	}
	for i, r := range head.Resources {
		for j, p := range r.Providers {
			for kind, prov := range p {
				lengths, ok := encryptionKeyLengths[kind]
				if !ok {
					continue
				}
				for k, key := range prov.Keys {
					where := fmt.Sprintf("encryptionConfig resources[%d].providers[%d].%s.keys[%d]", i, j, kind, k)
					raw, err := base64.StdEncoding.DecodeString(key.Secret)
					switch {
					case key.Name == "":
						return fmt.Errorf("%s has no name", where)
					case err != nil:
						return fmt.Errorf("%s (%s): its secret is not base64", where, clipped(key.Name))
					case !slices.Contains(lengths, len(raw)):
						return fmt.Errorf("%s (%s): its secret is %d bytes, and %s takes keys of %v bytes", where,
							clipped(key.Name), len(raw), kind, lengths)
					}
				}
			}
		}
	}
	return nil
}

// DifferentCAError is Save's refusal of a state directory that holds
// another CA than the one taken over.
type DifferentCAError struct {
	Dir string
}

func (e *DifferentCAError) Error() string {
	return fmt.Sprintf("state directory %s already holds a different kube-ca: it belongs to another cluster; "+
		"give another --state-dir, or move %s away if it is left over from an earlier attempt", e.Dir, e.Dir)
}

// Save writes what was taken to the state directory dir: the PKI
// (pki.Save) and the encryption configuration (EncryptionFile, mode 0600).
// A directory that holds another CA is refused (*DifferentCAError); one
// with the same CA (an adopt run again) is brought up to date.
func (t *Taken) Save(dir string) error {
	existing, err := pki.Load(dir)
	var nf *pki.NotFoundError
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return fmt.Errorf("check state directory %s: %w", dir, err)
	case !bytes.Equal(existing.Certs[pki.CACertName].CertPEM, t.Set.Certs[pki.CACertName].CertPEM):
		return &DifferentCAError{Dir: dir}
	}
	if t.EncryptionConfig == nil {
		if _, err := os.Stat(filepath.Join(dir, EncryptionFile)); err == nil {
			return fmt.Errorf("state directory %s holds an %s, but the cluster taken over has no secrets encryption: move it away", dir, EncryptionFile)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("check state directory %s: %w", dir, err)
		}
	}
	if err := pki.Save(dir, t.Set); err != nil {
		return err
	}
	if t.EncryptionConfig != nil {
		if err := statedir.WriteFile(dir, EncryptionFile, t.EncryptionConfig); err != nil {
			return fmt.Errorf("write %s: %w", EncryptionFile, err)
		}
	}
	return nil
}
