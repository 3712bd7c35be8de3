package spec

import (
	"fmt"
	"strconv"
	"strings"
)

func (v *validator) upgradeStrategy(c *Cluster) {
	u := c.UpgradeStrategy
	p := "upgrade_strategy"
	v.budget(p+".max_unavailable_worker", u.MaxUnavailableWorker, 1)
	v.budget(p+".max_unavailable_controlplane", u.MaxUnavailableControlplane, 1)
	if d := u.DrainInput; d != nil {
		if d.Timeout < 1 || d.Timeout > 10800 {
			v.errorf(p+".node_drain_input.timeout", "", "timeout must be from 1 to 10800 seconds, got %d", d.Timeout)
		}
		if d.GracePeriod < -1 {
			v.errorf(p+".node_drain_input.grace_period", "Use -1 for each pod's own grace period.", "grace_period must be -1 or more, got %d", d.GracePeriod)
		}
		// RKE's parseNodeDrainInput decodes node_drain_input again, by its
		// json names, when one of these three keys is missing, which loses
		// ignore_daemonsets (ignoreDaemonSets there): RKE's drain then
		// ignores DaemonSets.
		_, timeout := v.pos[p+".node_drain_input.timeout"]
		_, grace := v.pos[p+".node_drain_input.grace_period"]
		if d.IgnoreDaemonSets != nil && !*d.IgnoreDaemonSets && (!timeout || !grace) {
			v.warnf(p+".node_drain_input.ignore_daemonsets", "RKE's parser drops it then, and RKE drains ignoring DaemonSets; rigger reads it. Give timeout and grace_period too, for both to read it.",
				"RKE ignores ignore_daemonsets: false unless timeout and grace_period are given too")
		}
	}
}

// budget checks a count-or-percentage value such as max_unavailable_worker.
func (v *validator) budget(p, s string, least int) {
	if _, err := ParseBudget(s, least); err != nil {
		v.errorf(p, fmt.Sprintf("Give a number of nodes (at least %d) or a percentage (10%%).", least), "%v", err)
	}
}

// Budget is a number of nodes given as a count or a percentage.
type Budget struct {
	N       int
	Percent bool
}

// ParseBudget reads `3` or `25%`; the value must be at least least (as a
// count, or as a percentage above zero when least is 1).
func ParseBudget(s string, least int) (Budget, error) {
	num, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	n, err := strconv.Atoi(num)
	switch {
	case err != nil:
		return Budget{}, fmt.Errorf("%q is neither a number nor a percentage", s)
	case pct && (n > 100 || n < least):
		return Budget{}, fmt.Errorf("%q is not a percentage from %d%% to 100%%", s, least)
	case n < least:
		return Budget{}, fmt.Errorf("%q must be at least %d", s, least)
	}
	return Budget{N: n, Percent: pct}, nil
}

// Of resolves b against total nodes: a percentage rounds down, and the
// result is at least least.
func (b Budget) Of(total, least int) int {
	n := b.N
	if b.Percent {
		n = total * b.N / 100
	}
	return max(n, least)
}
