package addons

import (
	"context"
	"fmt"
	"slices"

	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/rigger/rigger/reconcile/fanout"
)

// Health is how an add-on in the cluster is doing, for status: its objects
// as its inventory lists them, and those not ready.
type Health struct {
	Name string `json:"name"`
	// Objects is how many objects its inventory lists.
	Objects int `json:"objects"`
	// NotReady are the objects that are not Current by kstatus, "Kind
	// namespace/name: status: message", at most maxNotReady of them.
	NotReady []string `json:"not_ready,omitempty"`
	// Error says why the add-on could not be read.
	Error string `json:"error,omitempty"`
}

// Ready reports whether every object of the add-on is ready.
func (h Health) Ready() bool { return h.Error == "" && len(h.NotReady) == 0 }

// Health reads the add-ons that have an inventory in the cluster and says
// of each whether its objects are ready (kstatus, as Apply waits for them;
// objects Apply does not wait for are not counted), sorted by name. It
// changes nothing.
func (e *Engine) Health(ctx context.Context) ([]Health, error) {
	names, err := e.Installed(ctx)
	if err != nil {
		return nil, err
	}
	return e.healthOf(ctx, names), nil
}

// healthOf is the health of the add-ons names (sorted), read at once.
func (e *Engine) healthOf(ctx context.Context, names []string) []Health {
	names = slices.Sorted(slices.Values(names))
	out := make([]Health, len(names))
	_ = fanout.Each(ctx, names, planParallel, func(ctx context.Context, i int, name string) error {
		out[i] = e.health(ctx, name)
		return nil
	})
	for i, h := range out {
		if h.Name == "" { // not read: ctx ended first
			out[i] = Health{Name: names[i], Error: ctx.Err().Error()}
		}
	}
	return out
}

func (e *Engine) health(ctx context.Context, name string) Health {
	h := Health{Name: name}
	inv, err := e.readInventory(ctx, name)
	if err != nil {
		h.Error = err.Error()
		return h
	}
	h.Objects = len(inv.refs)
	for _, r := range inv.refs {
		gvr, served, err := e.resourceOf(ctx, r)
		if err != nil || !served {
			if err == nil {
				err = fmt.Errorf("the cluster does not serve kind %s", r.GroupKind())
			}
			h.NotReady = appendBounded(h.NotReady, fmt.Sprintf("%s: %v", r, err))
			continue
		}
		live, err := e.get(ctx, gvr, r)
		switch {
		case err != nil:
			h.NotReady = appendBounded(h.NotReady, fmt.Sprintf("%s: %v", r, err))
			continue
		case live == nil:
			h.NotReady = appendBounded(h.NotReady, fmt.Sprintf("%s: %s", r, "not in the cluster"))
			continue
		case !waits(live):
			continue
		}
		res, err := computeStatus(live)
		if err != nil {
			h.NotReady = appendBounded(h.NotReady, fmt.Sprintf("%s: %v", r, err))
			continue
		}
		if res.Status != kstatus.CurrentStatus {
			h.NotReady = appendBounded(h.NotReady, fmt.Sprintf("%s: %s: %s", r, res.Status, res.Message))
		}
	}
	return h
}

// appendBounded appends s unless list holds maxNotReady entries already.
func appendBounded(list []string, s string) []string {
	if len(list) >= maxNotReady {
		return list
	}
	return append(list, s)
}
