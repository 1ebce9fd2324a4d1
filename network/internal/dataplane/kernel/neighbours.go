package kernel

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

func (a *Applier) syncFDB(l netlink.Link, want map[string]desired.NextHop, via desired.Via) error {
	have, err := netlink.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("failed to list FDB of %s: %w", l.Attrs().Name, err)
	}
	seen, moved := map[string]bool{}, map[string]bool{}
	for _, n := range have {
		h, ok := want[n.HardwareAddr.String()]
		dst := h.Underlay
		if via == desired.ViaWireGuard {
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
		if via == desired.ViaWireGuard {
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

func (a *Applier) syncNeigh(l netlink.Link, want map[string]desired.NextHop) error {
	have, err := netlink.NeighList(l.Attrs().Index, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("failed to list neighbours of %s: %w", l.Attrs().Name, err)
	}
	byIP := map[netip.Addr]desired.NextHop{}
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
		if ok {
			// Still wanted with another MAC or state: replaced in place below (NeighSet replaces). Deleting
			// it first would leave the packets sent in between to that next hop waiting on ARP, which
			// nothing answers inside a tunnel (an entry deleted under traffic: see applyRun.neighbours).
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
