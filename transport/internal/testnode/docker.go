package testnode

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
)

// Docker is a Docker engine API on a Unix socket that answers ping,
// version and container listing: what the transports' checks and the
// conformance suite call.
type Docker struct {
	Socket     string // local path of the socket
	APIVersion string
	// Container is the name of the one container it lists.
	Container string

	requests atomic.Int64
}

var versionPrefix = regexp.MustCompile(`^/v[0-9.]+`)

// StartDocker starts an engine that speaks apiVersion; it stops when the
// test ends.
func StartDocker(t testing.TB, apiVersion string) *Docker {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "rtd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &Docker{Socket: filepath.Join(dir, "docker.sock"), APIVersion: apiVersion, Container: "echo"}
	ln, err := net.Listen("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(d.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return d
}

// Requests is how many API requests the engine has served.
func (d *Docker) Requests() int { return int(d.requests.Load()) }

func (d *Docker) serve(w http.ResponseWriter, r *http.Request) {
	d.requests.Add(1)
	w.Header().Set("Api-Version", d.APIVersion)
	w.Header().Set("Ostype", "linux")
	path := versionPrefix.ReplaceAllString(r.URL.Path, "")
	switch path {
	case "/_ping":
		w.Write([]byte("OK"))
	case "/version":
		json.NewEncoder(w).Encode(map[string]string{
			"Version": "20.10.24-testnode", "ApiVersion": d.APIVersion, "MinAPIVersion": "1.12",
			"Os": "linux", "Arch": "amd64",
		})
	case "/containers/json":
		json.NewEncoder(w).Encode([]map[string]any{{
			"Id": "0123456789ab", "Names": []string{"/" + d.Container}, "Image": "rigger-echo",
			"State": "running", "Status": "Up 1 second",
		}})
	default:
		http.Error(w, `{"message":"not implemented by testnode"}`, http.StatusNotFound)
	}
}
