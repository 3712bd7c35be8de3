// Package clip shortens text that comes from outside (a file, a node, a
// server) before rigger shows or stores it, without splitting a UTF-8
// character.
package clip

import "unicode/utf8"

// Head is the start of s, at most n bytes of whole UTF-8 characters.
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Ellipsis is s when it is at most n bytes long, else its Head and "…".
func Ellipsis(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Head(s, n) + "…"
}
