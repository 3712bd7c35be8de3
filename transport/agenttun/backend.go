package agenttun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A Backend keeps what a Store remembers: the CA, and records by key. A
// key is "<kind>/<64 hex digits>.json", kind one of RecordKinds: a join
// token by its hash, a join waiting for approval, a node's certificate.
// Every write is a compare-and-swap on the version the writer read, so
// that several processes (rigger serve's replicas, `rigger agent
// command`) share one backend without losing a write: a create meets
// ErrExists when the record was made meanwhile, an update or a removal of
// a version no longer current ErrConflict. A missing record or CA is
// fs.ErrNotExist.
type Backend interface {
	// ReadCA returns the CA's certificate and key, PEM.
	ReadCA(ctx context.Context) (certPEM, keyPEM []byte, err error)
	// CreateCA keeps a new CA, or returns ErrExists if one was made
	// meanwhile (then ReadCA reads that one).
	CreateCA(ctx context.Context, certPEM, keyPEM []byte) error
	// Get reads the record key.
	Get(ctx context.Context, key string) (Record, error)
	// Put creates key when version is "", and otherwise replaces that
	// version of it.
	Put(ctx context.Context, key string, b []byte, version string) error
	// Delete removes key: the version given, or any when version is "".
	Delete(ctx context.Context, key, version string) error
	// List reads the records of one kind.
	List(ctx context.Context, kind string) ([]Record, error)
	// Where says where the records are, for messages.
	Where() string
}

// Record is a record of a Backend.
type Record struct {
	Key  string
	Data []byte
	// Version is what the next Put or Delete of the record compares.
	Version string
}

// The errors of a Backend's writes.
var (
	ErrExists   = errors.New("made by another writer meanwhile")
	ErrConflict = errors.New("changed or removed by another writer since it was read")
)

// The kinds of records, each a directory of a Dir backend.
const (
	kindTokens    = "tokens"
	kindApprovals = "approvals"
	kindNodes     = "nodes"
)

// RecordKinds are the kinds of records a Store keeps.
var RecordKinds = []string{kindTokens, kindApprovals, kindNodes}

// maxRecord bounds a record when it is read back.
const maxRecord = 4096

var keyPattern = regexp.MustCompile(`^(tokens|approvals|nodes)/[0-9a-f]{64}\.json$`)

// CheckKey refuses a key a Store does not write.
func CheckKey(key string) error {
	if !keyPattern.MatchString(key) {
		return fmt.Errorf("%q is not a key of the agent tunnel's records (kind/<sha256>.json)", key)
	}
	return nil
}

// recordKey is the key of a record of kind named by the hash of id.
func recordKey(kind, id string) string { return kind + "/" + hashToken(id) + ".json" }

// Files of a Dir backend, each mode 0600: the CA, and the nodes'
// certificates as an older rigger kept them all in one file (moved into
// a record per node when the directory is opened). A record of each kind
// is a file of the kind's directory (tokens/, approvals/, nodes/).
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	stateFile  = "agents.json"
)

// maxStateBytes bounds agents.json when it is read back.
const maxStateBytes = 16 << 20

// Dir is a Backend on a directory (rigger serve's --state-dir): the CA in
// ca.pem and ca-key.pem, each record in a file of its kind's directory,
// every file mode 0600 and replaced whole. A record's version is the
// SHA-256 of its content; the compare-and-swap holds among the users of
// one Dir and, for creates and removals, among processes.
type Dir struct {
	dir string
	mu  sync.Mutex
}

// NewDir is the Backend on dir, made if missing.
func NewDir(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent tunnel state: %w", err)
	}
	return &Dir{dir: dir}, nil
}

func (d *Dir) Where() string { return d.dir }

func (d *Dir) ReadCA(context.Context) ([]byte, []byte, error) {
	certPEM, cerr := os.ReadFile(filepath.Join(d.dir, caCertFile))
	keyPEM, kerr := os.ReadFile(filepath.Join(d.dir, caKeyFile))
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		return nil, nil, fs.ErrNotExist
	case cerr != nil || kerr != nil:
		return nil, nil, fmt.Errorf("the CA is incomplete (%w): restore %s and %s from a backup",
			errors.Join(cerr, kerr), caCertFile, caKeyFile)
	}
	return certPEM, keyPEM, nil
}

// CreateCA writes the key first: a crash in between leaves a key without
// a certificate, which ReadCA refuses rather than making a new CA.
func (d *Dir) CreateCA(_ context.Context, certPEM, keyPEM []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := createFile(filepath.Join(d.dir, caKeyFile), keyPEM); err != nil {
		return err
	}
	return writeFile(filepath.Join(d.dir, caCertFile), certPEM)
}

func (d *Dir) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.dir, filepath.FromSlash(key)), nil
}

func (d *Dir) Get(_ context.Context, key string) (Record, error) {
	p, err := d.path(key)
	if err != nil {
		return Record{}, err
	}
	b, err := readCapped(p, maxRecord)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: key, Data: b, Version: contentVersion(b)}, nil
}

