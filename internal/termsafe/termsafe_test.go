package termsafe

import "testing"

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain: été\n\tnext", "plain: été\n\tnext"},
		{"key\r\x1b[2K\x1b[32mvalid\x1b[0m", `key\x0d\x1b[2K\x1b[32mvalid\x1b[0m`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"bad \xff utf-8", `bad \xff utf-8`},
		{"del \x7f", `del \x7f`},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kube-ca", "kube-ca"},
		{"kube-ca\nkube-x\t2099-01-01\timported", `kube-ca\nkube-x\t2099-01-01\timported`},
		{"a\u2028b\u2029c\x1b", `a\u2028b\u2029c\x1b`},
	} {
		if got := Field(tc.in); got != tc.want {
			t.Errorf("Field(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
