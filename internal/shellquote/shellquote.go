// Package shellquote quotes values for a POSIX shell line that people
// paste, such as the docker run line that starts a node's agent.
package shellquote

import "strings"

// safe are the bytes a shell gives no meaning to in a word.
const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@+%"

// Quote returns s as one shell word: as it is when it holds nothing a
// shell treats specially, else in single quotes (a quote inside as '\”).
func Quote(s string) string {
	if s != "" && strings.Trim(s, safe) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