func (d *Dir) Put(_ context.Context, key string, b []byte, version string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if version == "" {
		return createFile(p, b)
	}
	old, err := readCapped(p, maxRecord)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ErrConflict
	case err != nil:
		return err
	case contentVersion(old) != version:
		return ErrConflict
	}
	return writeFile(p, b)
}

func (d *Dir) Delete(_ context.Context, key, version string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if version != "" {
		old, err := readCapped(p, maxRecord)
		if err != nil {
			return err
		}
		if contentVersion(old) != version {
			return ErrConflict
		}
	}
	// Of two processes removing one file, one succeeds.
	return os.Remove(p)
}

func (d *Dir) List(_ context.Context, kind string) ([]Record, error) {
	entries, err := os.ReadDir(filepath.Join(d.dir, kind))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, e := range entries {
		key := kind + "/" + e.Name()
		if CheckKey(key) != nil {
			continue // a temporary file, or not the store's
		}
		b, err := readCapped(filepath.Join(d.dir, kind, e.Name()), maxRecord)
		if err != nil {
			// An unreadable record is as good as gone: its kind's
			// sweep removes it.
			out = append(out, Record{Key: key})
			continue
		}
		out = append(out, Record{Key: key, Data: b, Version: contentVersion(b)})
	}
	return out, nil
}

// migrate moves what an older rigger kept in one file, agents.json (the
// nodes' certificates by "cluster/node"), into a record per node, and
// removes that file once every record is written: a crash in between
// moves it again.
func (d *Dir) migrate(ctx context.Context) error {
	p := filepath.Join(d.dir, stateFile)
	b, err := readCapped(p, maxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent tunnel state: %w", err)
	}
	var old struct {
		Nodes map[string]*NodeRecord `json:"nodes"`
	}
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("agent tunnel state %s: %w", p, err)
	}
	for key, r := range old.Nodes {
		cluster, node, ok := strings.Cut(key, "/")
		if !ok || r == nil {
			continue
		}
		r.Cluster, r.Node = cluster, node
		rb, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := d.Put(ctx, recordKey(kindNodes, key), rb, ""); err != nil && !errors.Is(err, ErrExists) {
			return fmt.Errorf("agent tunnel state: move node %s out of %s: %w", key, p, err)
		}
	}
	return os.Remove(p)
}

// contentVersion is a Dir record's version.
func contentVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// createFile writes path with b, mode 0600, unless it exists (ErrExists):
// the content goes to a temporary file linked into place, so that no
// reader sees a torn file and of two creators one wins.
func createFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ErrExists
		}
		return err
	}
	return nil
}

// writeFile replaces path with b, mode 0600, so that a crash leaves the
// old file or the new one, never a torn one.
func writeFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// readCapped reads path, refusing a file over max bytes.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", path, max)
	}
	return b, nil
}

// memory is a Backend in memory, for a Store without a directory.
type memory struct {
	mu      sync.Mutex
	ca      [2][]byte
	records map[string]Record
	next    int
}

func (m *memory) Where() string { return "memory" }

func (m *memory) ReadCA(context.Context) ([]byte, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ca[0] == nil {
		return nil, nil, fs.ErrNotExist
	}
	return m.ca[0], m.ca[1], nil
}

func (m *memory) CreateCA(_ context.Context, certPEM, keyPEM []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ca[0] != nil {
		return ErrExists
	}
	m.ca = [2][]byte{certPEM, keyPEM}
	return nil
}

func (m *memory) Get(_ context.Context, key string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[key]
	if !ok {
		return Record{}, fs.ErrNotExist
	}
	return r, nil
}

func (m *memory) Put(_ context.Context, key string, b []byte, version string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.records[key]
	switch {
	case version == "" && ok:
		return ErrExists
	case version != "" && (!ok || old.Version != version):
		return ErrConflict
	}
	if m.records == nil {
		m.records = map[string]Record{}
	}
	m.next++
	m.records[key] = Record{Key: key, Data: bytes.Clone(b), Version: strconv.Itoa(m.next)}
	return nil
}

func (m *memory) Delete(_ context.Context, key, version string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.records[key]
	switch {
	case !ok:
		return fs.ErrNotExist
	case version != "" && old.Version != version:
		return ErrConflict
	}
	delete(m.records, key)
	return nil
}

func (m *memory) List(_ context.Context, kind string) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for k, r := range m.records {
		if strings.HasPrefix(k, kind+"/") {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Copy copies what the Backend from holds into to, which holds no CA
// (rigger serve moving its directory's records into Secrets): the records first, the CA last, so that a
// copy cut short is made again at the next start (the CA's absence says
// so). It returns how many records it copied.
func Copy(ctx context.Context, from, to Backend) (int, error) {
	certPEM, keyPEM, err := from.ReadCA(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kind := range RecordKinds {
		recs, err := from.List(ctx, kind)
		if err != nil {
			return n, err
		}
		for _, r := range recs {
			if r.Data == nil {
				continue
			}
			if err := to.Put(ctx, r.Key, r.Data, ""); err != nil && !errors.Is(err, ErrExists) {
				return n, err
			}
			n++
		}
	}
	return n, to.CreateCA(ctx, certPEM, keyPEM)
}
