package shellquote

import (
	"os/exec"
	"testing"
)

// TestQuoteReadsBackThroughSh: whatever s holds, sh reads Quote(s) back
// as the one word s and runs nothing of it.
func TestQuoteReadsBackThroughSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, s := range []string{"/var/run/docker.sock", "", "a b", "$(touch /tmp/pwned)", "`id`", "x'y", "a;b|c&d",
		"\"q\"", "new\nline", "*", "~root", "rgt_AbC-09"} {
		out, err := exec.Command(sh, "-c", "printf %s "+Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh read Quote(%q) = %s as %q (%v)", s, Quote(s), out, err)
		}
	}
}
