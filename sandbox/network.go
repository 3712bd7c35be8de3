package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// The root namespace's side of a sandbox: the unreachable route for the
// whole range, the bridge with the host's address, and a policy rule that
// routes nothing that comes in from the bridge (nodes reach each other
// through the bridge and the host's own addresses, nothing else).

// ipLink is what `ip -j link show` says of a link.
type ipLink struct {
	Name      string   `json:"ifname"`
	Flags     []string `json:"flags"`
	OperState string   `json:"operstate"`
	Master    string   `json:"master"`
	LinkInfo  struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
}

func (l ipLink) up() bool {
	for _, f := range l.Flags {
		if f == "UP" {
			return true
		}
	}
	return false
}

// ipRoute is what `ip -j route show` says of a route.
type ipRoute struct {
	Type string `json:"type"`
	Dst  string `json:"dst"`
	Dev  string `json:"dev"`
}

// ipAddr is what `ip -j addr show` says of one interface.
type ipAddr struct {
	Name  string `json:"ifname"`
	Addrs []struct {
		Family string `json:"family"`
		Local  string `json:"local"`
		Prefix int    `json:"prefixlen"`
	} `json:"addr_info"`
}

func links(ctx context.Context) ([]ipLink, error) {
	out, err := run(ctx, "ip", "-d", "-j", "link", "show")
	if err != nil {
		return nil, err
	}
	var ls []ipLink
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		return nil, fmt.Errorf("parse ip link: %w", err)
	}
	return ls, nil
}

func linkByName(ctx context.Context, name string) (ipLink, bool, error) {
	ls, err := links(ctx)
	if err != nil {
		return ipLink{}, false, err
	}
	for _, l := range ls {
		if l.Name == name {
			return l, true, nil
		}
	}
	return ipLink{}, false, nil
}

func routes(ctx context.Context, args ...string) ([]ipRoute, error) {
	out, err := run(ctx, "ip", append([]string{"-j", "route", "show"}, args...)...)
	if err != nil {
		return nil, err
	}
	var rs []ipRoute
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		return nil, fmt.Errorf("parse ip route: %w", err)
	}
	return rs, nil
}

func addrs(ctx context.Context) ([]ipAddr, error) {
	out, err := run(ctx, "ip", "-j", "addr", "show")
	if err != nil {
		return nil, err
	}
	var as []ipAddr
	if err := json.Unmarshal([]byte(out), &as); err != nil {
		return nil, fmt.Errorf("parse ip addr: %w", err)
	}
	return as, nil
}

// rangeConflict says why 10.231.<subnet>.0/24 cannot be used by a new
// sandbox: a route or an address in it that is not one of ours. owned
// lists the bridges of the existing sandboxes, keyed by bridge name.
func rangeConflict(subnet int, rs []ipRoute, as []ipAddr, owned map[string]string) error {
	want := subnetPrefix(subnet)
	whole := netip.MustParsePrefix(rangePrefix)
	for _, r := range rs {
		dst := r.Dst
		if dst == "default" || dst == "" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		if p == whole && r.Type == "unreachable" {
			continue // ours, shared by all sandboxes
		}
		if !p.Overlaps(whole) {
			continue
		}
		if owner, ok := owned[r.Dev]; ok {
			if p.Overlaps(want) {
				return fmt.Errorf("%s is already used by sandbox %s (bridge %s): run `rigger sandbox down --name %s` or pick another subnet", want, owner, r.Dev, owner)
			}
			continue
		}
		if strings.HasPrefix(r.Dev, bridgePrefix) && p.Overlaps(want) {
			return fmt.Errorf("%s is already in use by bridge %s, left by a sandbox whose state is gone: run `rigger sandbox down --all`", want, r.Dev)
		}
		dev := r.Dev
		if dev == "" {
			dev = r.Type
		}
		return fmt.Errorf("address range %s is in use on this machine (route %s via %s): the sandbox needs it to itself; remove that route or run the sandbox on another machine", rangePrefix, r.Dst, dev)
	}
	for _, a := range as {
		for _, ai := range a.Addrs {
			ip, err := netip.ParseAddr(ai.Local)
			if err != nil || !whole.Contains(ip) {
				continue
			}
			if _, ok := owned[a.Name]; ok && !want.Contains(ip) {
				continue
			}
			if owner, ok := owned[a.Name]; ok {
				return fmt.Errorf("%s is already used by sandbox %s (bridge %s): run `rigger sandbox down --name %s` or pick another subnet", want, owner, a.Name, owner)
			}
			return fmt.Errorf("address %s on %s is in the sandbox range %s: the sandbox needs it to itself; remove that address or run the sandbox on another machine", ip, a.Name, rangePrefix)
		}
	}
	return nil
}

