// Package engine turns a node's view of the route plan into the kernel state of its dataplane and applies it
// with diffs: VXLAN devices with static FDB and neighbour entries, WireGuard peers, routes, and the eBPF maps.
//
// Every tunnel is a VXLAN device: "vx" runs over the underlay, "vw" runs over the WireGuard device. WireGuard
// therefore only carries traffic between the nodes' tunnel addresses (a peer's allowed IPs are its /32), so
// any gateway may forward any pod's traffic (WireGuard's source check never drops flows spread over several
// gateways) and the eBPF program picks a next hop the same way on every path: a MAC on a VXLAN device.
package engine

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"sort"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/gateway"
)

// Defaults where neither the plan nor the peer says otherwise.
const (
	DefaultWireGuardPort = 51820
	DefaultVXLANPort     = 4789
	// VXLANOverWireGuardPort is the UDP port of the VXLAN device running inside WireGuard; it only accepts
	// packets arriving through the WireGuard device.
	VXLANOverWireGuardPort = 4790
	DefaultProbePort       = 51822
	// VXLANOverhead is the encapsulation carried inside WireGuard (IPv4 20 + UDP 8 + VXLAN 8 + Ethernet 14).
	// The plan's WireGuard overhead includes it, so a link's tunnelMTU is the inner (pod) MTU and the
	// WireGuard device needs tunnelMTU + VXLANOverhead.
	VXLANOverhead = 50
	// WireGuardOverhead is the plan's worst-case WireGuard overhead without the VXLAN inside (IPv6 40 + UDP 8
	// + WireGuard 32): the WireGuard device's MTU is the underlay's minus this.
	WireGuardOverhead = 80
)

// Via says which device a next hop is reached on.
type Via string

const (
	// ViaVXLAN is the VXLAN device over the underlay.
	ViaVXLAN Via = "vxlan"
	// ViaWireGuard is the VXLAN device inside WireGuard.
	ViaWireGuard Via = "wireguard"
	// ViaNative routes to the peer's underlay address without a tunnel (protocol None: the underlay routes
	// pod CIDRs). The eBPF program leaves these prefixes to the kernel.
	ViaNative Via = "native"
)

// Input is what a node knows: itself, its Site's RoutePlan, and the PeerSlices it watches.
type Input struct {
	Node     string                `json:"node"`
	Site     string                `json:"site"`
	PodCIDRs []string              `json:"podCIDRs"`
	Plan     netv1.RoutePlanSpec   `json:"plan"`
	Slices   []netv1.PeerSliceSpec `json:"slices"`
}

// NextHop is one peer reached over one device.
type NextHop struct {
	Node string
	Via  Via
	// Underlay is the address VXLAN (or WireGuard) packets are sent to.
	Underlay netip.Addr
	// Tunnel is the peer's tunnel address (first address of its first IPv4 pod CIDR): the VXLAN next hop and,
	// for WireGuard, its allowed IP.
	Tunnel    netip.Addr
	MAC       net.HardwareAddr
	PublicKey string
	// WGAddr is the peer's address inside WireGuard: its tunnel address in slot 0, the next one in slot 1
	// (see netv1.NodeNetworkSpec.WireGuardSlot). The allowed IP of PublicKey and the VXLAN-in-WireGuard
	// destination.
	WGAddr netip.Addr
	// WGPort is the listen port of the peer's current slot.
	WGPort int
	// NextPublicKey, NextWGAddr and NextWGPort describe the peer's other slot while it rotates its key.
	NextPublicKey string
	NextWGAddr    netip.Addr
	NextWGPort    int
	// L3Prefixes are added to the allowed IPs of the peer's current key: the prefixes of its Site, whose
	// only active gateway it is on an L3 WireGuard link (see Features.WireGuardL3).
	L3Prefixes []netip.Prefix `json:",omitempty"`
	ProbePort  int
	MTU        int
}

// Key identifies a next hop.
func (n NextHop) Key() string { return n.Node + "/" + string(n.Via) }

