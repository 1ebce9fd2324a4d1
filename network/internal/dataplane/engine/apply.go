package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/yonder-dev/yonder/network/internal/dataplane/bpf"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// viaWireGuardL3 keys the WireGuard device itself in the Applier's device map (L3 routes).
const viaWireGuardL3 Via = "wireguard-l3"

// RouteProtocol marks the routes this daemon owns (so stale ones can be found after a restart).
const RouteProtocol = netlink.RouteProtocol(0x79)

// Devices names the node's devices.
type Devices struct {
	VXLAN     string // VXLAN over the underlay
	VXLANWG   string // VXLAN inside WireGuard
	WireGuard string
	PodBridge string
}

// Writes counts kernel writes, by kind (the restart test expects none for unchanged state).
type Writes struct {
	Links, FDB, Neigh, Routes, Peers, Maps int
	// WireGuardDevice counts the address and routes of the WireGuard device (an embedded device is new after a
	// restart, and the kernel removed its routes with the old one).
	WireGuardDevice int
}

// Total is the number of writes.
func (w Writes) Total() int {
	return w.Links + w.FDB + w.Neigh + w.Routes + w.Peers + w.Maps + w.WireGuardDevice
}

// Applier programs the kernel; it runs inside the node's network namespace.
type Applier struct {
	Dev Devices
	BPF *bpf.Datapath
	Log *slog.Logger
	// Writes accumulates over the Applier's life.
	Writes Writes
}

// Setup sets the sysctls forwarding needs and the MSS clamping rules (idempotent).
func Setup(dev Devices) error {
	for k, v := range map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0",
	} {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil { //nolint:gosec // sysctl files
			return fmt.Errorf("failed to set sysctl %s: %w", k, err)
		}
	}
	return nil
}

// Clamp installs MSS clamping of forwarded TCP SYNs to the path MTU of their route (the routes carry the
// tunnel path's MTU; the eBPF program leaves SYNs to the kernel, so every SYN passes here at each node it
// crosses, in both directions), and restricts the inner VXLAN port to packets arriving through the node's
// WireGuard devices (both slots: a key rotation runs two at once).
func Clamp(wireGuardDevices ...string) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("failed to find iptables for MSS clamping: %w", err)
	}
	port := strconv.Itoa(VXLANOverWireGuardPort)
	// The single-device rule of earlier versions would drop the second slot's traffic.
	if len(wireGuardDevices) > 0 {
		legacy := []string{"-w", "-t", "filter", "-D", "INPUT", "-p", "udp", "--dport", port, "!", "-i", wireGuardDevices[0], "-j", "DROP"}
		for range 8 { // every copy (bounded: a broken iptables must not spin)
			if exec.Command("iptables", legacy...).Run() != nil {
				break
			}
		}
	}
	type rule struct {
		insert bool // accept rules go first, before the drop
		spec   []string
	}
	var rules []rule
	for _, d := range wireGuardDevices {
		rules = append(rules, rule{true, []string{"-t", "filter", "INPUT", "-p", "udp", "--dport", port, "-i", d, "-j", "ACCEPT"}})
	}
	rules = append(rules,
		rule{false, []string{"-t", "filter", "INPUT", "-p", "udp", "--dport", port, "-j", "DROP"}},
		rule{false, []string{"-t", "mangle", "FORWARD", "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"}})
	for _, r := range rules {
		check := append([]string{"-w", r.spec[0], r.spec[1], "-C"}, r.spec[2:]...)
		if exec.Command("iptables", check...).Run() == nil {
			continue
		}
		op := "-A"
		if r.insert {
			op = "-I"
		}
		add := append([]string{"-w", r.spec[0], r.spec[1], op}, r.spec[2:]...)
		if out, err := exec.Command("iptables", add...).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to add iptables rule %v: %w: %s", r.spec, err, out)
		}
	}
	return nil
}

// OwnWireGuard is the node's side of WireGuard for one Apply. Send carries traffic to the peers: their
// addresses are routed to it, with its slot's address as source. Other, while a key rotation brings up the
// next slot or the previous slot drains, has the same peers and its own slot's address but no routes, so
// what peers still send to it arrives.
type OwnWireGuard struct {
	Send      *wgdev.Device
	SendSlot  int
	Other     *wgdev.Device
	OtherSlot int
}

