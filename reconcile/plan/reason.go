package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec"
)

// specFields are the fields of desired's hashed spec (see
// desired.Container.SpecJSON) in the order a reason names them. A field
// that a later spec format adds is named after these, by key.
func specFields() []string {
	return []string{"v", "image", "entrypoint", "args", "env", "binds", "network_mode", "pid_mode", "privileged", "restart_policy", "user"}
}

// maxSpecLabelSize bounds the spec label specReason decodes: the label comes
// from the node, and rigger's own are a few KiB.
const maxSpecLabelSize = 256 << 10

// specReason says what differs between the spec JSON stored on an observed
// container and the desired one, e.g. "image changed a → b; args changed:
// +--v=4, ---v=2". The spec is decoded generically, so that a field this
// code does not know still shows as changed.
func specReason(observed, want string) string {
	if observed == "" {
		return reasonHashDiffers
	}
	if len(observed) > maxSpecLabelSize {
		return fmt.Sprintf("%s (the container's spec label is larger than %d KiB)", reasonHashDiffers, maxSpecLabelSize>>10)
	}
	var before, after map[string]any
	if json.Unmarshal([]byte(observed), &before) != nil || json.Unmarshal([]byte(want), &after) != nil {
		return reasonHashDiffers + " (the container's spec label is not readable)"
	}
	keys := specFields()
	var extra []string
	for _, m := range []map[string]any{before, after} {
		for k := range m {
			if !slices.Contains(keys, k) && !slices.Contains(extra, k) {
				extra = append(extra, k)
			}
		}
	}
	slices.Sort(extra)
	keys = append(keys, extra...)

	var parts []string
	for _, k := range keys {
		if d := fieldDiff(k, before[k], after[k]); d != "" {
			parts = append(parts, d)
		}
	}
	if len(parts) == 0 {
		// Same fields, yet another hash: the hash was set by someone else.
		return reasonHashDiffers
	}
	return strings.Join(parts, "; ")
}

// fieldDiff describes the change of one field, or returns "" when a and b
// are equal.
func fieldDiff(key string, a, b any) string {
	name := strings.ReplaceAll(key, "_", " ")
	if key == "v" {
		name = "spec format"
	}
	la, aList := asList(a)
	lb, bList := asList(b)
	if (aList || a == nil) && (bList || b == nil) && (aList || bList) {
		return listDiff(key, name, la, lb)
	}
	sa, sb := scalar(a), scalar(b)
	if sa == sb {
		return ""
	}
	if sa, sb = redact(key, sa), redact(key, sb); sa == sb {
		return name + " changed" // only a secret did
	}
	return fmt.Sprintf("%s changed %s → %s", name, sa, sb)
}

// listDiff is "NAME changed: +added, -removed" (entries in their list's
// order; a list is compared as a multiset, so a repeated flag added once
// more shows), or "NAME reordered" when only the order differs.
func listDiff(key, name string, a, b []string) string {
	if slices.Equal(a, b) {
		return ""
	}
	var changes []string
	for _, s := range extra(b, a) {
		changes = append(changes, "+"+redact(key, s))
	}
	for _, s := range extra(a, b) {
		changes = append(changes, "-"+redact(key, s))
	}
	if len(changes) == 0 {
		return name + " reordered"
	}
	return name + " changed: " + strings.Join(changes, ", ")
}

// extra returns the entries of a that b does not have as many times, in
// a's order.
func extra(a, b []string) []string {
	left := make(map[string]int, len(b))
	for _, s := range b {
		left[s]++
	}
	var out []string
	for _, s := range a {
		if left[s] > 0 {
			left[s]--
			continue
		}
		out = append(out, s)
	}
	return out
}

// redact hides the secrets of an entry of field key of the spec, or of its
// value: the value of an env entry NAME=value, or of a flag --name=value,
// whose name holds a secret word (spec.SecretName; a flag's value that is an
// absolute path, a key file, stays readable), and the credentials of every
// URL (spec.RedactURLs). Every value a reason shows goes through it.
func redact(key, entry string) string {
	name, value, ok := strings.Cut(entry, "=")
	switch {
	case key == "env" && ok && spec.SecretName(name),
		(key == "args" || key == "entrypoint") && ok && strings.HasPrefix(name, "-") && spec.SecretName(name) && !strings.HasPrefix(value, "/"):
		return spec.RedactEnvValue(entry)
	}
	return spec.RedactURLs(entry)
}

// asList returns v as a list of strings when it is a JSON array.
func asList(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		out[i] = scalar(e)
	}
	return out, true
}

// scalar formats a decoded JSON value for a reason: strings as they are
// ("" as `""`), missing values as "(none)".
func scalar(v any) string {
	switch v := v.(type) {
	case nil:
		return "(none)"
	case string:
		if v == "" {
			return `""`
		}
		return v
	case bool:
		return fmt.Sprint(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
