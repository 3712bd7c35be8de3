package dockerop

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/rigger/rigger/internal/flood"
	"github.com/rigger/rigger/internal/memwatch"
	"github.com/rigger/rigger/transport"
)

// hostileEngine is a node's engine that has no image and answers the
// path that ends with path with body, through a Docker client made as
// the transports make theirs. written gives how much of body it wrote,
// once the connections are closed and its handlers have returned (within
// 10 s).
func hostileEngine(t *testing.T, path string, body func() io.Reader) (cli *client.Client, written func() int64) {
	t.Helper()
	var n atomic.Int64
	var handlers sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		w.Header().Set("Api-Version", "1.43")
		switch {
		case strings.HasSuffix(r.URL.Path, path):
			w.Header().Set("Content-Type", "application/json")
			io.Copy(countingWriter{w, &n}, body())
		case strings.HasSuffix(r.URL.Path, "/json") && strings.Contains(r.URL.Path, "/images/"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"message":"No such image"}`))
		default:
			w.Write([]byte(`{}`))
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := transport.NewDockerClient("10.0.0.1", "/var/run/docker.sock", func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close(); srv.CloseClientConnections() })
	return cli, func() int64 {
		cli.Close()
		srv.CloseClientConnections()
		done := make(chan struct{})
		go func() { handlers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the engine still writes 10 s after rigger closed its connections")
		}
		return n.Load()
	}
}

// countingWriter adds what it writes to n as it goes.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// TestPullBounded: a node that answers a pull with an endless message,
// or with an endless progress of ever new layers, costs rigger a bounded
// amount of memory and fails the pull naming the node.
func TestPullBounded(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name string
		body func() io.Reader
	}{
		{"one endless message", func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"status":"`), io.LimitReader(flood.Repeat("a"), 48*mib))
		}},
		{"a new layer every message", func() io.Reader {
			return io.LimitReader(flood.Sequence(`{"status":"Downloading","progressDetail":{"current":1,"total":2},"progress":"[>  ]","id":"%064d"}`+"\r\n"), 96*mib)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cli, written := hostileEngine(t, "/images/create", tt.body)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			peak := memwatch.Peak()
			err := EnsureImage(ctx, cli, "10.0.0.1", "rancher/rke-tools:v0.1.100")
			grew := peak()
			var ie *ImageError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "node 10.0.0.1") {
				t.Fatalf("EnsureImage from a hostile pull: %v, want an *ImageError naming the node", err)
			}
			var tooLarge *transport.DockerAnswerTooLargeError
			if !errors.As(err, &tooLarge) {
				t.Errorf("EnsureImage from a hostile pull: %v, want the transport's bound to stop it", err)
			}
			if grew > 32*mib {
				t.Errorf("the pull took %d MiB of the heap, want less than 32", grew>>20)
			}
			// What the engine wrote: what rigger read (at most the
			// transport's bound on a progress stream), and what the
			// sockets' buffers took in; not the whole body.
			if w := written(); w >= transport.DockerMaxProgress+16*mib {
				t.Errorf("rigger read %d MiB of the pull's progress, want at most the %d MiB of the bound", w>>20, transport.DockerMaxProgress>>20)
			}
		})
	}
}

// frame is one frame of a multiplexed stream.
func frame(stream byte, size uint32, payload string) []byte {
	h := make([]byte, 8, 8+len(payload))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], size)
	return append(h, payload...)
}

// TestLogsBounded: a node whose log answer announces a frame of 3 GiB
// costs no 3 GiB buffer (Docker's stdcopy makes one).
func TestLogsBounded(t *testing.T) {
	body := func() io.Reader { return bytes.NewReader(frame(1, 3<<30, "short")) }
	cli, _ := hostileEngine(t, "/logs", body)
	peak := memwatch.Peak()
	logs := Logs(context.Background(), cli, "etcd")
	if grew := peak(); grew > 16<<20 {
		t.Errorf("reading the logs took %d MiB of the heap, want less than 16", grew>>20)
	}
	if logs != "" {
		t.Errorf("Logs = %q, want nothing from a broken stream", logs)
	}
}

func TestDemux(t *testing.T) {
	in := slicesConcat(frame(1, 3, "out"), frame(2, 3, "err"), frame(1, 1, "!"))
	var out, errOut bytes.Buffer
	if err := demux(&out, &errOut, bytes.NewReader(in)); err != nil || out.String() != "out!" || errOut.String() != "err" {
		t.Errorf("demux = %q, %q, %v", out.String(), errOut.String(), err)
	}
	for name, in := range map[string][]byte{
		"cut short":       frame(1, 10, "abc"),
		"cut in a header": {1, 0, 0},
		"no stream":       frame(7, 1, "x"),
		"engine's error":  frame(3, 4, "boom"),
		"huge frame":      frame(1, maxLogFrame+1, "x"),
	} {
		if err := demux(io.Discard, io.Discard, bytes.NewReader(in)); err == nil {
			t.Errorf("demux of a stream %s: no error", name)
		}
	}
}

func slicesConcat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
