package notify

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rigger/rigger/internal/clip"
)

// maxMessage is the longest message a payload carries, in bytes: status.yml
// keeps up to 4 KiB, and Slack's section text takes 3000 characters.
const maxMessage = 2000

// genericPayload is the body of a generic JSON webhook: the Event, with
// its message clipped to maxMessage, under a version.
type genericPayload struct {
	APIVersion string `json:"apiVersion"`
	Event
}

// payloadAPIVersion names the generic payload's shape.
const payloadAPIVersion = "rigger.io/notification/v1"

func genericBody(e Event) ([]byte, error) {
	e.Message = clip.Ellipsis(e.Message, maxMessage)
	return json.Marshal(genericPayload{APIVersion: payloadAPIVersion, Event: e})
}

// slackPayload is Slack's incoming-webhook message: text (the fallback
// shown in notifications) and blocks. Mattermost, Rocket.Chat and others
// take the same shape.
type slackPayload struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// titles are each kind's words in a chat message.
var titles = map[Kind]string{
	KindReady:             "is Ready",
	KindNotReady:          "is not Ready",
	KindStalled:           "is stalled: a person must act",
	KindSnapshotFailed:    "etcd snapshot failed",
	KindSnapshotRecovered: "etcd snapshot succeeded again",
}

func slackBody(e Event) ([]byte, error) {
	icon := ":large_green_circle:"
	if e.Severity == SeverityError {
		icon = ":red_circle:"
	}
	title := fmt.Sprintf("cluster %s %s", e.Cluster, titles[e.Kind])
	msg := clip.Ellipsis(e.Message, maxMessage)
	text := title
	if e.Reason != "" {
		text += " (" + e.Reason + ")"
	}
	if msg != "" {
		text += ": " + msg
	}
	section := fmt.Sprintf("%s *%s*", icon, slackEscape(title))
	if e.Reason != "" {
		section += "\n*" + slackEscape(e.Reason) + "*"
	}
	if msg != "" {
		section += "\n" + slackEscape(msg)
	}
	context := []string{slackEscape(e.Path)}
	if e.Revision != "" {
		context = append(context, "revision `"+slackEscape(shortRev(e.Revision))+"`")
	}
	if e.Repository != "" {
		context = append(context, slackEscape(e.Repository)+" "+slackEscape(e.Branch))
	}
	return json.Marshal(slackPayload{
		Text: slackEscape(text), // the fallback is read as mrkdwn too
		Blocks: []slackBlock{
			{Type: "section", Text: &slackText{Type: "mrkdwn", Text: section}},
			{Type: "context", Elements: []slackText{{Type: "mrkdwn", Text: strings.Join(context, " · ")}}},
		},
	})
}

// slackEscape escapes the three characters Slack's mrkdwn reads as
// markup (a "<!channel>" in a message would page a whole channel).
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
