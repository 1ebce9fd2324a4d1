package desired

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
)

// NodeMAC is the tunnel MAC of a node: derived from its name so every node computes it without asking.
func NodeMAC(node string) net.HardwareAddr {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	m := make(net.HardwareAddr, 6)
	m[0], m[1] = 0x02, 0x79
	binary.BigEndian.PutUint32(m[2:], h.Sum32())
	return m
}

// SlotAddr is a node's address inside WireGuard for a slot, taken from its tunnel prefix (TunnelPrefix): the
// first address (the tunnel address) for slot 0, the last address but one for slot 1. Two slots have two
// addresses so a peer can accept the old and the new key at once during a rotation (WireGuard allows an
// address on one peer of a device only).
//
// Slot 1 must be an address nothing else on the node holds. The pod bridge holds the second address (it is
// host-local's default gateway) and the kernel classifies the last one as the bridge subnet's broadcast
// (a route with it as source is refused, and TCP and UDP to it fail); every other address is one
// host-local may give a pod, except this one: the daemon's CNI config (daemon.WriteCNIConfig) ends
// host-local's range before it. Every node
// computes it from the peer's pod CIDRs, which the PeerSlices carry. An IPv4 prefix longer than /30 has no
// such address (a /30 has one and no room for pods): slot 1 is then an error, never slot 0's address.
func SlotAddr(tunnel netip.Prefix, slot int) (netip.Addr, error) {
	if !tunnel.IsValid() {
		return netip.Addr{}, fmt.Errorf("no tunnel prefix for WireGuard slot %d", slot)
	}
	tunnel = tunnel.Masked()
	if slot == 0 {
		return tunnel.Addr(), nil
	}
	if !tunnel.Addr().Is4() || tunnel.Bits() > 30 {
		return netip.Addr{}, fmt.Errorf("pod CIDR %s has no address for WireGuard slot 1: it needs an IPv4 prefix of /30 or shorter", tunnel)
	}
	return lastAddr(tunnel).Prev(), nil
}

// lastAddr is the last address of an IPv4 prefix (its broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(a[:])|(1<<(32-p.Bits())-1))
	return netip.AddrFrom4(a)
}

// SlotPort is the WireGuard listen port of a slot: the published port for slot 0, the next port for slot 1.
func SlotPort(base, slot int) int { return base + slot }

// MemberID is a node's rendezvous identity in the eBPF program.
func MemberID(node string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	return h.Sum32()
}

// TunnelPrefix is the pod CIDR a node's tunnel and WireGuard slot addresses come from: its first IPv4 pod
// CIDR, masked.
func TunnelPrefix(podCIDRs []string) (netip.Prefix, bool) {
	for _, c := range podCIDRs {
		p, err := netip.ParsePrefix(c)
		if err == nil && p.Addr().Is4() {
			return p.Masked(), true
		}
	}
	return netip.Prefix{}, false
}

// TunnelAddr is a node's tunnel address: the first address of its tunnel prefix (TunnelPrefix).
func TunnelAddr(podCIDRs []string) (netip.Addr, bool) {
	p, ok := TunnelPrefix(podCIDRs)
	return p.Addr(), ok
}