// Route sends a prefix to a group of next hops (more than one only for gateways).
type Route struct {
	Prefix  netip.Prefix
	Members []string // NextHop keys, sorted
	MTU     int
	// L3 sends the prefix into the WireGuard device itself (no VXLAN inside): its single member is the
	// remote Site's only gateway and that gateway accepts this Site's pod addresses from this node.
	L3 bool `json:",omitempty"`
}

// Features are node-local switches of Compute.
type Features struct {
	// WireGuardL3 carries pod traffic directly over WireGuard (no VXLAN inside) on Gateway links where
	// both Sites have exactly one active gateway: the remote gateway can then hold this Site's prefixes on
	// this node's peer (WireGuard allows a prefix on one peer only, which is why VXLAN inside is the
	// default). Every gateway of both Sites must agree (one DaemonSet flag).
	WireGuardL3 bool
	// Rotating is true while this node rotates its key or drains the old slot: it then sends VXLAN inside
	// WireGuard (the peers' allowed prefixes stay on the old key until the switch is applied everywhere).
	Rotating bool
}

// Desired is the node's computed dataplane.
type Desired struct {
	Self     string
	Tunnel   netip.Addr
	MAC      net.HardwareAddr
	VXLANMTU int
	WGMTU    int // MTU of the VXLAN device inside WireGuard
	Hops     map[string]NextHop
	Routes   []Route
	Probe    netv1.HealthProbeSpec
}

// NodeMAC is the tunnel MAC of a node: derived from its name so every node computes it without asking.
func NodeMAC(node string) net.HardwareAddr {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	m := make(net.HardwareAddr, 6)
	m[0], m[1] = 0x02, 0x79
	binary.BigEndian.PutUint32(m[2:], h.Sum32())
	return m
}

// SlotAddr is a node's address inside WireGuard for a slot: its tunnel address for slot 0, the next address
// for slot 1. Two slots have two addresses so a peer can accept the old and the new key at once during a
// rotation (WireGuard allows an address on one peer of a device only).
func SlotAddr(tunnel netip.Addr, slot int) netip.Addr {
	if slot == 1 {
		return tunnel.Next()
	}
	return tunnel
}

// SlotPort is the WireGuard listen port of a slot: the published port for slot 0, the next port for slot 1.
func SlotPort(base, slot int) int { return base + slot }

// MemberID is a node's rendezvous identity in the eBPF program.
func MemberID(node string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	return h.Sum32()
}

