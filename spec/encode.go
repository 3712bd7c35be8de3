package spec

import (
	"bytes"
	"encoding"
	"reflect"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Marshal writes c as cluster.yml, keys in schema order, empty values left
// out. Unless showSecrets is set, the values the schema marks secret (the
// `rigger` tag) are replaced by Redacted, and so are the credentials of
// every URL (RedactURLs).
func Marshal(c *Cluster, showSecrets bool) ([]byte, error) {
	node := encodeValue(reflect.ValueOf(c).Elem(), showSecrets)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeValue returns the YAML node of v, or nil when v is empty.
func encodeValue(v reflect.Value, showSecrets bool) *yaml.Node {
	if !v.IsValid() || v.IsZero() {
		return nil
	}
	if tm, ok := v.Interface().(encoding.TextMarshaler); ok {
		b, err := tm.MarshalText()
		if err != nil {
			return nil
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(b)}
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		e := v.Elem()
		if e.IsValid() && e.IsZero() && e.Kind() != reflect.Struct && e.Kind() != reflect.Map && e.Kind() != reflect.Slice {
			// A pointer to a zero scalar is an explicit value (`false`,
			// `0`) that its default would otherwise replace.
			var n yaml.Node
			if err := n.Encode(e.Interface()); err == nil {
				return &n
			}
		}
		return encodeValue(e, showSecrets)
	case reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode}
		for _, sf := range reflect.VisibleFields(v.Type()) {
			if !sf.IsExported() || sf.Anonymous {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			fv := v.FieldByIndex(sf.Index)
			var n *yaml.Node
			switch {
			case showSecrets || fv.IsZero():
				n = encodeValue(fv, showSecrets)
			case secrecy(sf) == tagSecret:
				n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
			case secrecy(sf) == tagSecretManifests:
				n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: RedactManifests(fv.String())}
			case secrecy(sf) == tagSecretEnv:
				n = encodeValue(fv, showSecrets)
				for _, e := range n.Content {
					e.Value = RedactEnvValue(e.Value)
				}
			default:
				n = encodeValue(fv, showSecrets)
			}
			if n != nil {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, n)
			}
		}
		if len(m.Content) == 0 {
			return nil
		}
		return m
	case reflect.Map:
		m := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n := encodeValue(v.MapIndex(k), showSecrets)
			if n == nil {
				n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k.String()}, n)
		}
		return m
	case reflect.Slice:
		s := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			n := encodeValue(v.Index(i), showSecrets)
			if n == nil {
				n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
			}
			s.Content = append(s.Content, n)
		}
		return s
	case reflect.String:
		s := v.String()
		if !showSecrets {
			s = RedactURLs(s)
		}
		var n yaml.Node
		if err := n.Encode(s); err != nil {
			return nil
		}
		return &n
	default:
		var n yaml.Node
		if err := n.Encode(v.Interface()); err != nil {
			return nil
		}
		return &n
	}
}
