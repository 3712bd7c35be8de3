// Package termsafe makes text taken from files safe to print on a
// terminal: a value in a cluster.yml or a cluster.rkestate must not move
// the cursor, clear a line or forge a line of rigger's own output.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// String returns s with every control character but newline and tab
// (C0, DEL, C1: ESC starts every terminal escape sequence, CR rewrites a
// line) and every invalid UTF-8 byte written as a Go escape (\x1b, \r,
// \u009b).
func String(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Field returns s for one field of a line, a cell of a table: String,
// with newline and tab written as Go escapes too (\n, \t), and the
// Unicode line and paragraph separators (\u2028, \u2029), so that no
// value forges a line, or a column, of rigger's own output.
func Field(s string) string {
	s = String(s)
	if !strings.ContainsAny(s, "\n\t\u2028\u2029") {
		return s
	}
	return strings.NewReplacer("\n", `\n`, "\t", `\t`, "\u2028", `\u2028`, "\u2029", `\u2029`).Replace(s)
}

func needs(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) {
			return true
		}
		i += size
	}
	return false
}
