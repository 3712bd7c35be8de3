package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/internal/clip"
)

// Forges whose commit status API is spoken.
const (
	ForgeGitHub = "github"
	ForgeGitea  = "gitea"
	ForgeGitLab = "gitlab"
)

// State is a commit status's state, as rigger decides it; each forge
// names it its own way (Forge.state).
type State string

// The states rigger sets.
const (
	StatePending State = "pending"
	StateSuccess State = "success"
	StateFailure State = "failure"
)

// Forge is the commit status API of the repository serve follows.
type Forge struct {
	// Kind is ForgeGitHub, ForgeGitea or ForgeGitLab.
	Kind string
	// API is the API's base URL: https://api.github.com,
	// https://host/api/v3 (GitHub Enterprise), https://host/api/v1 (Gitea),
	// https://host/api/v4 (GitLab).
	API string
	// Project is "owner/repo" (GitLab: the full path, groups included).
	Project string
	// Token authenticates: a bearer token (GitHub), an access token
	// (Gitea, as "token …"), a PRIVATE-TOKEN (GitLab).
	Token string
}

// NewForge is the Forge of kind for the repository at repoURL (https://,
// ssh://, user@host:path): its API is derived from the URL's host unless
// api is given, its project from the URL's path.
func NewForge(kind, repoURL, api, token string) (*Forge, error) {
	switch kind {
	case ForgeGitHub, ForgeGitea, ForgeGitLab:
	default:
		return nil, fmt.Errorf("--commit-status %q: give github, gitea or gitlab", kind)
	}
	if token == "" {
		return nil, errors.New("--commit-status needs a token: give --commit-status-token-file or $" + EnvCommitStatusToken)
	}
	ep, err := transport.NewEndpoint(repoURL)
	if err != nil || ep.Protocol == "file" || ep.Host == "" {
		return nil, errors.New("--commit-status: the forge's project cannot be read from --repo: it must be an https://, ssh:// or user@host:path URL of the forge")
	}
	project := strings.TrimSuffix(strings.Trim(ep.Path, "/"), ".git")
	parts := strings.Split(project, "/")
	switch {
	case slices.Contains(parts, ""):
		return nil, fmt.Errorf("--commit-status: --repo's path %q does not name a project", project)
	case kind != ForgeGitLab && len(parts) != 2:
		return nil, fmt.Errorf("--commit-status %s: --repo's path %q is not owner/repository", kind, project)
	case len(parts) < 2:
		return nil, fmt.Errorf("--commit-status gitlab: --repo's path %q is not group/project", project)
	}
	if api == "" {
		// An https:// (or http://) repository's API is on its scheme, host
		// and port; an ssh:// port is git's, and the API is https://.
		base := "https://" + ep.Host
		if ep.Protocol == "http" || ep.Protocol == "https" {
			base = ep.Protocol + "://" + ep.Host
			if ep.Port != 0 && !(ep.Protocol == "https" && ep.Port == 443) && !(ep.Protocol == "http" && ep.Port == 80) {
				base = fmt.Sprintf("%s:%d", base, ep.Port)
			}
		}
		switch {
		case kind == ForgeGitHub && ep.Host == "github.com":
			api = "https://api.github.com"
		case kind == ForgeGitHub:
			api = base + "/api/v3"
		case kind == ForgeGitea:
			api = base + "/api/v1"
		default:
			api = base + "/api/v4"
		}
	}
	u, err := url.Parse(api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errors.New("--commit-status-api: give the API's base URL, such as https://gitea.example.com/api/v1 (no credentials in it)")
	}
	return &Forge{Kind: kind, API: strings.TrimSuffix(api, "/"), Project: project, Token: token}, nil
}

// EnvCommitStatusToken is the environment variable the forge's token is
// read from without --commit-status-token-file.
const EnvCommitStatusToken = "RIGGER_COMMIT_STATUS_TOKEN"

// Context is the commit status's context (GitLab: name) for a cluster.
func Context(cluster string) string { return "rigger/" + cluster }

// maxDescription is the longest description sent: GitHub refuses longer
// ones than 140 characters.
const maxDescription = 140

// commitStatus is one commit status to set.
type commitStatus struct {
	SHA, Context, Description string
	State                     State
	// reason is Ready's reason, which Description starts with (not sent
	// apart).
	reason string
}

// request is the HTTP request that sets s, in the forge's documented shape.
func (f *Forge) request(s commitStatus) (request, error) {
	desc := clip.Ellipsis(s.Description, maxDescription-3)
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}
	var path string
	var body any
	switch f.Kind {
	case ForgeGitHub:
		// POST /repos/{owner}/{repo}/statuses/{sha}: state error, failure,
		// pending or success.
		path = "/repos/" + f.Project + "/statuses/" + url.PathEscape(s.SHA)
		h.Set("Accept", "application/vnd.github+json")
		h.Set("X-GitHub-Api-Version", "2022-11-28")
		h.Set("Authorization", "Bearer "+f.Token)
		body = map[string]string{"state": string(s.State), "context": s.Context, "description": desc}
	case ForgeGitea:
		// POST /repos/{owner}/{repo}/statuses/{sha}: state pending,
		// success, error, failure or warning.
		path = "/repos/" + f.Project + "/statuses/" + url.PathEscape(s.SHA)
		h.Set("Authorization", "token "+f.Token)
		body = map[string]string{"state": string(s.State), "context": s.Context, "description": desc}
	case ForgeGitLab:
		// POST /projects/{url-encoded path}/statuses/{sha}: state pending,
		// running, success, failed or canceled; name is the context.
		state := string(s.State)
		if s.State == StateFailure {
			state = "failed"
		}
		path = "/projects/" + url.PathEscape(f.Project) + "/statuses/" + url.PathEscape(s.SHA)
		h.Set("PRIVATE-TOKEN", f.Token)
		body = map[string]string{"state": state, "name": s.Context, "description": desc}
	default:
		return request{}, fmt.Errorf("unknown forge %q", f.Kind)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return request{}, err
	}
	return request{URL: f.API + path, Header: h, Body: b,
		What: fmt.Sprintf("%s commit status %s %s of %s", f.Kind, s.State, s.Context, shortRev(s.SHA))}, nil
}

// readyState is the commit status for a status: success when Ready is
// True, failure otherwise, with Ready's reason and message as description.
func readyState(f *gitops.StatusFile) (State, string) {
	ready := condition(f, gitops.ConditionReady)
	desc := ready.Reason
	if ready.Message != "" {
		desc += ": " + ready.Message
	}
	if ready.Status == "True" {
		return StateSuccess, desc
	}
	return StateFailure, desc
}
