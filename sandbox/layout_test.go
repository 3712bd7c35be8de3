package sandbox

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOptionsWithDefaults(t *testing.T) {
	tests := []struct {
		name    string
		in      Options
		want    Options
		wantErr string
	}{
		{name: "zero is the default sandbox", in: Options{}, want: Options{Name: "rigger", Nodes: 3}},
		{name: "kept", in: Options{Name: "test1", Nodes: 5, Subnet: 1, Images: true}, want: Options{Name: "test1", Nodes: 5, Subnet: 1, Images: true}},
		{name: "one letter", in: Options{Name: "a"}, want: Options{Name: "a", Nodes: 3}},
		{name: "upper case", in: Options{Name: "Rigger"}, wantErr: "lower-case"},
		{name: "slash", in: Options{Name: "a/b"}, wantErr: "lower-case"},
		{name: "trailing dash", in: Options{Name: "a-"}, wantErr: "lower-case"},
		{name: "too long", in: Options{Name: strings.Repeat("a", 33)}, wantErr: "1 to 32"},
		{name: "negative nodes", in: Options{Nodes: -1}, wantErr: "1 to 64"},
		{name: "too many nodes", in: Options{Nodes: 65}, wantErr: "1 to 64"},
		{name: "subnet out of range", in: Options{Subnet: 256}, wantErr: "0 to 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("withDefaults() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("withDefaults(): %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("withDefaults() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	s := layout("rigger", 0, 3)
	want := []Node{
		{Name: "node1", Hostname: "rigger-node1", Address: "10.231.0.11", User: "root", Port: 22,
			Dir: "/var/lib/rigger-sandbox/rigger/node1", NetNS: "rigger-sandbox-rigger-node1", Veth: "rigsb0n1",
			DockerSocket:     "/var/lib/rigger-sandbox/rigger/node1/run/docker.sock",
			ContainerdSocket: "/var/lib/rigger-sandbox/rigger/node1/run/containerd/containerd.sock"},
		{Name: "node2", Hostname: "rigger-node2", Address: "10.231.0.12", User: "root", Port: 22,
			Dir: "/var/lib/rigger-sandbox/rigger/node2", NetNS: "rigger-sandbox-rigger-node2", Veth: "rigsb0n2",
			DockerSocket:     "/var/lib/rigger-sandbox/rigger/node2/run/docker.sock",
			ContainerdSocket: "/var/lib/rigger-sandbox/rigger/node2/run/containerd/containerd.sock"},
		{Name: "node3", Hostname: "rigger-node3", Address: "10.231.0.13", User: "root", Port: 22,
			Dir: "/var/lib/rigger-sandbox/rigger/node3", NetNS: "rigger-sandbox-rigger-node3", Veth: "rigsb0n3",
			DockerSocket:     "/var/lib/rigger-sandbox/rigger/node3/run/docker.sock",
			ContainerdSocket: "/var/lib/rigger-sandbox/rigger/node3/run/containerd/containerd.sock"},
	}
	if diff := cmp.Diff(want, s.Nodes); diff != "" {
		t.Errorf("layout nodes (-want +got):\n%s", diff)
	}
	if s.Bridge != "rigsb0" || s.BridgeAddress != "10.231.0.1" {
		t.Errorf("bridge = %s %s, want rigsb0 10.231.0.1", s.Bridge, s.BridgeAddress)
	}
	if s.KeyPath != "/var/lib/rigger-sandbox/rigger/ssh/id_ed25519" || s.KnownHostsPath != "/var/lib/rigger-sandbox/rigger/ssh/known_hosts" {
		t.Errorf("key paths = %s %s", s.KeyPath, s.KnownHostsPath)
	}
}

// Interface names are at most 15 bytes (IFNAMSIZ-1), and the largest
// subnet and node count must fit; a Unix socket path at most 107.
func TestLayoutLimits(t *testing.T) {
	s := layout(strings.Repeat("x", 32), 255, MaxNodes)
	if len(s.Bridge) > 15 {
		t.Errorf("bridge %q is longer than 15", s.Bridge)
	}
	seen := map[string]bool{}
	for _, n := range s.Nodes {
		if len(n.Veth) > 15 {
			t.Errorf("veth %q is longer than 15", n.Veth)
		}
		for _, sock := range []string{n.DockerSocket, n.ContainerdSocket} {
			if len(sock) > 107 {
				t.Errorf("socket %q is longer than 107", sock)
			}
		}
		for _, v := range []string{n.Veth, n.Address, n.NetNS, n.Hostname} {
			if seen[v] {
				t.Errorf("%q used twice", v)
			}
			seen[v] = true
		}
	}
	if last := s.Nodes[MaxNodes-1].Address; last != "10.231.255.74" {
		t.Errorf("last address = %s, want 10.231.255.74", last)
	}
	// Two sandboxes differ in every shared name.
	a, b := layout("a", 1, 1), layout("b", 2, 1)
	if a.Bridge == b.Bridge || a.Nodes[0].Veth == b.Nodes[0].Veth || a.Nodes[0].NetNS == b.Nodes[0].NetNS {
		t.Errorf("sandboxes a and b share names: %+v %+v", a.Nodes[0], b.Nodes[0])
	}
}

func TestMountDirName(t *testing.T) {
	for in, want := range map[string]string{
		"/etc/kubernetes":     "etc-kubernetes",
		"/var/lib/docker":     "var-lib-docker",
		"/run":                "run",
		"/var/log/pods":       "var-log-pods",
		"/opt/rke":            "opt-rke",
		"/var/lib/containerd": "var-lib-containerd",
	} {
		if got := mountDirName(in); got != want {
			t.Errorf("mountDirName(%q) = %q, want %q", in, got, want)
		}
	}
	// Every path a node owns has a directory of its own, and /run comes
	// last so that nothing mounted below it is hidden.
	seen := map[string]bool{}
	ms := nodeMounts()
	for _, p := range ms {
		if seen[mountDirName(p)] {
			t.Errorf("two mounts share directory %s", mountDirName(p))
		}
		seen[mountDirName(p)] = true
	}
	if ms[len(ms)-1] != "/run" {
		t.Errorf("last mount = %s, want /run", ms[len(ms)-1])
	}
}

func TestStateRoundTrip(t *testing.T) {
	s := layout("demo", 7, 2)
	s.Ready = true
	s.SystemImages = map[string]string{"etcd": "rigger-sandbox/etcd:v3.5.16"}
	b, err := s.marshalState()
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseState(b)
	if err != nil {
		t.Fatalf("parseState: %v\n%s", err, b)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("state round trip (-want +got):\n%s", diff)
	}
}

func TestParseStateRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":     `{`,
		"no nodes":     `{"Name":"x","Subnet":1,"Nodes":0}`,
		"bad name":     `{"Name":"../etc","Subnet":1,"Nodes":1}`,
		"bad subnet":   `{"Name":"x","Subnet":300,"Nodes":1}`,
		"many nodes":   `{"Name":"x","Subnet":1,"Nodes":1000}`,
		"empty object": `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			if s, err := parseState([]byte(in)); err == nil {
				t.Errorf("parseState(%s) = %+v, want an error", in, s)
			}
		})
	}
}

func FuzzParseState(f *testing.F) {
	good, _ := layout("rigger", 0, 3).marshalState()
	f.Add(good)
	f.Add([]byte(`{"Name":"x","Subnet":1,"Nodes":2,"Ready":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseState(b)
		if err != nil {
			return
		}
		// Whatever parses names only paths below the state root.
		for _, n := range s.Nodes {
			if !strings.HasPrefix(n.Dir, StateRoot+"/") || strings.Contains(n.Dir, "..") {
				t.Errorf("node directory %q outside %s", n.Dir, StateRoot)
			}
		}
	})
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		in   string
		want procStat
	}{
		{"30264 (dockerd) S 30257 30264 30264 0 -1", procStat{pid: 30264, ppid: 30257, comm: "dockerd", state: 'S'}},
		{"42 (a (b) c) Z 1 42", procStat{pid: 42, ppid: 1, comm: "a (b) c", state: 'Z'}},
		{"7 (sh) R 0", procStat{pid: 7, ppid: 0, comm: "sh", state: 'R'}},
	}
	for _, tt := range tests {
		got, err := parseProcStat(tt.in)
		if err != nil {
			t.Errorf("parseProcStat(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parseProcStat(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "12", "x (y) S 1", "12 (y)", "12 (y) S x"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): want an error", bad)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	in := `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
70 42 0:4 mnt:[4026532246] /run/rigger-sandbox/x/node1.mnt rw - nsfs nsfs rw
71 27 0:5 / /mnt/with\040space rw shared:3 master:1 - tmpfs none rw
`
	got, err := parseMountInfo(bufio.NewScanner(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountInfo{
		{mountPoint: "/", fsType: "ext4"},
		{mountPoint: "/run/rigger-sandbox/x/node1.mnt", fsType: "nsfs"},
		{mountPoint: "/mnt/with space", fsType: "tmpfs"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(mountInfo{})); diff != "" {
		t.Errorf("parseMountInfo (-want +got):\n%s", diff)
	}
	if _, err := parseMountInfo(bufio.NewScanner(strings.NewReader("1 2 3\n"))); err == nil {
		t.Error("parseMountInfo of a short line: want an error")
	}
}

func TestMissingDirs(t *testing.T) {
	dir := t.TempDir()
	got := missingDirs(dir + "/a/b/c")
	want := []string{dir + "/a", dir + "/a/b", dir + "/a/b/c"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("missingDirs (-want +got):\n%s", diff)
	}
	if got := missingDirs(dir); len(got) != 0 {
		t.Errorf("missingDirs(existing) = %v, want none", got)
	}
}

func TestRangeConflict(t *testing.T) {
	parseRoutes := func(s string) []ipRoute {
		var rs []ipRoute
		if err := json.Unmarshal([]byte(s), &rs); err != nil {
			t.Fatal(err)
		}
		return rs
	}
	parseAddrs := func(s string) []ipAddr {
		var as []ipAddr
		if err := json.Unmarshal([]byte(s), &as); err != nil {
			t.Fatal(err)
		}
		return as
	}
	hostRoutes := `[{"dst":"default","gateway":"192.0.2.1","dev":"eth0"},{"dst":"192.0.2.0/24","dev":"eth0"},{"type":"local","dst":"192.0.2.2","dev":"eth0","table":"local"}]`
	hostAddrs := `[{"ifname":"eth0","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24}]}]`
	ours := `[{"type":"unreachable","dst":"10.231.0.0/16"},{"dst":"10.231.1.0/24","dev":"rigsb1"},{"type":"local","dst":"10.231.1.1","dev":"rigsb1","table":"local"},{"type":"broadcast","dst":"10.231.1.255","dev":"rigsb1","table":"local"}]`
	ourAddrs := `[{"ifname":"rigsb1","addr_info":[{"family":"inet","local":"10.231.1.1","prefixlen":24}]}]`
	owned := map[string]string{"rigsb1": "test1"}
	tests := []struct {
		name    string
		subnet  int
		routes  string
		addrs   string
		owned   map[string]string
		wantErr string
	}{
		{name: "free machine", subnet: 0, routes: hostRoutes, addrs: hostAddrs},
		{name: "another sandbox elsewhere in the range", subnet: 0, routes: ours, addrs: ourAddrs, owned: owned},
		{name: "another sandbox on the subnet", subnet: 1, routes: ours, addrs: ourAddrs, owned: owned, wantErr: "sandbox test1"},
		{name: "a stateless bridge of ours", subnet: 1, routes: ours, addrs: ourAddrs, wantErr: "down --all"},
		{name: "someone else's route", subnet: 0, routes: `[{"dst":"10.231.9.0/24","dev":"eth0"}]`, addrs: hostAddrs, wantErr: "route 10.231.9.0/24 via eth0"},
		{name: "someone else's bigger route", subnet: 0, routes: `[{"dst":"10.0.0.0/8","dev":"wg0"}]`, addrs: hostAddrs, wantErr: "in use on this machine"},
		{name: "someone else's address", subnet: 3, routes: hostRoutes, addrs: `[{"ifname":"eth1","addr_info":[{"family":"inet","local":"10.231.200.5","prefixlen":32}]}]`, wantErr: "address 10.231.200.5 on eth1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := rangeConflict(tt.subnet, parseRoutes(tt.routes), parseAddrs(tt.addrs), tt.owned)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("rangeConflict: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("rangeConflict = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestHostPath(t *testing.T) {
	n := Node{Dir: "/var/lib/rigger-sandbox/x/node1"}
	for p, want := range map[string]string{
		"/etc/kubernetes/ssl/kube-ca.pem": "/var/lib/rigger-sandbox/x/node1/etc-kubernetes/ssl/kube-ca.pem",
		"/etc/cni/net.d":                  "/var/lib/rigger-sandbox/x/node1/etc-cni/net.d",
		"/var/lib/etcd":                   "/var/lib/rigger-sandbox/x/node1/var-lib-etcd",
		"/etc/kubernetesX/a":              "",
		"/etc/resolv.conf":                "",
	} {
		if got := n.HostPath(p); got != want {
			t.Errorf("HostPath(%s) = %q, want %q", p, got, want)
		}
	}
}
