package dockerop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/rigger/rigger/reconcile/desired"
)

// callEngine records the calls Replace makes; the image is there and every
// call succeeds.
type callEngine struct {
	Engine
	calls []string
}

func (e *callEngine) add(call ...string) { e.calls = append(e.calls, strings.Join(call, " ")) }

func (e *callEngine) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	e.add("image inspect", ref)
	return image.InspectResponse{}, nil
}

func (e *callEngine) ContainerCreate(_ context.Context, _ *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	e.add("create", name)
	return container.CreateResponse{ID: "new"}, nil
}

func (e *callEngine) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	e.add("start", id)
	return nil
}

func (e *callEngine) ContainerStop(_ context.Context, id string, o container.StopOptions) error {
	e.add("stop", id, fmt.Sprintf("within %ds", *o.Timeout))
	return nil
}

func (e *callEngine) ContainerRename(_ context.Context, id, name string) error {
	e.add("rename", id, name)
	return nil
}

func (e *callEngine) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	e.add("remove", id)
	return nil
}

// TestReplaceCalls: a replace inspects the image once (not again before
// the create), and stops (within StopTimeout, or the grace given),
// renames, creates, starts and removes in that order.
func TestReplaceCalls(t *testing.T) {
	for grace, within := range map[time.Duration]string{0: "30s", 3 * time.Second: "3s"} {
		e := &callEngine{}
		c := &desired.Container{Name: "kubelet", Image: "hyperkube:v1"}
		if _, err := Replace(context.Background(), e, "n1", c, nil, grace); err != nil {
			t.Fatal(err)
		}
		want := []string{"image inspect hyperkube:v1", "remove kubelet-rigger-old", "stop kubelet within " + within, "rename kubelet kubelet-rigger-old",
			"create kubelet", "start new", "remove kubelet-rigger-old"}
		if diff := cmp.Diff(want, e.calls); diff != "" {
			t.Errorf("grace %s: Replace's calls (-want +got):\n%s", grace, diff)
		}
	}
}

// TestConfinedContainer: a confined container (rigger's own on the
// nodes) is created without any capability and cannot gain one.
func TestConfinedContainer(t *testing.T) {
	_, host := containerConfig(&desired.Container{Name: "etcd-rolling-snapshots", Image: "rigger/rigger:v1", Confined: true}, nil)
	if !slices.Equal(host.CapDrop, []string{"ALL"}) || !slices.Equal(host.SecurityOpt, []string{"no-new-privileges"}) || host.Privileged {
		t.Errorf("confined: cap drop %v, security opts %v, privileged %v", host.CapDrop, host.SecurityOpt, host.Privileged)
	}
	if _, host := containerConfig(&desired.Container{Name: "kubelet", Privileged: true}, nil); host.CapDrop != nil || host.SecurityOpt != nil {
		t.Errorf("not confined: cap drop %v, security opts %v", host.CapDrop, host.SecurityOpt)
	}
}

// startEngine fails the first fails starts with err.
type startEngine struct {
	callEngine
	fails int
	err   error
}

func (e *startEngine) ContainerStart(ctx context.Context, id string, o container.StartOptions) error {
	_ = e.callEngine.ContainerStart(ctx, id, o)
	if e.fails > 0 {
		e.fails--
		return e.err
	}
	return nil
}

// TestStartRuntimeLost: a start the engine answers with its runtime's
// connection closed is tried again, up to startTries in all, and the
// container is removed when the last fails; any other start error is not
// tried again.
func TestStartRuntimeLost(t *testing.T) {
	lost := fmt.Errorf("Error response from daemon: ttrpc: closed: unknown")
	for _, tc := range []struct {
		name    string
		fails   int
		err     error
		starts  int
		wantErr string
	}{
		{name: "once", fails: 1, err: lost, starts: 2},
		{name: "every time", fails: startTries, err: lost, starts: startTries, wantErr: "ttrpc: closed: unknown (started 3 times)"},
		{name: "another error", fails: 1, err: fmt.Errorf("Error response from daemon: OCI runtime create failed: exec: \"kubelet\": not found"), starts: 1, wantErr: "OCI runtime create failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &startEngine{fails: tc.fails, err: tc.err}
			_, err := Create(context.Background(), e, "n1", &desired.Container{Name: "service-sidekick", Image: "rke-tools:v1"}, nil)
			starts := 0
			for _, c := range e.calls {
				if c == "start new" {
					starts++
				}
			}
			if starts != tc.starts {
				t.Errorf("started %d times, want %d (%v)", starts, tc.starts, e.calls)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Create: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Create: %v, want an error with %q", err, tc.wantErr)
			case tc.wantErr != "" && e.calls[len(e.calls)-1] != "remove new":
				t.Errorf("a container that did not start is left behind: %v", e.calls)
			}
		})
	}
}
