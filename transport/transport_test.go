package transport_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/rigger/rigger/internal/flood"
	"github.com/rigger/rigger/internal/memwatch"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/internal/testnode"
)

// localDial reaches a local socket, standing in for a transport's dial.
func localDial(path string) transport.Dialer {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

func TestCheckDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		api     string
		wantErr bool
		client  string // the API version the client settles on
	}{
		{"1.41", false, "1.41"},
		{"1.47", false, "1.47"},
		{"1.40", true, ""},
		{"1.24", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.api, func(t *testing.T) {
			d := testnode.StartDocker(t, tt.api)
			// The socket path given to the client is the node's; the dialer
			// decides where bytes go.
			cli, err := transport.NewDockerClient("n1", "/var/run/docker.sock", localDial(d.Socket), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			_, err = transport.CheckDocker(ctx, "n1", cli)
			var old *transport.DockerVersionError
			switch {
			case tt.wantErr && !errors.As(err, &old):
				t.Fatalf("CheckDocker against API %s: %v, want *DockerVersionError", tt.api, err)
			case tt.wantErr:
				if old.APIVersion != tt.api || old.Node != "n1" || !strings.Contains(err.Error(), transport.MinDockerEngine) {
					t.Errorf("error = %+v: %v", old, err)
				}
			case err != nil:
				t.Fatalf("CheckDocker against API %s: %v", tt.api, err)
			case cli.ClientVersion() != tt.client:
				t.Errorf("client speaks API %s, want %s", cli.ClientVersion(), tt.client)
			}
		})
	}
}

func TestCheckDockerKeepsSocketError(t *testing.T) {
	want := &transport.DockerSocketError{Node: "n1", Path: "/var/run/docker.sock", User: "rke", Problem: transport.SocketMissing}
	cli, err := transport.NewDockerClient("n1", "/var/run/docker.sock", func(context.Context, string, string) (net.Conn, error) {
		return nil, want
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = transport.CheckDocker(context.Background(), "n1", cli)
	var got *transport.DockerSocketError
	if !errors.As(err, &got) || got != want {
		t.Fatalf("CheckDocker: %v, want the dialer's *DockerSocketError", err)
	}
	if err.Error() != want.Error() {
		t.Errorf("CheckDocker wrapped the socket error: %q", err)
	}
}

// Every error a person reads says what to do next.
func TestErrorsSayWhatToDo(t *testing.T) {
	tests := []struct {
		err  error
		want []string
	}{
		{&transport.UnreachableError{Node: "n1", Addr: "10.0.0.1:22", Op: transport.OpConnect, Err: errors.New("connection refused")},
			[]string{"node n1", "10.0.0.1:22", "connection refused", "sshd runs there"}},
		{&transport.UnreachableError{Node: "n1", Addr: "10.0.0.1:22", Op: transport.OpConnect, Timeout: 10 * time.Second},
			[]string{"no answer within 10s", "rigger.ssh.connect_timeout"}},
		{&transport.UnreachableError{Node: "n1", Addr: "10.0.0.1:22", Via: "bastion_host 10.0.0.9:22", Op: transport.OpHandshake, Timeout: time.Second},
			[]string{"via bastion_host 10.0.0.9:22", "did not complete the SSH handshake within 1s", "MaxStartups"}},
		{&transport.DialError{Node: "n1", Network: "tcp", Addr: "127.0.0.1:2379", Err: errors.New("connect failed")},
			[]string{"node n1", "tcp 127.0.0.1:2379 on the node"}},
		{&transport.DockerSocketError{Node: "n1", Path: "/var/run/docker.sock", User: "rke", Problem: transport.SocketPermissionDenied},
			[]string{"permission denied for user rke", "usermod -aG docker rke"}},
		{&transport.DockerSocketError{Node: "n1", Path: "/run/d.sock", Problem: transport.SocketMissing},
			[]string{"/run/d.sock does not exist", "docker_socket"}},
		{&transport.DockerSocketError{Node: "n1", Path: "/run/d.sock", Problem: transport.SocketForwardingRefused},
			[]string{"AllowStreamLocalForwarding yes"}},
		{&transport.DockerSocketError{Node: "n1", Path: "/run/d.sock", User: "rke", Problem: transport.SocketUnavailable, Detail: "open failed"},
			[]string{"does not exist", "usermod -aG docker rke", "AllowStreamLocalForwarding", "(node says: open failed)"}},
		{&transport.DockerVersionError{Node: "n1", APIVersion: "1.40", EngineVersion: "19.03.15", MinAPIVersion: "1.41"},
			[]string{"Docker engine 19.03.15 speaks API 1.40", "1.41 or newer", "upgrade Docker"}},
	}
	for _, tt := range tests {
		msg := tt.err.Error()
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%T message %q does not contain %q", tt.err, msg, w)
			}
		}
		// Docker's client replaces an error that says these with its own
		// "Cannot connect to the Docker daemon", losing ours.
		if _, ok := tt.err.(*transport.DockerSocketError); ok {
			for _, bad := range []string{"connection refused", "dial unix"} {
				if strings.Contains(msg, bad) {
					t.Errorf("DockerSocketError message %q contains %q", msg, bad)
				}
			}
		}
	}
}

