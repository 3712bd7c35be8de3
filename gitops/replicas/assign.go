package replicas

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Assign gives each of clusters (the paths of their cluster.yml) to one of
// replicas (their ids) by rendezvous hashing with bounded loads: clusters,
// in the order of their own hash, each go to the replica that weighs the
// most for them (weight: a hash of replica and cluster) among those that
// have room yet: ⌊clusters/replicas⌋ each, and one more for the first
// clusters mod replicas to reach it. So every replica gets ⌊clusters/replicas⌋
// or ⌈clusters/replicas⌉, every replica that sees the same ids and paths computes the
// same assignment, and a replica that comes or goes moves few clusters
// besides its own. No replicas: no assignment. Assign does no I/O.
func Assign(replicas, clusters []string) map[string]string {
	out := make(map[string]string, len(clusters))
	if len(replicas) == 0 {
		return out
	}
	replicas = slices.Compact(slices.Sorted(slices.Values(replicas)))
	clusters = slices.Compact(slices.Sorted(slices.Values(clusters)))
	base, extra := len(clusters)/len(replicas), len(clusters)%len(replicas)
	load := make(map[string]int, len(replicas))
	room := func(r string) bool { return load[r] < base || load[r] == base && extra > 0 }
	order := slices.Clone(clusters)
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(cmp.Compare(weight("", a), weight("", b)), cmp.Compare(a, b))
	})
	for _, c := range order {
		for _, r := range Ranked(replicas, c) {
			if room(r) {
				if load[r] == base {
					extra--
				}
				out[c] = r
				load[r]++
				break
			}
		}
	}
	return out
}

// Ranked is replicas from the one that weighs the most for cluster to the
// one that weighs the least (pure rendezvous hashing).
func Ranked(replicas []string, cluster string) []string {
	r := slices.Clone(replicas)
	slices.SortFunc(r, func(a, b string) int {
		return cmp.Or(cmp.Compare(weight(b, cluster), weight(a, cluster)), cmp.Compare(a, b))
	})
	return r
}

// weight is the rendezvous weight of replica for cluster.
func weight(replica, cluster string) uint64 {
	h := sha256.New()
	h.Write([]byte(replica))
	h.Write([]byte{0})
	h.Write([]byte(cluster))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// Successor is the replica that gets cluster when its replica in
// Assign(replicas, clusters) is gone: the one that campaigns for the
// cluster's Lease beside its holder, so as to take it over within a lease
// duration of a crash. "" when there is none (a single replica).
func Successor(replicas, clusters []string, cluster string) string {
	holder := Assign(replicas, clusters)[cluster]
	rest := slices.DeleteFunc(slices.Clone(replicas), func(r string) bool { return r == holder })
	return Assign(rest, clusters)[cluster]
}
