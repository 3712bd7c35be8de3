// Package notify tells people what rigger serve did: it turns the
// statuses a gitops.Board reports into notifications (Events) and sends
// them to webhooks (generic JSON, or Slack's incoming-webhook shape), and
// sets commit statuses on the forge (GitHub, Gitea/Forgejo, GitLab) for the
// commit of each cluster.yml reconciled.
//
// Nothing here blocks a reconcile: each destination has a bounded queue
// (the oldest request is dropped, and logged, when it is full) and a
// goroutine that sends, retrying 5xx, 429 (after its Retry-After) and
// network errors a bounded number of times. The same event (cluster,
// kind, reason, message) is sent at most once in DedupWindow, as Flux's
// notification-controller does. Destination URLs are secrets (a Slack
// webhook's path is its token): logs and errors name their host only.
package notify