// ensureRange adds the unreachable route for the whole range, before any
// bridge exists, so that nothing for 10.231/16 ever leaves the machine.
func ensureRange(ctx context.Context) error {
	rs, err := routes(ctx, "table", "main", "type", "unreachable")
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Dst == rangePrefix {
			return nil
		}
	}
	if _, err := run(ctx, "ip", "route", "add", "unreachable", rangePrefix); err != nil {
		return fmt.Errorf("add unreachable route for the sandbox range: %w", err)
	}
	return nil
}

func removeRange(ctx context.Context) error {
	rs, err := routes(ctx, "table", "main", "type", "unreachable")
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Dst == rangePrefix {
			if _, err := run(ctx, "ip", "route", "del", "unreachable", rangePrefix); err != nil {
				return fmt.Errorf("remove unreachable route: %w", err)
			}
		}
	}
	return nil
}

// bridgeArgs are the ip(8) commands that make the bridge of a sandbox.
// Bridged traffic skips iptables (nf_call_iptables 0), so that a host
// firewall's FORWARD policy cannot cut nodes off from each other.
func bridgeArgs(bridge, addr string) [][]string {
	return [][]string{
		{"link", "add", bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0", "nf_call_arptables", "0"},
		{"addr", "replace", addr + "/24", "dev", bridge},
		{"link", "set", bridge, "up"},
	}
}

func (s *Sandbox) ensureBridge(ctx context.Context) error {
	_, ok, err := linkByName(ctx, s.Bridge)
	if err != nil {
		return err
	}
	for i, args := range bridgeArgs(s.Bridge, s.BridgeAddress) {
		if i == 0 && ok {
			continue
		}
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("make bridge %s: %w", s.Bridge, err)
		}
	}
	return s.ensureRule(ctx)
}

// ruleArgs is the policy rule that refuses to route what comes in from the
// bridge: a node's default route points at the host, and this keeps it from
// reaching anything but the host's own addresses (the local table is looked
// up first) and the other nodes on the bridge (bridged, never routed).
func ruleArgs(verb, bridge string) []string {
	return []string{"rule", verb, "iif", bridge, "unreachable"}
}

func (s *Sandbox) ensureRule(ctx context.Context) error {
	out, err := run(ctx, "ip", "rule", "show", "iif", s.Bridge)
	if err != nil {
		return err
	}
	if strings.Contains(out, "unreachable") {
		return nil
	}
	if _, err := run(ctx, "ip", ruleArgs("add", s.Bridge)...); err != nil {
		return fmt.Errorf("add policy rule for %s: %w", s.Bridge, err)
	}
	return nil
}

func removeBridge(ctx context.Context, bridge string) error {
	var errs []error
	for range 10 { // one rule per bridge; a few more if added twice
		out, err := run(ctx, "ip", "rule", "show", "iif", bridge)
		if err != nil || !strings.Contains(out, "unreachable") {
			break
		}
		if _, err := run(ctx, "ip", ruleArgs("del", bridge)...); err != nil {
			errs = append(errs, fmt.Errorf("remove policy rule for %s: %w", bridge, err))
			break
		}
	}
	if err := removeLink(ctx, bridge); err != nil {
		errs = append(errs, fmt.Errorf("remove bridge: %w", err))
	}
	return errors.Join(errs...)
}