// EnsureVXLAN creates or adopts a VXLAN device (no learning; static FDB), leaving an identical one untouched.
func (a *Applier) EnsureVXLAN(name string, vni, port, mtu int, mac net.HardwareAddr) (netlink.Link, error) {
	if l, err := netlink.LinkByName(name); err == nil {
		v, ok := l.(*netlink.Vxlan)
		if ok && v.VxlanId == vni && v.Port == port && !v.Learning && v.HardwareAddr.String() == mac.String() {
			if v.MTU != mtu {
				if err := netlink.LinkSetMTU(l, mtu); err != nil {
					return nil, fmt.Errorf("failed to set MTU of %s: %w", name, err)
				}
				a.Writes.Links++
			}
			if v.OperState != netlink.OperUp && v.Flags&net.FlagUp == 0 {
				if err := netlink.LinkSetUp(l); err != nil {
					return nil, fmt.Errorf("failed to set %s up: %w", name, err)
				}
			}
			return l, nil
		}
		if err := netlink.LinkDel(l); err != nil {
			return nil, fmt.Errorf("failed to replace %s: %w", name, err)
		}
	}
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU, la.HardwareAddr = name, mtu, mac
	if err := netlink.LinkAdd(&netlink.Vxlan{LinkAttrs: la, VxlanId: vni, Port: port, Learning: false}); err != nil {
		return nil, fmt.Errorf("failed to create VXLAN device %s: %w", name, err)
	}
	a.Writes.Links++
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("failed to find %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("failed to set %s up: %w", name, err)
	}
	return l, nil
}

// EnsureAddr gives link the /32 address when it lacks it.
func (a *Applier) EnsureAddr(l netlink.Link, addr netip.Addr) error {
	added, err := ensureAddr(l, addr)
	if added {
		a.Writes.WireGuardDevice++
	}
	return err
}

func ensureAddr(l netlink.Link, addr netip.Addr) (bool, error) {
	as, err := netlink.AddrList(l, unix.AF_INET)
	if err != nil {
		return false, fmt.Errorf("failed to list addresses of %s: %w", l.Attrs().Name, err)
	}
	for _, x := range as {
		if x.IP.Equal(addr.AsSlice()) {
			return false, nil
		}
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		return false, fmt.Errorf("failed to add %s to %s: %w", addr, l.Attrs().Name, err)
	}
	return true, nil
}

