package etcdmember

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// fakeMember is an etcd member's Cluster service on loopback (etcd's own
// gRPC protocol) that answers membership changes with err (nil: done), and
// records them.
type fakeMember struct {
	pb.UnimplementedClusterServer
	err     error
	members []*pb.Member

	mu    sync.Mutex
	calls []string
}

func (f *fakeMember) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeMember) MemberAdd(_ context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	f.record("add " + r.PeerURLs[0])
	if f.err != nil {
		return nil, f.err
	}
	return &pb.MemberAddResponse{Header: &pb.ResponseHeader{}, Member: &pb.Member{ID: 7, PeerURLs: r.PeerURLs, IsLearner: r.IsLearner}}, nil
}

func (f *fakeMember) MemberRemove(_ context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	f.record("remove")
	if f.err != nil {
		return nil, f.err
	}
	return &pb.MemberRemoveResponse{Header: &pb.ResponseHeader{}}, nil
}

func (f *fakeMember) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	f.record("list")
	return &pb.MemberListResponse{Header: &pb.ResponseHeader{}, Members: f.members}, nil
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
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "http://" + l.Addr().String()
}

func dialFake(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	var d net.Dialer
	c, err := Dial(t.Context(), endpoints, nil, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestChangeMovesOnWhenStopped: a member that answers "etcdserver: server
// stopped" (it was removed, or restarts) passes the change to the next
// member of via; a removal the stopped member had applied is found done.
func TestChangeMovesOnWhenStopped(t *testing.T) {
	stopping := &fakeMember{err: rpctypes.ErrGRPCStopped}
	removedAlready := &fakeMember{err: rpctypes.ErrGRPCMemberNotFound}
	staying := &fakeMember{}
	via := []string{serve(t, stopping), serve(t, removedAlready), serve(t, staying)}
	c := dialFake(t, via...)

	if err := c.Remove(t.Context(), via, 9); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for name, f := range map[string]*fakeMember{"stopping": stopping, "removed already": removedAlready} {
		if diff := cmp.Diff([]string{"remove"}, f.calls); diff != "" {
			t.Errorf("%s member's calls (-want +got):\n%s", name, diff)
		}
	}
	if len(staying.calls) != 0 {
		t.Errorf("asked again after the removal was found done: %v", staying.calls)
	}

	stopping.calls = nil
	peer := "https://10.0.0.8:2380"
	added, err := c.AddLearner(t.Context(), []string{via[0], via[2]}, peer)
	if err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	if added.ID != 7 || !added.IsLearner || !cmp.Equal(added.PeerURLs, []string{peer}) {
		t.Errorf("added %+v", added)
	}
	if diff := cmp.Diff([]string{"add " + peer}, staying.calls); diff != "" {
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

func TestChangeWithoutMembers(t *testing.T) {
	c := dialFake(t, "http://127.0.0.1:1")
	if err := c.Remove(t.Context(), nil, 9); err == nil {
		t.Error("Remove through no member succeeded")
	}
}
