package addons

import (
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ApplyError is an object the cluster refused: the API server rejected it
// (invalid, forbidden, a field it does not know), or serves no such kind.
// It names the add-on, the object and where the object was read.
type ApplyError struct {
	Addon  string
	Object ObjectRef
	Source Source
	// DryRun: the rejection came from a server-side dry run (Plan).
	DryRun bool
	// Err is the API server's error (an apierrors.APIStatus), or the
	// mapping error of a kind the cluster does not serve.
	Err error
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "addon %s: %s", e.Addon, e.Object)
	if s := e.Source.String(); s != "" {
		fmt.Fprintf(&b, " (%s)", s)
	}
	verb := "apply"
	if e.DryRun {
		verb = "dry run"
	}
	if _, ok := e.Err.(apierrors.APIStatus); ok {
		fmt.Fprintf(&b, ": the API server rejected the %s: %s", verb, apiMessage(e.Err))
	} else {
		fmt.Fprintf(&b, ": %s: %v", verb, e.Err)
	}
	return b.String()
}

func (e *ApplyError) Unwrap() error { return e.Err }

// apiMessage is the API server's message of err.
func apiMessage(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Message != "" {
		return s.Status().Message
	}
	return err.Error()
}

// NotReadyError is an object of an add-on that did not become ready (kstatus
// Current) in time, or that failed. It carries the object's kstatus status
// and message, its conditions and its last Warning events (and those of its
// pods and ReplicaSets for a workload).
type NotReadyError struct {
	Addon  string
	Object ObjectRef
	// Status is the object's last kstatus status: InProgress, Failed,
	// Terminating, NotFound or Unknown.
	Status string
	// Message is kstatus's message for it ("Deployment does not have
	// minimum availability.").
	Message string
	// Conditions are the object's own status.conditions.
	Conditions []Condition
	// Events are the last Warning events of the object and of its pods
	// (and ReplicaSets), oldest first.
	Events []string
	// NodePods describe the other pods, on the Nodes of its pods that are
	// not ready, whose containers restarted or do not run (a network
	// plugin that crashed there).
	NodePods []string
	// Waited is how long the object was waited for, and Stalled how long
	// of that nothing moved (see Options.ReadyTimeout).
	Waited, Stalled time.Duration
	// Err is why waiting stopped: the context's error, or nil when the
	// object failed (Status Failed).
	Err error
}

// Condition is one of an object's status.conditions.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func (c Condition) String() string {
	s := c.Type + "=" + c.Status
	if c.Reason != "" {
		s += " " + c.Reason
	}
	if c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

func (e *NotReadyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "addon %s: %s is not ready after %s", e.Addon, e.Object, e.Waited.Round(time.Second))
	if e.Stalled > 0 && e.Stalled.Round(time.Second) < e.Waited.Round(time.Second) {
		fmt.Fprintf(&b, ", nothing moved in the last %s", e.Stalled.Round(time.Second))
	}
	fmt.Fprintf(&b, " (%s", e.Status)
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	b.WriteString(")")
	for _, c := range e.Conditions {
		if c.Status != "True" || negativeCondition[c.Type] {
			fmt.Fprintf(&b, "; condition %s", c)
		}
	}
	if len(e.Events) > 0 {
		fmt.Fprintf(&b, "; last warning events: %s", strings.Join(e.Events, "; "))
	}
	if len(e.NodePods) > 0 {
		fmt.Fprintf(&b, "; on the same Nodes: %s", strings.Join(e.NodePods, "; "))
	}
	return b.String()
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// negativeCondition are the condition types that say something is wrong
// when they are True.
var negativeCondition = map[string]bool{"Failed": true, "Stalled": true, "ReplicaFailure": true, "FailureTarget": true}
