package sandboxtest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/rigger/rigger/sandbox"
)

// AgentContainer is the name the docker run line of `rigger agent command`
// gives the agent's container.
const AgentContainer = "rigger-agent"

// StartAgent runs line, the docker run line of `rigger agent command`, on
// node n's Docker engine, as its operator would, and removes the container
// when the test ends (logging what it logged).
func StartAgent(ctx context.Context, t testing.TB, n sandbox.Node, line string) {
	t.Helper()
	args := strings.Fields(line)
	if len(args) < 2 || args[0] != "docker" || args[1] != "run" || strings.Contains(line, "\n") {
		t.Fatalf("agent command printed %q, want one docker run line", line)
	}
	docker := DockerClient(t, n)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t.Logf("agent's log on %s:\n%s", n.Name, AgentLogs(ctx, docker, time.Time{}))
		if err := docker.ContainerRemove(ctx, AgentContainer, container.RemoveOptions{Force: true}); err != nil && !client.IsErrNotFound(err) {
			t.Errorf("remove the agent's container on %s: %v", n.Name, err)
		}
	})
	cmd := exec.CommandContext(ctx, "docker", append([]string{"-H", "unix://" + n.DockerSocket}, args[1:]...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start the agent on %s: %v\n%s", n.Name, err, b)
	}
}

// AgentLogs is what the agent's container logged since since (zero: all).
func AgentLogs(ctx context.Context, docker *client.Client, since time.Time) string {
	o := container.LogsOptions{ShowStdout: true, ShowStderr: true}
	if !since.IsZero() {
		o.Since = since.Format(time.RFC3339Nano)
	}
	r, err := docker.ContainerLogs(ctx, AgentContainer, o)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer r.Close()
	var b strings.Builder
	if _, err := stdcopy.StdCopy(&b, &b, r); err != nil {
		return fmt.Sprintf("%s(log cut short: %v)", b.String(), err)
	}
	return b.String()
}
