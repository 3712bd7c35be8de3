package addons

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Bounds of one manifest source (the inline add-ons, one include file or
// URL, one rendered template), by default.
const (
	// DefaultMaxBytes is the largest manifest read: CRD bundles of a few
	// MiB fit; a runaway download does not.
	DefaultMaxBytes = 16 << 20
	// DefaultMaxObjects is the most objects of one source or add-on (after
	// List items are expanded): the inventory of an add-on is one
	// ConfigMap, which holds at most 1 MiB.
	DefaultMaxObjects = 2000
	// maxListDepth bounds Lists inside Lists.
	maxListDepth = 3
)

// Limits bound what Decode reads from one source. Zero fields take the
// defaults.
type Limits struct {
	// MaxBytes is the largest source read. Default DefaultMaxBytes.
	MaxBytes int64
	// MaxObjects is the most objects (and documents) of one source.
	// Default DefaultMaxObjects.
	MaxObjects int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = DefaultMaxObjects
	}
	return l
}

// DecodeError is a manifest that cannot be read as Kubernetes objects: it
// names the source, the document and the line.
type DecodeError struct {
	Source Source
	Err    error
}

func (e *DecodeError) Error() string { return e.Source.String() + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode reads the Kubernetes objects of a multi-document YAML manifest, as
// kubectl apply -f does: documents are separated by lines that start with
// "---" (a comment may follow); documents with only comments or null are
// skipped; a document whose kind ends in "List" and that has items gives
// its items. Keys are decoded case-sensitively and a key given twice in one
// mapping is an error. Every object needs apiVersion, kind and
// metadata.name (server-side apply does not generate names). Namespaces are
// left as written: the engine defaults a namespaced object's to "default",
// as kubectl does, once the cluster says which kinds are namespaced.
//
// name names the source in errors and in each Object's Source. An error is
// a *DecodeError naming the document and its line.
func Decode(name string, data []byte, lim Limits) ([]Object, error) {
	lim = lim.withDefaults()
	if int64(len(data)) > lim.MaxBytes {
		return nil, &DecodeError{Source: Source{Name: name}, Err: fmt.Errorf("%d bytes, more than the limit of %d", len(data), lim.MaxBytes)}
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, &DecodeError{Source: Source{Name: name}, Err: err}
	}
	var objs []Object
	n := 0
	for _, d := range docs {
		if !hasContent(d.text) {
			continue
		}
		n++
		src := Source{Name: name, Document: n, Line: d.contentLine}
		if n > lim.MaxObjects {
			return nil, &DecodeError{Source: src, Err: fmt.Errorf("more than %d documents", lim.MaxObjects)}
		}
		j, err := yaml.YAMLToJSONStrict(d.text)
		if err != nil {
			return nil, &DecodeError{Source: src, Err: errors.New(oneLine(shiftLines(err.Error(), d.line-1)))}
		}
		var v any
		if err := utiljson.Unmarshal(j, &v); err != nil {
			return nil, &DecodeError{Source: src, Err: err}
		}
		if v == nil {
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &DecodeError{Source: src, Err: fmt.Errorf("a document must be a Kubernetes object (a mapping), not %s", jsonTypeName(v))}
		}
		if objs, err = appendObjects(objs, m, src, 0, lim.MaxObjects); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// appendObjects appends m, or the items of m when it is a List, to objs.
func appendObjects(objs []Object, m map[string]any, src Source, depth, max int) ([]Object, error) {
	u := &unstructured.Unstructured{Object: m}
	for _, f := range []string{"apiVersion", "kind"} {
		s, ok := m[f].(string)
		if !ok || s == "" {
			return nil, &DecodeError{Source: src, Err: fmt.Errorf("%s is missing: every object needs apiVersion, kind and metadata.name", f)}
		}
	}
	if items, ok := m["items"].([]any); ok && strings.HasSuffix(u.GetKind(), "List") {
		if depth >= maxListDepth {
			return nil, &DecodeError{Source: src, Err: fmt.Errorf("Lists nested more than %d deep", maxListDepth)}
		}
		for i, it := range items {
			isrc := src
			isrc.Item = i + 1
			im, ok := it.(map[string]any)
			if !ok {
				return nil, &DecodeError{Source: isrc, Err: fmt.Errorf("a List item must be a Kubernetes object (a mapping), not %s", jsonTypeName(it))}
			}
			var err error
			if objs, err = appendObjects(objs, im, isrc, depth+1, max); err != nil {
				return nil, err
			}
		}
		return objs, nil
	}
	if md, ok := m["metadata"]; ok {
		if _, isMap := md.(map[string]any); !isMap {
			return nil, &DecodeError{Source: src, Err: fmt.Errorf("metadata must be a mapping, not %s", jsonTypeName(md))}
		}
	}
	for _, f := range []string{"name", "namespace", "generateName"} {
		if _, _, err := unstructured.NestedString(m, "metadata", f); err != nil {
			return nil, &DecodeError{Source: src, Err: fmt.Errorf("metadata.%s must be a string", f)}
		}
	}
	if u.GetName() == "" {
		detail := "every object needs apiVersion, kind and metadata.name"
		if u.GetGenerateName() != "" {
			detail = "rigger applies objects by name: generateName is not supported"
		}
		return nil, &DecodeError{Source: src, Err: fmt.Errorf("metadata.name is missing: %s", detail)}
	}
	if len(objs) >= max {
		return nil, &DecodeError{Source: src, Err: fmt.Errorf("more than %d objects", max)}
	}
	return append(objs, Object{Unstructured: u, Source: src}), nil
}

// document is one YAML document of a manifest.
type document struct {
	text []byte
	// line is the manifest's line the document's text starts at;
	// contentLine that of its first line with content.
	line, contentLine int
}

// splitDocuments splits a manifest at its "---" lines, as kubectl's
// YAMLReader does: only a comment may follow the three dashes.
func splitDocuments(data []byte) ([]document, error) {
	var docs []document
	cur := document{line: 1}
	start := 0
	lineNo := 1
	for off := 0; off <= len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		next := off + end + 1
		if end < 0 {
			end = len(data) - off
			next = len(data) + 1
		}
		line := data[off : off+end]
		if bytes.HasPrefix(line, []byte("---")) {
			rest := bytes.TrimSpace(line[3:])
			if len(rest) > 0 && rest[0] != '#' {
				return nil, fmt.Errorf("line %d: only a comment may follow a document separator (---)", lineNo)
			}
			cur.text = data[start:off]
			docs = append(docs, cur)
			cur = document{line: lineNo + 1}
			start = min(next, len(data))
		} else if cur.contentLine == 0 && lineHasContent(line) {
			cur.contentLine = lineNo
		}
		off = next
		lineNo++
	}
	cur.text = data[start:]
	return append(docs, cur), nil
}

// lineHasContent reports whether a line is more than blanks and a comment.
func lineHasContent(line []byte) bool {
	t := bytes.TrimSpace(line)
	return len(t) > 0 && t[0] != '#'
}

// hasContent reports whether a document is more than blanks and comments.
func hasContent(text []byte) bool {
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			i = len(text)
		}
		if lineHasContent(text[:i]) {
			return true
		}
		text = text[min(i+1, len(text)):]
	}
	return false
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// shiftLines turns the YAML parser's line numbers, which count from the
// document's first line, into the manifest's.
func shiftLines(msg string, offset int) string {
	if offset == 0 {
		return msg
	}
	return yamlLineRE.ReplaceAllStringFunc(msg, func(s string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "line "))
		if err != nil {
			return s
		}
		return "line " + strconv.Itoa(n+offset)
	})
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
