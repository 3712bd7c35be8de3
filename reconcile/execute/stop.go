package execute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/plan"
)

// etcdStopGrace is how long an etcd member that does not lead gets to stop
// on SIGTERM before it is killed. etcd exits once its clients' streams
// are closed, which it waits for up to its request timeout (15 s with
// RKE's election timeout) while the API servers keep their watches open:
// for a member that leads nothing, that wait protects nothing (etcd
// writes its log to disk before it acknowledges an entry, and a killed
// member restarts from it as from a crash).
const etcdStopGrace = 3 * time.Second

// apiServerStopGrace is how long an API server that keeps its watches
// open when it stops gets to stop on SIGTERM: Docker's default. It closes
// its port and ends its other requests at once, then holds the watches
// until it is killed (RKE's API servers, without
// --shutdown-watch-termination-grace-period: every one of an adopted
// cluster waited out the 30 s of dockerop.StopTimeout, its node's API
// down meanwhile).
const apiServerStopGrace = 10 * time.Second

// stopGrace is how long the container s stops gets to stop on SIGTERM (0:
// dockerop.StopTimeout). An etcd member of a running cluster hands its
// leadership off first, if it leads, and then gets etcdStopGrace; one
// that could not (the only voter, or etcd did not answer) stops as etcd
// stops itself. An API server that does not end its watches when it
// stops gets apiServerStopGrace.
func (r *runner) stopGrace(ctx context.Context, s plan.Step) time.Duration {
	if s.Component == desired.KubeAPIServer && s.Before != nil && !endsWatches(s.Before.Spec) {
		return apiServerStopGrace
	}
	if s.Component != desired.Etcd || r.etcdNew || r.o.Etcd == nil {
		return 0
	}
	dn, ok := r.o.Desired.Node(s.Node)
	if !ok {
		return 0
	}
	m, err := r.membership(ctx)
	var to *etcdmember.Member
	if err == nil {
		to, err = m.HandOff(ctx, desired.EtcdPeerURL(dn.InternalAddress))
	}
	switch {
	case errors.Is(err, etcdmember.ErrNoOtherVoter):
		return 0
	case err != nil:
		r.say(s.Node, fmt.Sprintf("etcd's leadership not handed off (%v): the member stops as etcd stops itself, in up to %s", err, dockerop.StopTimeout), nil)
		return 0
	case to != nil:
		r.say(s.Node, "etcd's leadership handed off to "+to.String()+" before the member stops", nil)
	}
	return etcdStopGrace
}

// endsWatches says whether the API server whose container has spec (its
// LabelSpec; "" for one rigger did not make) ends its watches when it
// stops: its args set desired.WatchGraceFlag above 0.
func endsWatches(spec string) bool {
	var c struct {
		Args []string `json:"args"`
	}
	if json.Unmarshal([]byte(spec), &c) != nil {
		return false
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+desired.WatchGraceFlag+"="); ok {
			d, err := time.ParseDuration(v)
			return err == nil && d > 0
		}
	}
	return false
}
