package spec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"

	yaml2 "go.yaml.in/yaml/v2"
	yaml "go.yaml.in/yaml/v3"
)

// Bounds of what rigger reads, so that no cluster.yml, however made, costs
// much time or memory (the decoder has its own bounds: maxNodes, maxDepth).
const (
	// MaxFileSize is the largest cluster.yml rigger reads.
	MaxFileSize = 8 << 20
	// maxStructure bounds the YAML structure of a file, weighed before it
	// is parsed (see structure): the YAML parser holds every value of
	// the file, some 170 bytes each, before rigger decodes any.
	maxStructure = 1 << 19
)

// Load reads the cluster.yml at path, decodes it strictly, applies defaults
// and validates it. It returns every diagnostic, warnings included; err is
// non-nil when the file cannot be read or has errors (an *InvalidError).
func Load(path string) (*Cluster, Diagnostics, error) {
	return LoadContext(context.Background(), path)
}

// LoadContext is Load that stops when ctx ends, reading, decoding or
// validating; it then returns the cause alone.
func LoadContext(ctx context.Context, path string) (*Cluster, Diagnostics, error) {
	return LoadWith(ctx, path, Options{})
}

// LoadWith is LoadContext with opts: a file encrypted with SOPS is read
// with opts.Decrypt.
func LoadWith(ctx context.Context, path string, opts Options) (*Cluster, Diagnostics, error) {
	if ctx.Err() != nil {
		return nil, nil, context.Cause(ctx)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read cluster file: %w", err)
	}
	defer f.Close()
	// A read that blocks (a pipe) ends when ctx does.
	stop := context.AfterFunc(ctx, func() { f.Close() })
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	stop()
	if ctx.Err() != nil {
		return nil, nil, context.Cause(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read cluster file: %w", err)
	}
	c, diags, err := ParseWith(ctx, data, path, opts)
	if err != nil {
		return nil, nil, err
	}
	return c, diags, diags.Err()
}

// Parse is Load for a cluster.yml already in memory; file names it in
// diagnostics. The cluster is returned, defaulted, even when there are
// errors, for tools that show what could be read.
func Parse(data []byte, file string) (*Cluster, Diagnostics) {
	c, diags, _ := ParseContext(context.Background(), data, file)
	return c, diags
}

// ParseContext is Parse that stops when ctx ends, parsing, decoding or
// validating; it then returns the cause alone.
func ParseContext(ctx context.Context, data []byte, file string) (*Cluster, Diagnostics, error) {
	return ParseWith(ctx, data, file, Options{})
}

// ParseWith is ParseContext with opts: a file encrypted with SOPS is read
// with opts.Decrypt, and its diagnostics name the lines of the encrypted
// file. A warning names the fields rigger shows whose values were
// encrypted.
func ParseWith(ctx context.Context, data []byte, file string, opts Options) (*Cluster, Diagnostics, error) {
	fail := func(line int, detail, format string, args ...any) (*Cluster, Diagnostics, error) {
		return nil, Diagnostics{{Severity: SeverityError, File: file, Line: line, Summary: fmt.Sprintf(format, args...), Detail: detail}}, nil
	}
	if len(data) > MaxFileSize {
		return fail(0, "", "the file is larger than %d MiB", MaxFileSize>>20)
	}
	if _, line := structure(data, maxStructure); line > 0 {
		return fail(line, fmt.Sprintf("rigger reads at most about %d values (each ':', ',', '- ', '[' and '{' counts, in text blocks too). "+
			"Move long manifests from addons to files listed in addons_include, and reduce the use of YAML anchors and aliases.", maxStructure/2),
			"the file holds more YAML values than rigger reads")
	}
	root, err := parseYAML(cancellableReader{ctx.Err, bytes.NewReader(data)})
	if ctx.Err() != nil {
		return nil, nil, context.Cause(ctx)
	}
	if err != nil {
		line, msg := yamlErrorLine(err)
		// yaml.v3 reports a syntax error at the line of its context (the
		// start of the enclosing block); yaml.v2 nearer to the problem.
		var v2 any
		if err2 := yaml2.Unmarshal(data, &v2); err2 != nil {
			if line2, _ := yamlErrorLine(err2); line2 > line {
				line = line2
			}
		}
		return fail(line, "Fix the YAML syntax; indentation is with spaces, and a key is followed by ': '.", "%s", msg)
	}
	if root == nil {
		return fail(0, "Describe the cluster: at least nodes: with address, user and role.", "the file is empty")
	}
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "A cluster.yml is a mapping of keys such as nodes: and services:.", "expected a mapping at the top level, got %s", kindName(root))
	}

	encrypted, bad := decryptSOPS(ctx, data, root, file, opts.Decrypt)
	if ctx.Err() != nil {
		return nil, nil, context.Cause(ctx)
	}
	if bad != nil {
		return nil, Diagnostics{*bad}, nil
	}

	var c Cluster
	var diags collector
	d := newDecoder(file, &diags, ctx.Err)
	d.encrypted = encrypted
	d.value(root, reflect.ValueOf(&c).Elem(), "")
	if d.err != nil {
		return nil, nil, context.Cause(ctx)
	}
	d.warnShownEncrypted(root)
	given := serviceImages(&c.Services)
	noBackupConfig := c.Services.Etcd.BackupConfig == nil
	SetDefaults(&c)
	if !d.stopped {
		// A decode that stopped at a bound left the cluster incomplete:
		// validating it would report what was never read.
		v := newValidator(d)
		v.givenImages, v.noBackupConfig = given, noBackupConfig
		if err := v.validate(ctx, &c); err != nil {
			return nil, nil, err
		}
	}
	return &c, diags.result(file), nil
}

// structure weighs the YAML structure of data; when the weight passes
// limit, it stops and returns the line where it did (else line is 0).
// Each mark that
// can bring values is weighed by the most values it can bring: ':' (a
// key, its value and the mapping), ',' (an item and its null value), '-'
// or '?' before a blank (an item or key, its value, the collection), '['
// and '{' (the collection, an item and its null value). So the weight is
// at least the number of values the YAML parser builds, whatever the text
// (quoted, commented or in a text block, which are weighed too: this
// costs long text blocks, never the bound).
func structure(data []byte, limit int) (weight, line int) {
	line = 1
	for i, c := range data {
		switch c {
		case '\n':
			line++
		case ':', '[', '{':
			weight += 3
		case ',':
			weight += 2
		case '-', '?':
			if i+1 == len(data) || isBlank(data[i+1]) {
				weight += 3
			}
		}
		if weight > limit {
			return weight, line
		}
	}
	return weight, 0
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// cancellableReader reads r until cancelled (a ctx.Err) returns an
// error: the YAML parser reads its input a little at a time, so parsing
// ends soon after the context does.
type cancellableReader struct {
	cancelled func() error
	r         io.Reader
}

func (c cancellableReader) Read(p []byte) (int, error) {
	if err := c.cancelled(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// parseYAML parses the one document of r; nil when there is none.
func parseYAML(r io.Reader) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library is third-party code fed untrusted input: a panic
		// there becomes an error, never a crash.
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("yaml: cannot parse the file (%v)", r)
		}
	}()
	dec := yaml.NewDecoder(r)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("yaml: line %d: the file holds more than one YAML document (---); a cluster.yml holds one", next.Line)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlErrorLine splits "yaml: line 3: msg" into 3 and "msg".
func yamlErrorLine(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, "invalid YAML: " + msg[len(m[0]):]
	}
	return 0, "invalid YAML: " + msg
}
