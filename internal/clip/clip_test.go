package clip

import "testing"

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s        string
		n        int
		head, el string
	}{
		{"abc", 3, "abc", "abc"},
		{"abcd", 3, "abc", "abc…"},
		{"aé", 2, "a", "a…"}, // é is two bytes: not split
		{"éé", 3, "é", "é…"},
		{"é", 1, "", "…"},
		{"", 0, "", ""},
	} {
		if got := Head(tc.s, tc.n); got != tc.head {
			t.Errorf("Head(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.head)
		}
		if got := Ellipsis(tc.s, tc.n); got != tc.el {
			t.Errorf("Ellipsis(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.el)
		}
	}
}