func TestNodeDialer(t *testing.T) {
	var gotNode, gotAddr string
	fake := fakeTransport{DialFn: func(_ context.Context, node, _, addr string) (net.Conn, error) {
		gotNode, gotAddr = node, addr
		return nil, errors.New("fake")
	}}
	transport.NodeDialer(fake, "n2")(context.Background(), "tcp", "127.0.0.1:2379")
	if gotNode != "n2" || gotAddr != "127.0.0.1:2379" {
		t.Errorf("NodeDialer dialed %s on %s, want 127.0.0.1:2379 on n2", gotAddr, gotNode)
	}
}

// fakeTransport is a transport.Transport whose Dial is DialFn.
type fakeTransport struct {
	transport.Transport
	DialFn func(ctx context.Context, node, network, addr string) (net.Conn, error)
}

func (f fakeTransport) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	return f.DialFn(ctx, node, network, addr)
}

// TestDockerAnswersBounded: an engine (a compromised node, or a fake one
// behind an agent) that answers each call with far more than an engine
// does does not make the client read, and keep, all of it: each class of
// answer has its bounds, in bytes and in what decoding it costs (a list of
// 150,000 empty objects is 450 KB, and 200 MB once decoded as container
// summaries). Both transports build their Docker clients with
// NewDockerClient.
func TestDockerAnswersBounded(t *testing.T) {
	const mib = 1 << 20
	objects := func(head, item, tail string, n int) func() io.Reader {
		return func() io.Reader {
			return io.MultiReader(strings.NewReader(head), io.LimitReader(flood.Repeat(item), int64(n*len(item))), strings.NewReader(tail))
		}
	}
	tests := []struct {
		name  string
		path  string // the path the hostile answer is given for
		body  func() io.Reader
		call  func(ctx context.Context, cli *client.Client) error
		bound string // in the error
	}{
		{"endless version", "/version", func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"Version":"`), io.LimitReader(flood.Repeat("a"), 8*mib))
		}, func(ctx context.Context, cli *client.Client) error { _, err := cli.ServerVersion(ctx); return err }, "over 64 KiB"},
		{"version of many components", "/version", objects(`{"Components":[`, `{},`, `{}]}`, 20000),
			func(ctx context.Context, cli *client.Client) error { _, err := cli.ServerVersion(ctx); return err }, "of memory once decoded"},
		{"list of many containers", "/containers/json", objects(`[`, `{},`, `{}]`, 150000),
			func(ctx context.Context, cli *client.Client) error {
				_, err := cli.ContainerList(ctx, container.ListOptions{All: true})
				return err
			}, "4096 entries"},
		{"a container of many labels", "/containers/json", func() io.Reader {
			// Whole members of 14 bytes: "00000001":"",
			return io.MultiReader(strings.NewReader(`[{"Labels":{`), io.LimitReader(flood.Sequence(`"%08d":"",`), 4*mib/14*14), strings.NewReader(`"end":""}}]`))
		}, func(ctx context.Context, cli *client.Client) error {
			_, err := cli.ContainerList(ctx, container.ListOptions{All: true})
			return err
		}, "64 MiB of memory once decoded"},
		{"inspect of many mounts", "/containers/c1/json", objects(`{"Id":"c1","Mounts":[`, `{},`, `{}]}`, 200000),
			func(ctx context.Context, cli *client.Client) error {
				_, err := cli.ContainerInspect(ctx, "c1")
				return err
			},
			"16 MiB of memory once decoded"},
		{"endless pull message", "/images/create", func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"status":"`), io.LimitReader(flood.Repeat("a"), 24*mib))
		}, drainPull, "1 MiB in one message"},
		{"endless pull progress", "/images/create", func() io.Reader {
			return io.LimitReader(flood.Repeat(`{"status":"Downloading","progressDetail":{"current":1,"total":2},"id":"0123456789ab"}`+"\r\n"), 80*mib)
		}, drainPull, "over 64 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var offered, written atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Api-Version", "1.43")
				if !strings.HasSuffix(r.URL.Path, tt.path) {
					w.Write([]byte(`{}`))
					return
				}
				body := tt.body()
				n, _ := io.Copy(io.Discard, tt.body())
				offered.Store(n)
				n, _ = io.Copy(w, body)
				written.Store(n)
			}))
			defer srv.Close()
			cli, err := transport.NewDockerClient("n1", "/var/run/docker.sock", func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			peak := memwatch.Peak()
			err = tt.call(ctx, cli)
			grew := peak()
			var tooLarge *transport.DockerAnswerTooLargeError
			if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), tt.bound) || !strings.Contains(err.Error(), "node n1") ||
				!strings.Contains(err.Error(), tt.path) {
				t.Errorf("%s from a hostile answer: %v; want a *DockerAnswerTooLargeError naming node n1, %s and %q", tt.path, err, tt.path, tt.bound)
			}
			if grew > 48*mib {
				t.Errorf("the heap grew by %d MiB reading the answer, want less than 48", grew>>20)
			}
			cli.Close()
			srv.CloseClientConnections()
			srv.Close()
			// A small answer fits in the connection's buffers whether
			// it is read or not.
			if w, o := written.Load(), offered.Load(); o > 16*mib && w >= o {
				t.Errorf("the client read all %d MiB of the hostile answer", o>>20)
			}
		})
	}
}

// drainPull pulls an image and reads the pull's progress to its end.
func drainPull(ctx context.Context, cli *client.Client) error {
	rc, err := cli.ImagePull(ctx, "rancher/rke-tools:v0.1.100", image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	return err
}
