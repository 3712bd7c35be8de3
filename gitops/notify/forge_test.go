package notify

import (
	"strings"
	"testing"
)

func TestNewForge(t *testing.T) {
	for _, tc := range []struct {
		kind, repo, api string
		wantAPI         string
		wantProject     string
		err             string
	}{
		{ForgeGitHub, "https://github.com/acme/clusters.git", "", "https://api.github.com", "acme/clusters", ""},
		{ForgeGitHub, "git@github.com:acme/clusters.git", "", "https://api.github.com", "acme/clusters", ""},
		{ForgeGitHub, "ssh://git@github.com/acme/clusters", "", "https://api.github.com", "acme/clusters", ""},
		{ForgeGitHub, "https://x-access-token:tok@ghe.example.com/acme/clusters.git", "", "https://ghe.example.com/api/v3", "acme/clusters", ""},
		{ForgeGitea, "https://gitea.example.com:3000/ops/clusters.git", "", "https://gitea.example.com:3000/api/v1", "ops/clusters", ""},
		{ForgeGitea, "http://gitea.lan:3000/ops/clusters", "", "http://gitea.lan:3000/api/v1", "ops/clusters", ""},
		{ForgeGitea, "ssh://git@gitea.example.com:2222/ops/clusters.git", "", "https://gitea.example.com/api/v1", "ops/clusters", ""},
		{ForgeGitLab, "git@gitlab.example.com:infra/k8s/clusters.git", "", "https://gitlab.example.com/api/v4", "infra/k8s/clusters", ""},
		{ForgeGitLab, "https://gitlab.com/infra/clusters", "http://127.0.0.1:9/api/v4/", "http://127.0.0.1:9/api/v4", "infra/clusters", ""},
		{ForgeGitHub, "https://github.com/acme/sub/clusters.git", "", "", "", "is not owner/repository"},
		{ForgeGitLab, "https://gitlab.com/clusters.git", "", "", "", "is not group/project"},
		{ForgeGitHub, "file:///srv/git/clusters.git", "", "", "", "cannot be read from --repo"},
		{"bitbucket", "https://bitbucket.org/a/b.git", "", "", "", `--commit-status "bitbucket"`},
		{ForgeGitea, "https://gitea.example.com/a/b.git", "https://user:pw@gitea.example.com/api/v1", "", "", "--commit-status-api"},
	} {
		f, err := NewForge(tc.kind, tc.repo, tc.api, "tok")
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("NewForge(%s, %s) = %v, want the error %q", tc.kind, tc.repo, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("the error shows a credential: %v", err)
			}
		case err != nil:
			t.Errorf("NewForge(%s, %s): %v", tc.kind, tc.repo, err)
		case f.API != tc.wantAPI || f.Project != tc.wantProject:
			t.Errorf("NewForge(%s, %s) = API %s, project %s; want %s, %s", tc.kind, tc.repo, f.API, f.Project, tc.wantAPI, tc.wantProject)
		}
	}
	if _, err := NewForge(ForgeGitHub, "https://github.com/a/b", "", ""); err == nil || !strings.Contains(err.Error(), EnvCommitStatusToken) {
		t.Errorf("no token: %v", err)
	}
}
