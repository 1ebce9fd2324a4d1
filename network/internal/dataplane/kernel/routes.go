package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// wantedRoutes are the routes st needs, keyed by destination: WireGuard tunnel /32s of the peers (and of a
// rotating peer's next address, so its FDB entry can move there in one write), then every prefix via its
// primary member — a blackhole without members, the WireGuard device itself for L3, the peer's underlay
// address for native routing, else the member's tunnel address on its VXLAN device — with the path MTU.
func wantedRoutes(st desired.State, links map[desired.Via]netlink.Link, wg netlink.Link, src netip.Addr) map[string]*netlink.Route {
	want := map[string]*netlink.Route{}
	for _, h := range st.Hops {
		if h.Via != desired.ViaWireGuard {
			continue
		}
		for _, addr := range []netip.Addr{h.WGAddr, h.NextWGAddr} {
			if !addr.IsValid() {
				continue
			}
			r := &netlink.Route{LinkIndex: wg.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(addr, 32)), Src: src.AsSlice(),
				Protocol: RouteProtocol, Scope: netlink.SCOPE_LINK}
			want[r.Dst.String()] = r
		}
	}
	for _, r := range st.Routes {
		nr := &netlink.Route{Dst: prefixNet(r.Prefix), Protocol: RouteProtocol}
		switch h := st.Hops[r.Primary()]; {
		case len(r.Members) == 0:
			nr.Type = unix.RTN_BLACKHOLE
		case r.L3:
			nr.LinkIndex, nr.Scope = wg.Attrs().Index, netlink.SCOPE_LINK
		case h.Via == desired.ViaNative:
			nr.Gw = h.Underlay.AsSlice()
		default:
			nr.LinkIndex = links[h.Via].Attrs().Index
			nr.Gw = h.Tunnel.AsSlice()
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
		if len(r.Members) > 0 {
			nr.MTU, nr.AdvMSS = r.MTU, r.MTU-40
		}
		want[nr.Dst.String()] = nr
	}
	return want
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