// Apply makes the kernel match d.
func (a *Applier) Apply(d Desired, own OwnWireGuard) error {
	vx, err := a.EnsureVXLAN(a.Dev.VXLAN, 1, DefaultVXLANPort, d.VXLANMTU, d.MAC)
	if err != nil {
		return err
	}
	vw, err := a.EnsureVXLAN(a.Dev.VXLANWG, 2, VXLANOverWireGuardPort, d.WGMTU, d.MAC)
	if err != nil {
		return err
	}
	wgl, err := netlink.LinkByName(own.Send.Name)
	if err != nil {
		return fmt.Errorf("failed to find %s: %w", own.Send.Name, err)
	}
	src := SlotAddr(d.Tunnel, own.SendSlot)
	if err := a.EnsureAddr(wgl, src); err != nil {
		return err
	}
	if own.Other != nil {
		ol, err := netlink.LinkByName(own.Other.Name)
		if err != nil {
			return fmt.Errorf("failed to find %s: %w", own.Other.Name, err)
		}
		if err := a.EnsureAddr(ol, SlotAddr(d.Tunnel, own.OtherSlot)); err != nil {
			return err
		}
	}
	links := map[Via]netlink.Link{ViaVXLAN: vx, ViaWireGuard: vw, viaWireGuardL3: wgl}

	// WireGuard peers: allowed IPs are the peer's address of the slot the key belongs to (/32); a peer
	// rotating its key has both.
	var peers []wgdev.Peer
	addPeer := func(h NextHop, key string, addr netip.Addr, port int, l3 []netip.Prefix) {
		pk, err := wgtypes.ParseKey(key)
		if err != nil {
			a.Log.Error("Ignoring peer with an invalid public key", "node", h.Node)
			return
		}
		allowed := []net.IPNet{{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
		for _, p := range l3 {
			allowed = append(allowed, *prefixNet(p))
		}
		peers = append(peers, wgdev.Peer{PublicKey: pk, Endpoint: &net.UDPAddr{IP: h.Underlay.AsSlice(), Port: port},
			AllowedIPs: allowed, Keepalive: 25 * time.Second})
	}
	for _, h := range d.Hops {
		if h.Via != ViaWireGuard {
			continue
		}
		addPeer(h, h.PublicKey, h.WGAddr, h.WGPort, h.L3Prefixes)
		if h.NextPublicKey != "" {
			addPeer(h, h.NextPublicKey, h.NextWGAddr, h.NextWGPort, nil)
		}
	}
	// New and changed peers first; peers that left are removed last, after the FDB and routes stopped
	// pointing at them (a peer that switched its key slot keeps receiving until then).
	devs := []*wgdev.Device{own.Send}
	if own.Other != nil {
		devs = append(devs, own.Other)
	}
	for _, dev := range devs {
		ch, err := dev.UpsertPeers(peers)
		if err != nil {
			return err
		}
		a.Writes.Peers += len(ch.Added) + len(ch.Updated)
	}

	// FDB (tunnel MAC → outer destination) and neighbour (tunnel address → tunnel MAC) entries.
	for via, l := range links {
		want := map[string]NextHop{}
		for _, h := range d.Hops {
			if h.Via == via {
				want[h.MAC.String()] = h
			}
		}
		if err := a.syncFDB(l, want, via); err != nil {
			return err
		}
		if err := a.syncNeigh(l, want); err != nil {
			return err
		}
	}
	// Routes: WireGuard tunnel /32s, then prefixes via their primary member.
	want := map[string]*netlink.Route{}
	for _, h := range d.Hops {
		if h.Via != ViaWireGuard {
			continue
		}
		// A rotating peer's next address is routed too, so when it switches, the FDB entry can move to it
		// in one write (without the route, that address would fall into its pod CIDR's route).
		for _, addr := range []netip.Addr{h.WGAddr, h.NextWGAddr} {
			if !addr.IsValid() {
				continue
			}
			r := &netlink.Route{LinkIndex: wgl.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(addr, 32)), Src: src.AsSlice(),
				Protocol: RouteProtocol, Scope: netlink.SCOPE_LINK}
			want[r.Dst.String()] = r
		}
	}
	for _, r := range d.Routes {
		nr := &netlink.Route{Dst: prefixNet(r.Prefix), Protocol: RouteProtocol}
		if len(r.Members) == 0 {
			nr.Type = unix.RTN_BLACKHOLE
		} else if r.L3 {
			nr.LinkIndex, nr.Scope = wgl.Attrs().Index, netlink.SCOPE_LINK
			nr.MTU = r.MTU
			nr.AdvMSS = r.MTU - 40
		} else if h := d.Hops[r.Primary()]; h.Via == ViaNative {
			nr.Gw = h.Underlay.AsSlice()
			nr.MTU = r.MTU
			nr.AdvMSS = r.MTU - 40
		} else {
			nr.LinkIndex = links[h.Via].Attrs().Index
			nr.Gw = h.Tunnel.AsSlice()
			nr.Flags = int(netlink.FLAG_ONLINK)
			nr.MTU = r.MTU
			nr.AdvMSS = r.MTU - 40
		}
		want[nr.Dst.String()] = nr
	}
	if err := a.syncRoutes(want, wgl.Attrs().Index); err != nil {
		return err
	}
	for _, dev := range devs {
		ch, err := dev.ReconcilePeers(peers)
		if err != nil {
			return err
		}
		a.Writes.Peers += len(ch.Removed)
	}
	if a.BPF != nil {
		st, err := a.BPF.Sync(BPFDesired(d, links))
		if err != nil {
			return err
		}
		a.Writes.Maps += st.Updated + st.Deleted
	}
	return nil
}

// BPFDesired is the eBPF map content for d: each route is a group of its members.
func BPFDesired(d Desired, links map[Via]netlink.Link) bpf.Desired {
	out := bpf.Desired{Prefixes: map[netip.Prefix]uint32{}, Groups: map[uint32][]bpf.Backend{}}
	ids := map[string]uint32{}
	for _, r := range d.Routes {
		if slices.ContainsFunc(r.Members, func(m string) bool { return d.Hops[m].Via == ViaNative }) {
			continue // native routing: the kernel's routes
		}
		key := strings.Join(r.Members, ",")
		if r.L3 {
			key += "|l3"
		}
		gid, ok := ids[key]
		if !ok {
			gid = uint32(len(ids) + 1) //nolint:gosec // bounded by the number of routes
			ids[key] = gid
			var bs []bpf.Backend
			for _, m := range r.Members {
				h := d.Hops[m]
				l := links[h.Via]
				if r.L3 {
					l = links[viaWireGuardL3]
				}
				if len(bs) == bpf.MaxBackends {
					break
				}
				bs = append(bs, bpf.Backend{ID: MemberID(h.Node), Ifindex: l.Attrs().Index, MTU: r.MTU, DstMAC: h.MAC, SrcMAC: d.MAC, L3: r.L3})
			}
			out.Groups[gid] = bs
		}
		out.Prefixes[r.Prefix] = gid
	}
	return out
}

func (a *Applier) syncFDB(l netlink.Link, want map[string]NextHop, via Via) error {
	have, err := netlink.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("failed to list FDB of %s: %w", l.Attrs().Name, err)
	}
	seen, moved := map[string]bool{}, map[string]bool{}
	for _, n := range have {
		h, ok := want[n.HardwareAddr.String()]
		dst := h.Underlay
		if via == ViaWireGuard {
			dst = h.WGAddr
		}
		if ok && n.IP.Equal(dst.AsSlice()) && !seen[n.HardwareAddr.String()] {
			seen[n.HardwareAddr.String()] = true
			continue
		}
		if ok && !seen[n.HardwareAddr.String()] && !moved[n.HardwareAddr.String()] {
			// Still wanted with another destination (a peer's WireGuard slot switched): replaced in place
			// below; deleting first would drop the packets sent in between.
			moved[n.HardwareAddr.String()] = true
			continue
		}
		if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("failed to delete FDB entry %s on %s: %w", n.HardwareAddr, l.Attrs().Name, err)
		}
		a.Writes.FDB++
	}
	for m, h := range want {
		if seen[m] {
			continue
		}
		dst := h.Underlay
		if via == ViaWireGuard {
			dst = h.WGAddr
		}
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			State: netlink.NUD_PERMANENT, HardwareAddr: h.MAC, IP: dst.AsSlice()}
		if err := netlink.NeighSet(n); err != nil {
			return fmt.Errorf("failed to add FDB entry %s → %s on %s: %w", h.MAC, dst, l.Attrs().Name, err)
		}
		a.Writes.FDB++
	}
	return nil
}

