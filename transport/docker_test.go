package transport

import (
	"context"
	"net"
	"net/http"
	"testing"
)

// TestDockerClientTransport: a Docker client's requests go through the
// bound on answers straight to its own *http.Transport, without the
// OpenTelemetry wrapper the Docker client puts around it.
func TestDockerClientTransport(t *testing.T) {
	cli, err := NewDockerClient("n1", "/var/run/docker.sock", func(context.Context, string, string) (net.Conn, error) {
		return nil, net.ErrClosed
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, ok := cli.HTTPClient().Transport.(*boundedAnswers)
	if !ok {
		t.Fatalf("the client's transport is %T, want *boundedAnswers", cli.HTTPClient().Transport)
	}
	if _, ok := b.next.(*http.Transport); !ok {
		t.Errorf("the bound wraps %T, want the *http.Transport itself", b.next)
	}
}