// TunnelAddr is a node's tunnel address: the first address of its first IPv4 pod CIDR.
func TunnelAddr(podCIDRs []string) (netip.Addr, bool) {
	for _, c := range podCIDRs {
		p, err := netip.ParsePrefix(c)
		if err == nil && p.Addr().Is4() {
			return p.Masked().Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Compute derives the desired dataplane from the input. down lists next-hop keys the probes found dead: they
// are left out of multi-member groups (a single-member route keeps its member: there is nowhere else to go).
func Compute(in Input, down map[string]bool) (Desired, error) {
	return ComputeWith(in, down, Features{})
}

// ComputeWith is Compute with node-local features.
func ComputeWith(in Input, down map[string]bool, f Features) (Desired, error) {
	self, ok := TunnelAddr(in.PodCIDRs)
	if !ok {
		return Desired{}, fmt.Errorf("failed to compute dataplane for node %s: no IPv4 pod CIDR", in.Node)
	}
	d := Desired{
		Self: in.Node, Tunnel: self, MAC: NodeMAC(in.Node), Hops: map[string]NextHop{},
		VXLANMTU: int(in.Plan.IntraSite.TunnelMTU), Probe: in.Plan.HealthProbe,
	}
	if d.VXLANMTU == 0 {
		d.VXLANMTU = 1430
	}
	peers := map[string]map[string]netv1.Peer{} // site → node → peer
	var me *netv1.Peer
	for _, s := range in.Slices {
		if peers[s.Site] == nil {
			peers[s.Site] = map[string]netv1.Peer{}
		}
		for _, p := range s.Peers {
			peers[s.Site][p.Node] = p
			if s.Site == in.Site && p.Node == in.Node {
				pp := p
				me = &pp
			}
		}
	}
	routes := map[netip.Prefix]*Route{}
	addRoute := func(prefix string, members []string, mtu int) {
		p, err := netip.ParsePrefix(prefix)
		if err != nil || !p.Addr().Is4() {
			return
		}
		if len(members) == 0 {
			routes[p] = &Route{Prefix: p, MTU: mtu}
			return
		}
		r, ok := routes[p]
		if !ok {
			r = &Route{Prefix: p, MTU: mtu}
			routes[p] = r
		}
		for _, m := range members {
			if !slices.Contains(r.Members, m) {
				r.Members = append(r.Members, m)
			}
		}
	}
	hop := func(p netv1.Peer, proto netv1.Protocol, etype netv1.EndpointType, mtu int) (string, bool) {
		if p.Node == in.Node {
			return "", false
		}
		t, ok := TunnelAddr(p.PodCIDRs)
		if !ok {
			return "", false
		}
		ep, ok := pickEndpoint(p.Endpoints, etype)
		if !ok {
			return "", false
		}
		n := NextHop{Node: p.Node, Underlay: ep, Tunnel: t, MAC: NodeMAC(p.Node), PublicKey: p.PublicKey,
			WGPort: int(p.Ports.WireGuard), ProbePort: int(p.Ports.Probe)}
		if n.WGPort == 0 {
			n.WGPort = DefaultWireGuardPort
		}
		slot := int(p.WireGuardSlot) & 1
		base := n.WGPort
		n.WGAddr, n.WGPort = SlotAddr(t, slot), SlotPort(base, slot)
		if p.NextPublicKey != "" {
			n.NextPublicKey, n.NextWGAddr, n.NextWGPort = p.NextPublicKey, SlotAddr(t, 1-slot), SlotPort(base, 1-slot)
		}
		if n.ProbePort == 0 {
			n.ProbePort = int(in.Plan.HealthProbe.Port)
		}
		if n.ProbePort == 0 {
			n.ProbePort = DefaultProbePort
		}
		switch proto {
		case netv1.ProtocolWireGuard:
			if p.PublicKey == "" {
				return "", false
			}
			n.Via, n.MTU = ViaWireGuard, mtu
			if d.WGMTU == 0 || n.MTU < d.WGMTU {
				d.WGMTU = n.MTU
			}
		case netv1.ProtocolNone:
			n.Via, n.MTU = ViaNative, mtu
		default: // VXLAN; GENEVE and IPIP fall back to VXLAN (what both ends compute)
			n.Via, n.MTU = ViaVXLAN, mtu
		}
		d.Hops[n.Key()] = n
		return n.Key(), true
	}
	// Intra-site: every other node of the Site, its pod CIDRs.
	intraMTU := d.VXLANMTU
	for _, p := range sortedPeers(peers[in.Site]) {
		if k, ok := hop(p, in.Plan.IntraSite.Protocol, netv1.EndpointInternal, intraMTU); ok {
			for _, c := range p.PodCIDRs {
				addRoute(c, []string{k}, d.Hops[k].MTU)
			}
		}
	}
	amActive := me != nil && me.Gateway != nil && me.Gateway.Active
	for _, l := range in.Plan.Links {
		mtu := int(l.TunnelMTU)
		remote := sortedPeers(peers[l.Site])
		switch {
		case l.Mode == netv1.LinkModeDirect || (l.RemoteSelfGateway && (l.SelfGateway || amActive)):
			for _, p := range remote {
				if k, ok := hop(p, l.Protocol, l.EndpointType, mtu); ok {
					for _, c := range p.PodCIDRs {
						addRoute(c, []string{k}, d.Hops[k].MTU)
					}
				}
			}
			continue
		case l.SelfGateway || amActive:
			var members []string
			minMTU := mtu
			for _, p := range remote {
				if p.Gateway == nil || !slices.Contains(l.RemoteGateways, p.Node) {
					continue
				}
				if k, ok := hop(p, l.Protocol, l.EndpointType, mtu); ok {
					members = append(members, k)
					minMTU = min(minMTU, d.Hops[k].MTU)
				}
			}
			if !l.Up {
				members = nil
			}
			// L3 where both Sites have exactly one active gateway on this link: this node and members[0].
			// The accept side (the peer's allowed prefixes) holds whenever the link qualifies; sending L3
			// pauses while either end rotates its key.
			l3 := f.WireGuardL3 && l.Protocol == netv1.ProtocolWireGuard && l.Up && amActive && !l.SelfGateway &&
				!l.RemoteSelfGateway && len(l.LocalGateways) == 1 && l.LocalGateways[0] == in.Node && len(members) == 1
			send := false
			if l3 {
				h := d.Hops[members[0]]
				for _, pf := range l.Prefixes {
					if p, err := netip.ParsePrefix(pf); err == nil && p.Addr().Is4() && !slices.Contains(h.L3Prefixes, p.Masked()) {
						h.L3Prefixes = append(h.L3Prefixes, p.Masked())
					}
				}
				d.Hops[members[0]] = h
				send = !f.Rotating && h.NextPublicKey == "" && me.NextPublicKey == ""
			}
			for _, pf := range l.Prefixes {
				addRoute(pf, members, minMTU)
				if p, err := netip.ParsePrefix(pf); err == nil && routes[p] != nil {
					routes[p].L3 = send
				}
			}
		default:
			var members []string
			minMTU := mtu
			for _, p := range sortedPeers(peers[in.Site]) {
				if !slices.Contains(l.LocalGateways, p.Node) {
					continue
				}
				if k, ok := hop(p, in.Plan.IntraSite.Protocol, netv1.EndpointInternal, intraMTU); ok {
					members = append(members, k)
					minMTU = min(minMTU, d.Hops[k].MTU)
				}
			}
			if !l.Up {
				members = nil
			}
			for _, pf := range l.Prefixes {
				// The path MTU includes the gateways' link (its tunnelMTU already counts VXLAN inside
				// WireGuard).
				addRoute(pf, members, min(minMTU, mtu))
			}
		}
	}
	// Our own pod CIDRs are local, whatever a link lists.
	for _, c := range in.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			delete(routes, p.Masked())
		}
	}
	for _, r := range routes {
		sort.Strings(r.Members)
		if len(r.Members) > 1 {
			alive := slices.DeleteFunc(slices.Clone(r.Members), func(m string) bool { return down[m] })
			r.Members = alive
		}
		d.Routes = append(d.Routes, *r)
	}
	sort.Slice(d.Routes, func(i, j int) bool { return d.Routes[i].Prefix.String() < d.Routes[j].Prefix.String() })
	if d.WGMTU == 0 {
		d.WGMTU = 1500 - WireGuardOverhead - VXLANOverhead
	}
	return d, nil
}

// Primary is the member the kernel's fallback route uses for a prefix: the same rendezvous choice for the
// prefix that the controller's gateway.Pick makes, so every node agrees.
func (r Route) Primary() string {
	return gateway.Pick([]byte(r.Prefix.String()), r.Members)
}

func pickEndpoint(eps []netv1.Endpoint, t netv1.EndpointType) (netip.Addr, bool) {
	var fallback netip.Addr
	for _, e := range eps {
		a, err := netip.ParseAddr(e.Address)
		if err != nil || !a.Is4() {
			continue
		}
		if e.Type == t || t == "" {
			return a, true
		}
		if !fallback.IsValid() {
			fallback = a
		}
	}
	return fallback, fallback.IsValid()
}

func sortedPeers(m map[string]netv1.Peer) []netv1.Peer {
	out := make([]netv1.Peer, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
