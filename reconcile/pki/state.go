package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rigger/rigger/internal/atomicfile"
	"github.com/rigger/rigger/reconcile/statedir"
)

// NodeDir is where certificates live on the nodes, as RKE puts them.
const NodeDir = "/etc/kubernetes/ssl"

// NodePath is where a name's certificate and key live on a node:
// /etc/kubernetes/ssl/kube-apiserver.pem and kube-apiserver-key.pem.
func NodePath(name string) (certPath, keyPath string) {
	return path.Join(NodeDir, name+".pem"), path.Join(NodeDir, name+"-key.pem")
}

// Files is every file of the set, keyed by its path on a node (NodePath).
// Which node gets which files is the caller's choice.
func Files(s *Set) map[string][]byte {
	out := map[string][]byte{}
	if s == nil {
		return out
	}
	for name, c := range s.Certs {
		cp, kp := NodePath(name)
		if c.CertPEM != nil {
			out[cp] = c.CertPEM
		}
		if c.KeyPEM != nil {
			out[kp] = c.KeyPEM
		}
	}
	return out
}

// maxPEMFileSize bounds a certificate or key file pairFiles takes: RKE's
// and rigger's are a few KiB, a 16384-bit RSA key 13 KiB.
const maxPEMFileSize = 64 << 10

// pairFiles groups file contents by name: name.pem and name-key.pem. Files
// that are not .pem, and the external etcd's, are skipped; one over
// maxPEMFileSize is refused.
func pairFiles(files map[string][]byte) (map[string]Cert, error) {
	certs := map[string]Cert{}
	for p, b := range files {
		base := path.Base(filepath.ToSlash(p))
		if !strings.HasSuffix(base, ".pem") {
			continue
		}
		if len(b) > maxPEMFileSize {
			return nil, fmt.Errorf("%s is %d KiB, larger than any certificate or key (%d KiB)", p, len(b)>>10, maxPEMFileSize>>10)
		}
		name := strings.TrimSuffix(base, ".pem")
		if k, _ := strings.CutSuffix(name, "-key"); k == ExternalEtcdCACertName || k == ExternalEtcdClientCertName {
			continue // the user's (services.etcd), not the PKI's
		}
		if k, ok := strings.CutSuffix(name, "-key"); ok {
			c := certs[k]
			c.KeyPEM = bytes.Clone(b)
			certs[k] = c
			continue
		}
		c := certs[name]
		c.CertPEM = bytes.Clone(b)
		certs[name] = c
	}
	return certs, nil
}

// FromFiles rebuilds a Set from files read back from a node (paths as
// NodePath gives them; other files are ignored): the way back when the state
// directory is lost. It refuses a set without kube-ca and its key, a key that
// does not match its certificate, and a certificate its CA did not sign.
// A certificate without its key is kept: Ensure reissues it.
func FromFiles(files map[string][]byte) (*Set, error) {
	certs, err := pairFiles(files)
	if err != nil {
		return nil, fmt.Errorf("recover certificates: %w", err)
	}
	for name, c := range certs {
		if c.CertPEM == nil {
			return nil, fmt.Errorf("recover %s: %s-key.pem has no %s.pem beside it", name, name, name)
		}
	}
	s := &Set{Certs: certs}
	if err := verify(s); err != nil {
		return nil, fmt.Errorf("recover certificates: %w", err)
	}
	return s, nil
}

// verify checks that the set has kube-ca with its key, that every key
// matches its certificate, and that every certificate chains to its CA.
func verify(s *Set) error {
	caCert, ok := s.Certs[CACertName]
	if !ok {
		return fmt.Errorf("no %s.pem", CACertName)
	}
	ca, err := parsePair(caCert)
	if err != nil {
		return fmt.Errorf("read %s: %w", CACertName, err)
	}
	roots := map[string]*x509.Certificate{CACertName: ca.cert}
	if rh, ok := s.Certs[RequestHeaderCACertName]; ok {
		p, err := parsePair(rh)
		if err != nil {
			return fmt.Errorf("read %s: %w", RequestHeaderCACertName, err)
		}
		roots[RequestHeaderCACertName] = p.cert
	}
	var errs []error
	for _, name := range s.Names() {
		c := s.Certs[name]
		if roots[name] != nil {
			continue
		}
		if name == ServiceAccountTokenKeyName {
			if why := checkKeyPair(c); why != "" {
				errs = append(errs, fmt.Errorf("%s: %s", name, why))
			}
			continue
		}
		crt, err := parseCert(c.CertPEM)
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", name, err))
			continue
		}
		if len(c.KeyPEM) > 0 {
			if _, err := parsePair(c); err != nil {
				errs = append(errs, fmt.Errorf("read %s: %w", name, err))
				continue
			}
		}
		signer := CACertName
		if name == APIProxyClientCertName {
			signer = RequestHeaderCACertName
		}
		if roots[signer] == nil {
			errs = append(errs, fmt.Errorf("%s: no %s.pem to check it against", name, signer))
		} else if err := crt.CheckSignatureFrom(roots[signer]); err != nil {
			errs = append(errs, fmt.Errorf("%s: not signed by %s: %w", name, signer, err))
		}
	}
	return errors.Join(errs...)
}

// NotFoundError is Load's answer when the state directory holds no PKI: the
// caller recovers it from a control-plane node (FromFiles) before it ever
// makes a new one.
type NotFoundError struct {
	Dir string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no certificates in state directory %s: recover them from a control-plane node", e.Dir)
}

// keyMode is the widest mode a private key in the state directory may
// have (statedir writes them so).
const keyMode = 0o600

// Save writes the set to the state directory dir (mode 0700), one name.pem
// and name-key.pem per name (mode 0600), each replaced atomically, and
// removes the .pem files of names the set no longer has. A crash half way
// leaves each file whole, old or new; a certificate left beside a key it does
// not match is reissued by the next Ensure (CAs never change, so never
// theirs).
func Save(dir string, s *Set) error {
	if err := statedir.Make(dir); err != nil {
		return err
	}
	want := map[string][]byte{}
	for p, b := range Files(s) {
		want[path.Base(p)] = b
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := statedir.WriteFile(dir, n, want[n]); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read state directory: %w", err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".pem") && want[n] == nil && e.Type().IsRegular() {
			if err := statedir.Remove(dir, n); err != nil {
				return fmt.Errorf("remove stale certificate file: %w", err)
			}
		}
	}
	return atomicfile.SyncDir(dir)
}

// Load reads the PKI from the state directory dir. A missing directory, or
// one without kube-ca.pem, is a *NotFoundError. A key file with a mode wider
// than 0600 is refused until it is chmod 600. Load checks what FromFiles
// checks.
func Load(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Dir: dir}
	}
	if err != nil {
		return nil, fmt.Errorf("read state directory: %w", err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".pem") || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, n)
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("read state directory: %w", err)
		}
		if perm := info.Mode().Perm(); strings.HasSuffix(n, "-key.pem") && perm&^keyMode != 0 {
			return nil, fmt.Errorf("load certificates: private key %s has mode %#o, wider than 0600: run chmod 600 %s", p, perm, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("load certificates: %w", err)
		}
		files[path.Join(NodeDir, n)] = b
	}
	if _, ok := files[path.Join(NodeDir, CACertName+".pem")]; !ok {
		return nil, &NotFoundError{Dir: dir}
	}
	certs, err := pairFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load certificates from %s: %w", dir, err)
	}
	s := &Set{Certs: certs}
	if err := verify(s); err != nil {
		return nil, fmt.Errorf("load certificates from %s: %w", dir, err)
	}
	return s, nil
}
