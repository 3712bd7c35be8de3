package etcdmember

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeMember is an etcd member's Cluster service on loopback (etcd's own
// gRPC protocol) that answers membership changes with err (nil: done), and
// records them.
type fakeMember struct {
	pb.UnimplementedClusterServer
	err     error
	members []*pb.Member
	// hang makes it answer no change until the caller gives up.
	hang bool
	// statusErrors are the errors its status lists (an alarm).
	statusErrors []string

	mu    sync.Mutex
	calls []string
}

func (f *fakeMember) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// called is what f was asked, in order.
func (f *fakeMember) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeMember) MemberAdd(_ context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	f.record("add " + r.PeerURLs[0])
	if f.err != nil {
		return nil, f.err
	}
	return &pb.MemberAddResponse{Header: &pb.ResponseHeader{}, Member: &pb.Member{ID: 7, PeerURLs: r.PeerURLs, IsLearner: r.IsLearner}}, nil
}

func (f *fakeMember) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	f.record("remove")
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	return &pb.MemberRemoveResponse{Header: &pb.ResponseHeader{}}, nil
}

func (f *fakeMember) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	f.record("list")
	return &pb.MemberListResponse{Header: &pb.ResponseHeader{}, Members: f.members}, nil
}

// fakeMaintenance is f's Maintenance service: its status.
type fakeMaintenance struct {
	pb.UnimplementedMaintenanceServer
	f *fakeMember
}

func (m *fakeMaintenance) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	m.f.record("status")
	return &pb.StatusResponse{Header: &pb.ResponseHeader{}, Errors: m.f.statusErrors}, nil
}

// serve runs f on a loopback port until the test ends and returns its
// client URL.
func serve(t *testing.T, f *fakeMember) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterClusterServer(srv, f)
	pb.RegisterMaintenanceServer(srv, &fakeMaintenance{f: f})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "http://" + l.Addr().String()
}

func dialFake(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	var d net.Dialer
	return dialFakeWith(t, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}, endpoints...)
}

func dialFakeWith(t *testing.T, dial Dialer, endpoints ...string) *Client {
	t.Helper()
	c, err := Dial(t.Context(), endpoints, nil, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestChangeMovesOn: a member that answers "etcdserver: server stopped"
// (it was removed, or restarts), that times out or has no leader (a
// loaded machine) passes the change to the next member of via; a removal
// such a member had applied is found done.
func TestChangeMovesOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"server stopped", rpctypes.ErrGRPCStopped},
		{"request timed out", rpctypes.ErrGRPCTimeout},
		{"no leader", rpctypes.ErrGRPCNoLeader},
		{"unavailable", status.Error(codes.Unavailable, "connection refused")},
		{"no answer in time", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failing := &fakeMember{err: tc.err, hang: tc.err == nil}
			removedAlready := &fakeMember{err: rpctypes.ErrGRPCMemberNotFound}
			staying := &fakeMember{}
			via := []string{serve(t, failing), serve(t, removedAlready), serve(t, staying)}
			c := dialFake(t, via...)
			c.callTimeout = 500 * time.Millisecond
			if err := c.Remove(t.Context(), via, 9); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			for name, f := range map[string]*fakeMember{"failing": failing, "removed already": removedAlready} {
				if diff := cmp.Diff([]string{"remove"}, f.called()); diff != "" {
					t.Errorf("%s member's calls (-want +got):\n%s", name, diff)
				}
			}
			if calls := staying.called(); len(calls) != 0 {
				t.Errorf("asked again after the removal was found done: %v", calls)
			}
		})
	}
}

