// Package podstatus describes what is wrong with a pod's containers, for
// the errors of what waits on pods: an add-on's rollout, a Node that does
// not become Ready.
package podstatus

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Trouble says what is wrong with a container that restarted or waits for
// something other than its first start, or "".
func Trouble(cs corev1.ContainerStatus) string {
	var parts []string
	if cs.RestartCount > 0 {
		s := fmt.Sprintf("restarted %d time(s)", cs.RestartCount)
		if t := cs.LastTerminationState.Terminated; t != nil {
			s += fmt.Sprintf(", last exit %d (%s) at %s", t.ExitCode, t.Reason, t.FinishedAt.UTC().Format(time.TimeOnly+"Z"))
			if t.Message != "" {
				s += ": " + oneLine(t.Message)
			}
		}
		parts = append(parts, s)
	}
	if w := cs.State.Waiting; w != nil && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
		s := "waiting: " + w.Reason
		if w.Message != "" {
			s += ": " + oneLine(w.Message)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// Troubles describes, at most max of them, the containers of p that
// Trouble finds something wrong with, on Node node:
// "Pod ns/name on node: container c restarted 2 time(s), …".
func Troubles(p *corev1.Pod, node string, max int) []string {
	var out []string
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if d := Trouble(cs); d != "" && len(out) < max {
			out = append(out, fmt.Sprintf("Pod %s/%s on %s: container %s %s", p.Namespace, p.Name, node, cs.Name, d))
		}
	}
	return out
}

// oneLine joins a message's lines and runs of blanks.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// State is a pod's phase and what its containers that do not run wait
// for: "Pending; container install-cni waiting: PodInitializing".
func State(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	if s == "" {
		s = "not started"
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf("; container %s waiting: %s", cs.Name, w.Reason)
			if w.Message != "" {
				s += ": " + oneLine(w.Message)
			}
		}
	}
	return s
}

// Ready reports whether the pod's Ready condition is True.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
