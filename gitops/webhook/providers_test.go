package webhook

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	sha256ID := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		parse   func([]byte) (push, error)
		body    string
		want    push
		wantErr bool
	}{
		{name: "github push", parse: parseGitHub, body: githubPush, want: push{ref: "refs/heads/main", after: sha1}},
		{name: "github deleted", parse: parseGitHub, body: githubDeleted, want: push{ref: "refs/heads/main", deleted: true}},
		{name: "github deleted flag only", parse: parseGitHub, body: `{"ref":"refs/heads/main","after":"` + sha1 + `","deleted":true}`,
			want: push{ref: "refs/heads/main", deleted: true}},
		{name: "github SHA-256 repository", parse: parseGitHub, body: `{"ref":"refs/heads/main","after":"` + sha256ID + `"}`,
			want: push{ref: "refs/heads/main", after: sha256ID}},
		{name: "github after not a commit id", parse: parseGitHub, body: `{"ref":"refs/heads/main","after":"HEAD; rm -rf /"}`,
			want: push{ref: "refs/heads/main"}},
		{name: "github upper-case after", parse: parseGitHub, body: `{"ref":"refs/heads/main","after":"` + strings.ToUpper(sha1) + `"}`,
			want: push{ref: "refs/heads/main"}},
		{name: "github no ref", parse: parseGitHub, body: `{"after":"` + sha1 + `"}`, wantErr: true},
		{name: "github null", parse: parseGitHub, body: `null`, wantErr: true},
		{name: "github array", parse: parseGitHub, body: `[]`, wantErr: true},
		{name: "github trailing garbage", parse: parseGitHub, body: githubPush + `x`, wantErr: true},
		{name: "github empty", parse: parseGitHub, body: ``, wantErr: true},

		{name: "gitlab push", parse: parseGitLab, body: gitlabPush, want: push{ref: "refs/heads/main", after: sha1}},
		{name: "gitlab checkout_sha wins", parse: parseGitLab, body: `{"ref":"refs/heads/main","after":"` + sha2 + `","checkout_sha":"` + sha1 + `"}`,
			want: push{ref: "refs/heads/main", after: sha1}},
		{name: "gitlab no checkout_sha", parse: parseGitLab, body: `{"ref":"refs/heads/main","after":"` + sha2 + `"}`,
			want: push{ref: "refs/heads/main", after: sha2}},
		{name: "gitlab deleted", parse: parseGitLab, body: gitlabDeleted, want: push{ref: "refs/heads/main", deleted: true}},
		{name: "gitlab checkout_sha of the wrong type", parse: parseGitLab, body: `{"ref":"refs/heads/main","checkout_sha":1}`, wantErr: true},
		{name: "gitlab no ref", parse: parseGitLab, body: `{}`, wantErr: true},

		{name: "gitea push", parse: parseGitea, body: giteaPush, want: push{ref: "refs/heads/main", after: sha1}},
		{name: "gitea deleted", parse: parseGitea, body: giteaDeleted, want: push{ref: "refs/heads/main", deleted: true}},
		{name: "gitea no ref", parse: parseGitea, body: `{"after":"` + sha1 + `"}`, wantErr: true},

		{name: "github commits listed", parse: parseGitHub, body: githubPushOf(sha1, ownMsg, humanMsg),
			want: push{ref: "refs/heads/main", after: sha1, messages: []string{ownMsg, humanMsg}, complete: true}},
		{name: "github as many commits as it lists at most", parse: parseGitHub, body: githubPushOf(sha1, make([]string, githubMaxCommits)...),
			want: push{ref: "refs/heads/main", after: sha1, messages: make([]string, githubMaxCommits)}},
		{name: "github commits of the wrong type", parse: parseGitHub, body: `{"ref":"refs/heads/main","commits":{"message":"x"}}`, wantErr: true},
		{name: "gitlab all commits listed", parse: parseGitLab, body: gitlabPushOf(sha1, 1, ownMsg),
			want: push{ref: "refs/heads/main", after: sha1, messages: []string{ownMsg}, complete: true}},
		{name: "gitlab fewer listed than pushed", parse: parseGitLab, body: gitlabPushOf(sha1, 30, ownMsg),
			want: push{ref: "refs/heads/main", after: sha1, messages: []string{ownMsg}}},
		{name: "gitea all commits listed", parse: parseGitea, body: giteaPushOf(sha1, 2, ownMsg, ownMsg),
			want: push{ref: "refs/heads/main", after: sha1, messages: []string{ownMsg, ownMsg}, complete: true}},
		{name: "gitea no total", parse: parseGitea, body: giteaPushOf(sha1, -1, ownMsg),
			want: push{ref: "refs/heads/main", after: sha1, messages: []string{ownMsg}}},
		{name: "gitea deleted with commits", parse: parseGitea, body: `{"ref":"refs/heads/main","after":"` + zeroID + `","commits":[{"message":"x"}],"total_commits":1}`,
			want: push{ref: "refs/heads/main", deleted: true, messages: []string{"x"}, complete: true}},

		{name: "generic empty", parse: parseGeneric, body: ``, want: push{}},
		{name: "generic blank", parse: parseGeneric, body: " \n", want: push{}},
		{name: "generic empty object", parse: parseGeneric, body: `{}`, want: push{}},
		{name: "generic ref and after", parse: parseGeneric, body: `{"ref":"refs/heads/main","after":"` + sha1 + `"}`,
			want: push{ref: "refs/heads/main", after: sha1}},
		{name: "generic deleted", parse: parseGeneric, body: `{"ref":"refs/heads/main","deleted":true}`,
			want: push{ref: "refs/heads/main", deleted: true}},
		{name: "generic not JSON", parse: parseGeneric, body: `ref=main`, wantErr: true},
		{name: "generic ref of the wrong type", parse: parseGeneric, body: `{"ref":["main"]}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse([]byte(tt.body))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want an error: %v", err, tt.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestIgnored(t *testing.T) {
	tests := []struct {
		name string
		p    push
		want string
	}{
		{name: "followed branch", p: push{ref: "refs/heads/main", after: sha1}, want: ""},
		{name: "no ref", p: push{}, want: ""},
		{name: "other branch", p: push{ref: "refs/heads/mainline"}, want: "not a push to branch main"},
		{name: "branch name without refs/heads", p: push{ref: "main"}, want: "not a push to branch main"},
		{name: "tag named like the branch", p: push{ref: "refs/tags/main"}, want: "tag push"},
		{name: "deleted", p: push{ref: "refs/heads/main", deleted: true}, want: "ref deleted"},
		{name: "deleted tag", p: push{ref: "refs/tags/v1", deleted: true}, want: "ref deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.ignored("refs/heads/main", "main"); got != tt.want {
				t.Errorf("ignored = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{name: "none", want: ProviderGeneric},
		{name: "github", headers: map[string]string{"X-GitHub-Event": "push"}, want: ProviderGitHub},
		{name: "gitlab", headers: map[string]string{"X-Gitlab-Event": "Push Hook"}, want: ProviderGitLab},
		{name: "gitea with GitHub compatibility headers", headers: map[string]string{"X-Gitea-Event": "push", "X-GitHub-Event": "push"}, want: ProviderGitea},
		{name: "forgejo with Gitea and GitHub headers", headers: map[string]string{"X-Forgejo-Event": "push", "X-Gitea-Event": "push", "X-GitHub-Event": "push"}, want: ProviderForgejo},
		{name: "empty event header", headers: map[string]string{"X-GitHub-Event": ""}, want: ProviderGeneric},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			if got := detect(h).name; got != tt.want {
				t.Errorf("detect = %q, want %q", got, tt.want)
			}
		})
	}
}