// nodeNetArgs are the ip(8) commands that give node n its network: the
// namespace exists already; the veth's node end is created in it as eth0.
func nodeNetArgs(n Node, bridge, gateway string) [][]string {
	in := func(args ...string) []string { return append([]string{"-n", n.NetNS}, args...) }
	return [][]string{
		{"link", "add", n.Veth, "type", "veth", "peer", "name", "eth0", "netns", n.NetNS},
		{"link", "set", n.Veth, "master", bridge},
		{"link", "set", n.Veth, "up"},
		in("link", "set", "lo", "up"),
		in("addr", "replace", n.Address+"/24", "dev", "eth0"),
		in("link", "set", "eth0", "up"),
		in("route", "replace", "default", "via", gateway, "dev", "eth0"),
	}
}

func (s *Sandbox) ensureNodeNet(ctx context.Context, n Node) error {
	if _, err := os.Stat(n.netnsPath()); errors.Is(err, fs.ErrNotExist) {
		if _, err := run(ctx, "ip", "netns", "add", n.NetNS); err != nil {
			return fmt.Errorf("make network namespace: %w", err)
		}
	}
	_, haveVeth, err := linkByName(ctx, n.Veth)
	if err != nil {
		return err
	}
	for i, args := range nodeNetArgs(n, s.Bridge, s.BridgeAddress) {
		if i == 0 && haveVeth {
			continue
		}
		if i == 2 {
			continue // the link comes up at the end: a partitioned node stays so
		}
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("make network: %w", err)
		}
	}
	if !haveVeth {
		if _, err := run(ctx, "ip", "link", "set", n.Veth, "up"); err != nil {
			return fmt.Errorf("make network: %w", err)
		}
	}
	return nil
}

// removeNodeNet deletes the node's namespace and its link. Deleting the
// namespace removes the veth pair too, unless something still holds the
// namespace; the host end is removed explicitly then.
func removeNodeNet(ctx context.Context, n Node) error {
	var errs []error
	if _, err := os.Stat(n.netnsPath()); err == nil {
		if _, err := run(ctx, "ip", "netns", "delete", n.NetNS); err != nil {
			errs = append(errs, fmt.Errorf("remove network namespace: %w", err))
		}
	}
	// The kernel removes the pair a moment after the namespace; wait for
	// that, so that Down returns with the link gone, then delete it
	// explicitly if something still holds the namespace.
	_ = waitFor(ctx, 2*time.Second, 20*time.Millisecond, "link gone", func() error {
		if _, ok, err := linkByName(ctx, n.Veth); err != nil || ok {
			return fmt.Errorf("link %s still there", n.Veth)
		}
		return nil
	})
	if err := removeLink(ctx, n.Veth); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeLink deletes a link if it exists. The kernel removes a veth pair
// on its own, a moment after its namespace goes: a link that vanishes
// between the look and the delete is no error.
func removeLink(ctx context.Context, name string) error {
	_, ok, err := linkByName(ctx, name)
	if err != nil || !ok {
		return err
	}
	if _, err := run(ctx, "ip", "link", "del", name); err != nil {
		if _, still, lerr := linkByName(ctx, name); lerr == nil && !still {
			return nil
		}
		return fmt.Errorf("remove link: %w", err)
	}
	return nil
}

// Partition cuts node off the network: its link into the bridge goes down.
// Its processes keep running; nothing reaches it and it reaches nothing.
func (s *Sandbox) Partition(ctx context.Context, node string) error {
	n, err := s.nodeByName(node)
	if err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "link", "set", n.Veth, "down"); err != nil {
		return fmt.Errorf("partition %s: %w", node, err)
	}
	return nil
}

// healTimeout bounds the wait for a healed node's sshd to answer.
const healTimeout = 30 * time.Second

// Heal undoes Partition, and returns once the node's sshd answers again
// (the host forgets the node's link address while it is cut off, and
// looks for it again only when asked), within healTimeout.
func (s *Sandbox) Heal(ctx context.Context, node string) error {
	n, err := s.nodeByName(node)
	if err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "link", "set", n.Veth, "up"); err != nil {
		return fmt.Errorf("heal %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, healTimeout)
	defer cancel()
	var d net.Dialer
	for {
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort(n.Address, "22"))
		dcancel()
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("heal %s: its sshd does not answer %s after its link is up: %w", node, healTimeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
