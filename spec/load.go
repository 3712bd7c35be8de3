package spec

import (
	"bytes"
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

// MaxFileSize is the largest cluster.yml rigger reads.
const MaxFileSize = 8 << 20

// Load reads the cluster.yml at path, decodes it strictly, applies defaults
// and validates it. It returns every diagnostic, warnings included; err is
// non-nil when the file cannot be read or has errors (an *InvalidError).
func Load(path string) (*Cluster, Diagnostics, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read cluster file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read cluster file: %w", err)
	}
	c, diags := Parse(data, path)
	return c, diags, diags.Err()
}

// Parse is Load for a cluster.yml already in memory; file names it in
// diagnostics. The cluster is returned, defaulted, even when there are
// errors, for tools that show what could be read.
func Parse(data []byte, file string) (*Cluster, Diagnostics) {
	fail := func(line int, detail, format string, args ...any) (*Cluster, Diagnostics) {
		return nil, Diagnostics{{Severity: SeverityError, File: file, Line: line, Summary: fmt.Sprintf(format, args...), Detail: detail}}
	}
	if len(data) > MaxFileSize {
		return fail(0, "", "the file is larger than %d MiB", MaxFileSize>>20)
	}
	root, err := parseYAML(data)
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

	var c Cluster
	d := newDecoder(file)
	d.value(root, reflect.ValueOf(&c).Elem(), "")
	SetDefaults(&c)
	v := &validator{file: file, pos: d.pos, bad: d.bad, zero: d.zero}
	v.validate(&c)
	diags := append(d.diags, v.diags...)
	diags.sort()
	return &c, diags
}

// parseYAML parses the one document of data; nil when there is none.
func parseYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library is third-party code fed untrusted input: a panic
		// there becomes an error, never a crash.
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("yaml: cannot parse the file (%v)", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
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
