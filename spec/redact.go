package spec

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Redacted stands in for a secret value in output.
const Redacted = "(redacted)"

// What a field's `rigger` tag says about its value (see types.go).
const (
	// tagSecret: the value is never printed, logged or written to status.
	tagSecret = "secret"
	// tagSecretEnv: a list of NAME=value whose values are secret; the
	// names are shown.
	tagSecretEnv = "secret-env"
	// tagSecretManifests: Kubernetes manifests (YAML documents) whose
	// Secrets' data and stringData are secret; the rest is shown.
	tagSecretManifests = "secret-manifests"
)

// RedactManifests hides the values of the data and stringData of every
// Secret in s, YAML documents as addons holds them; the keys are shown.
// Manifests that do not parse are hidden whole.
func RedactManifests(s string) string {
	dec := yaml.NewDecoder(strings.NewReader(s))
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	changed := false
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Redacted + " (the manifests do not parse: shown with --show-secrets only)"
		}
		if redactSecretData(&doc) {
			changed = true
		}
		if err := enc.Encode(&doc); err != nil {
			return Redacted
		}
	}
	if err := enc.Close(); err != nil {
		return Redacted
	}
	if !changed {
		return s
	}
	return out.String()
}

// redactSecretData replaces the values of data and stringData of doc when
// it is a Secret (or a List's item is), and says whether it did.
func redactSecretData(doc *yaml.Node) bool {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return false
	}
	changed := false
	kind := ""
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			kind = n.Content[i+1].Value
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		switch {
		case kind == "Secret" && (k == "data" || k == "stringData"):
			if v.Kind == yaml.MappingNode {
				for j := 1; j < len(v.Content); j += 2 {
					v.Content[j] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
				}
			} else {
				n.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
			}
			changed = true
		case k == "items" && v.Kind == yaml.SequenceNode:
			for _, item := range v.Content {
				if redactSecretData(item) {
					changed = true
				}
			}
		}
	}
	return changed
}

// secrecy is the `rigger` tag of a field: "", tagSecret or tagSecretEnv.
func secrecy(sf reflect.StructField) string {
	return sf.Tag.Get("rigger")
}

// secretWords are the parts of a name (an environment variable, a flag, a
// field's path) that mark its value as secret. docker_config is RKE's RKE_KUBELET_DOCKER_CONFIG on the kubelet: the
// private registries' passwords, encoded.
var secretWords = []string{"key", "secret", "token", "passw", "credential", "docker_config"}

// SecretName reports whether the value of an environment variable, a flag
// or a field of this name is never shown: its name holds a secret word
// (key, secret, token, passw, credential, docker_config), in any case.
func SecretName(name string) bool {
	l := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// urlUserinfo matches the user part of a URL: the scheme, "://", and
// everything up to the last "@" before the host's end (a password may hold
// an unescaped "@").
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^\s/?#]*)@`)

// RedactURLs hides the credentials of every URL in s: the password of
// user:password@ becomes Redacted, and so does a user alone (often a token,
// as in https://TOKEN@host/). Everything else is kept.
func RedactURLs(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return urlUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlUserinfo.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		if user, _, ok := strings.Cut(info, ":"); ok {
			return scheme + user + ":" + Redacted + "@"
		}
		return scheme + Redacted + "@"
	})
}

// RedactEnvValue is NAME=Redacted for an environment entry NAME=value (or
// a flag --name=value); an entry without "=" has no value to hide.
func RedactEnvValue(entry string) string {
	if name, _, ok := strings.Cut(entry, "="); ok {
		return name + "=" + Redacted
	}
	return entry
}
