package desired

import (
	"encoding/binary"
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
