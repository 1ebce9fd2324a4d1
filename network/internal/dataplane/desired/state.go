// Package desired computes a node's desired dataplane from its view of the route plan: the next hops (peers
// over VXLAN, WireGuard or native routing), the routes that send remote prefixes to groups of them, and
// whether each WireGuard peer is dialled or accepted (NAT). It is pure: package kernel applies the result.
//
// Every tunnel is a VXLAN device: "vx" runs over the underlay, "vw" runs over the WireGuard device. WireGuard
// therefore only carries traffic between the nodes' tunnel addresses (a peer's allowed IPs are its /32), so
// any gateway may forward any pod's traffic (WireGuard's source check never drops flows spread over several
// gateways) and the eBPF program picks a next hop the same way on every path: a MAC on a VXLAN device.
package desired

import (
	"net"
	"net/netip"

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
	// WGAddr is the peer's address inside WireGuard: its tunnel address in slot 0, the last address but one
	// of its tunnel prefix in slot 1 (SlotAddr; see netv1.NodeNetworkSpec.WireGuardSlot). The allowed IP of
	// PublicKey and the VXLAN-in-WireGuard destination.
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
	// Accept is true for a peer at another Site behind NAT (this node is not): it cannot be dialled, so its
	// WireGuard peer has no endpoint and WireGuard learns (and follows) the address its handshakes come
	// from.
	Accept bool `json:",omitempty"`
	// Initiate is true when this node is behind NAT and the peer is reachable: this node dials it, and
	// probes it every probe interval so the NAT keeps (or, after it forgot, re-creates) the mapping.
	Initiate  bool `json:",omitempty"`
	ProbePort int
	MTU       int
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

// Primary is the member the kernel's fallback route uses for a prefix: the same rendezvous choice for the
// prefix that the controller's gateway.Pick makes, so every node agrees.
func (r Route) Primary() string {
	return gateway.Pick([]byte(r.Prefix.String()), r.Members)
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

// State is the node's computed dataplane.
type State struct {
	Self   string
	Tunnel netip.Addr
	// TunnelPrefix is the pod CIDR Tunnel and the WireGuard slot addresses come from (SlotAddr).
	TunnelPrefix netip.Prefix
	MAC          net.HardwareAddr
	VXLANMTU     int
	WGMTU        int // MTU of the VXLAN device inside WireGuard
	Hops         map[string]NextHop
	Routes       []Route
	Probe        netv1.HealthProbeSpec
	// BehindNAT is this node's own reachability as the plan has it (its PeerSlice entry).
	BehindNAT bool
}
