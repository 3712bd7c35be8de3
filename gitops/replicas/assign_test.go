package replicas

import (
	"fmt"
	"slices"
	"testing"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func loads(a map[string]string) map[string]int {
	out := map[string]int{}
	for _, r := range a {
		out[r]++
	}
	return out
}

// TestAssignSpread checks that every cluster gets one replica among the
// given ones and that each replica gets its share or one less, whatever
// the counts.
func TestAssignSpread(t *testing.T) {
	for _, tc := range []struct{ replicas, clusters int }{
		{1, 1}, {1, 9}, {3, 9}, {3, 10}, {3, 2}, {4, 100}, {7, 13}, {5, 0}, {10, 3},
	} {
		t.Run(fmt.Sprintf("%d replicas %d clusters", tc.replicas, tc.clusters), func(t *testing.T) {
			rs, cs := names("serve-", tc.replicas), names("clusters/c", tc.clusters)
			a := Assign(rs, cs)
			if len(a) != len(cs) {
				t.Fatalf("%d clusters assigned, want %d: %v", len(a), len(cs), a)
			}
			for c, r := range a {
				if !slices.Contains(rs, r) || !slices.Contains(cs, c) {
					t.Fatalf("%s assigned to %s: not among the ones given", c, r)
				}
			}
			share := (tc.clusters + tc.replicas - 1) / tc.replicas
			for r, n := range loads(a) {
				if n > share || (tc.clusters >= tc.replicas && n < share-1) {
					t.Errorf("%s got %d clusters, want %d or %d: %v", r, n, share-1, share, loads(a))
				}
			}
			// Same answer from another order of the same input.
			if b := Assign(reversed(rs), reversed(cs)); !equal(a, b) {
				t.Errorf("the order of the input changed the assignment:\n%v\n%v", a, b)
			}
		})
	}
	if a := Assign(nil, names("c", 3)); len(a) != 0 {
		t.Errorf("no replica: got %v, want no assignment", a)
	}
}

// TestAssignMovesFew checks that a replica that comes or goes moves its
// own clusters and few others: most clusters stay where they are.
func TestAssignMovesFew(t *testing.T) {
	cs := names("clusters/c", 100)
	before := Assign(names("serve-", 4), cs)
	after := Assign(names("serve-", 5), cs) // serve-4 comes
	moved, toNew := 0, 0
	for c, r := range after {
		if before[c] != r {
			moved++
			if r == "serve-4" {
				toNew++
			}
		}
	}
	if toNew != 20 {
		t.Errorf("the new replica got %d clusters, want its share of 20", toNew)
	}
	// Bounded loads move a few more than the new replica's share; a
	// modulo hash would move about 80.
	if moved > 30 {
		t.Errorf("%d of 100 clusters moved when a 5th replica came, want few more than its 20", moved)
	}
	gone := Assign(names("serve-", 4)[1:], cs) // serve-0 goes
	stayed := 0
	for c, r := range before {
		if r != "serve-0" && gone[c] == r {
			stayed++
		}
	}
	if stayed < 65 {
		t.Errorf("%d of the 75 clusters of the replicas that stayed kept their replica when serve-0 went, want most", stayed)
	}
}

// TestSuccessor checks that the successor of a cluster is the replica the
// cluster goes to when its own is gone, and never its own.
func TestSuccessor(t *testing.T) {
	rs, cs := names("serve-", 3), names("clusters/c", 9)
	a := Assign(rs, cs)
	for _, c := range cs {
		s := Successor(rs, cs, c)
		if s == "" || s == a[c] {
			t.Fatalf("successor of %s (of %s) is %q", c, a[c], s)
		}
		rest := slices.DeleteFunc(slices.Clone(rs), func(r string) bool { return r == a[c] })
		if got := Assign(rest, cs)[c]; got != s {
			t.Errorf("%s goes to %s when %s is gone, successor says %s", c, got, a[c], s)
		}
	}
	if s := Successor(rs[:1], cs, cs[0]); s != "" {
		t.Errorf("one replica: successor %q, want none", s)
	}
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