func (a *Applier) syncNeigh(l netlink.Link, want map[string]NextHop) error {
	have, err := netlink.NeighList(l.Attrs().Index, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("failed to list neighbours of %s: %w", l.Attrs().Name, err)
	}
	byIP := map[netip.Addr]NextHop{}
	for _, h := range want {
		byIP[h.Tunnel] = h
	}
	seen := map[netip.Addr]bool{}
	for _, n := range have {
		ip, _ := netip.AddrFromSlice(n.IP)
		ip = ip.Unmap()
		h, ok := byIP[ip]
		if ok && n.HardwareAddr.String() == h.MAC.String() && n.State&netlink.NUD_PERMANENT != 0 {
			seen[ip] = true
			continue
		}
		if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("failed to delete neighbour %s on %s: %w", ip, l.Attrs().Name, err)
		}
		a.Writes.Neigh++
	}
	for ip, h := range byIP {
		if seen[ip] {
			continue
		}
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: h.MAC}
		if err := netlink.NeighSet(n); err != nil {
			return fmt.Errorf("failed to add neighbour %s on %s: %w", ip, l.Attrs().Name, err)
		}
		a.Writes.Neigh++
	}
	return nil
}

func (a *Applier) syncRoutes(want map[string]*netlink.Route, wgIndex int) error {
	have, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("failed to list routes: %w", err)
	}
	seen := map[string]bool{}
	for _, r := range have {
		w, ok := want[r.Dst.String()]
		if ok && sameRoute(r, *w) {
			seen[r.Dst.String()] = true
			continue
		}
		if !ok {
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("failed to delete route %s: %w", r.Dst, err)
			}
			a.Writes.Routes++
		}
	}
	for k, r := range want {
		if seen[k] {
			continue
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("failed to set route %s: %w", r.Dst, err)
		}
		if r.LinkIndex == wgIndex {
			a.Writes.WireGuardDevice++
		} else {
			a.Writes.Routes++
		}
	}
	return nil
}

func sameRoute(h, w netlink.Route) bool {
	if h.Type != w.Type && (h.Type != unix.RTN_UNICAST || w.Type != 0) {
		return false
	}
	if w.Type == unix.RTN_BLACKHOLE {
		return true
	}
	// A native route leaves the device to the kernel (w.LinkIndex 0).
	return (w.LinkIndex == 0 || h.LinkIndex == w.LinkIndex) && h.Gw.Equal(w.Gw) && h.MTU == w.MTU && h.AdvMSS == w.AdvMSS &&
		(w.Src == nil || h.Src.Equal(w.Src))
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