// TestAddLearnerMovesOn: an addition a stopping member could not make is
// made by the next member of via.
func TestAddLearnerMovesOn(t *testing.T) {
	stopping := &fakeMember{err: rpctypes.ErrGRPCStopped}
	staying := &fakeMember{}
	via := []string{serve(t, stopping), serve(t, staying)}
	c := dialFake(t, via...)

	peer := "https://10.0.0.8:2380"
	added, err := c.AddLearner(t.Context(), via, peer)
	if err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	if added.ID != 7 || !added.IsLearner || !cmp.Equal(added.PeerURLs, []string{peer}) {
		t.Errorf("added %+v", added)
	}
	if diff := cmp.Diff([]string{"add " + peer}, staying.called()); diff != "" {
		t.Errorf("staying member's calls (-want +got):\n%s", diff)
	}
}

// TestAddLearnerAddedAlready: an addition that went through although its
// answer was lost (the peer URL exists as a learner) returns the learner.
func TestAddLearnerAddedAlready(t *testing.T) {
	peer := "https://10.0.0.8:2380"
	f := &fakeMember{err: rpctypes.ErrGRPCPeerURLExist, members: []*pb.Member{
		{ID: 1, Name: "etcd-a", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{ID: 12, PeerURLs: []string{peer}, IsLearner: true},
	}}
	ep := serve(t, f)
	added, err := dialFake(t, ep).AddLearner(t.Context(), []string{ep}, peer)
	if err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	if added.ID != 12 || !added.IsLearner {
		t.Errorf("added %+v, want the learner 12", added)
	}

	f.members[1].IsLearner = false
	if _, err := dialFake(t, ep).AddLearner(t.Context(), []string{ep}, peer); err == nil {
		t.Error("AddLearner took a voting member with the peer URL for its learner")
	}
}

// TestChangeRefused: etcd's refusals other than those are not retried.
func TestChangeRefused(t *testing.T) {
	f := &fakeMember{err: rpctypes.ErrGRPCPermissionDenied}
	ep := serve(t, f)
	if err := dialFake(t, ep).Remove(t.Context(), []string{ep, ep}, 9); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("Remove: %v, want permission denied", err)
	}
	if calls := f.called(); len(calls) != 1 {
		t.Errorf("asked %v, want once", calls)
	}
}

func TestChangeWithoutMembers(t *testing.T) {
	c := dialFake(t, "http://127.0.0.1:1")
	if err := c.Remove(t.Context(), nil, 9); err == nil {
		t.Error("Remove through no member succeeded")
	}
}

// TestMembersHealth: each member's health is its status; a member whose
// address cannot be dialed (its node does not answer) has the dial's
// error, not etcd's client's timeout.
func TestMembersHealth(t *testing.T) {
	healthy := &fakeMember{}
	alarmed := &fakeMember{statusErrors: []string{"etcdserver: mvcc: database space exceeded"}}
	healthyURL, alarmedURL := serve(t, healthy), serve(t, alarmed)
	const downURL = "https://10.0.0.9:2379"
	healthy.members = []*pb.Member{
		{ID: 1, Name: "etcd-a", ClientURLs: []string{healthyURL}},
		{ID: 2, Name: "etcd-b", ClientURLs: []string{alarmedURL}},
		{ID: 3, Name: "etcd-c", ClientURLs: []string{downURL}},
		{ID: 4, PeerURLs: []string{"https://10.0.0.8:2380"}, IsLearner: true},
	}
	downErr := "node 10.0.0.9: cannot reach 10.0.0.9:22: connection refused"
	var d net.Dialer
	c := dialFakeWith(t, func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == "10.0.0.9:2379" {
			return nil, errors.New(downErr)
		}
		return d.DialContext(ctx, "tcp", addr)
	}, healthyURL)

	got, err := c.Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{
		{ID: 1, Name: "etcd-a", ClientURLs: []string{healthyURL}, Healthy: true},
		{ID: 2, Name: "etcd-b", ClientURLs: []string{alarmedURL}, Error: "etcdserver: mvcc: database space exceeded"},
		{ID: 3, Name: "etcd-c", ClientURLs: []string{downURL}, Error: downErr},
		{ID: 4, PeerURLs: []string{"https://10.0.0.8:2380"}, IsLearner: true, Error: "not started"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
}
