package spec

import (
	"reflect"
	"regexp"
	"strings"
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
)

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
