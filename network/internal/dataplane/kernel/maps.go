package kernel

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/yonder-dev/yonder/network/internal/dataplane/bpf"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// BPFDesired is the eBPF map content for d: each route is a group of its members.
func BPFDesired(d desired.State, links map[desired.Via]netlink.Link) bpf.Desired {
	out := bpf.Desired{Prefixes: map[netip.Prefix]uint32{}, Groups: map[uint32][]bpf.Backend{}}
	ids := map[string]uint32{}
	for _, r := range d.Routes {
		if slices.ContainsFunc(r.Members, func(m string) bool { return d.Hops[m].Via == desired.ViaNative }) {
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
				bs = append(bs, bpf.Backend{ID: desired.MemberID(h.Node), Ifindex: l.Attrs().Index, MTU: r.MTU, DstMAC: h.MAC, SrcMAC: d.MAC, L3: r.L3})
			}
			out.Groups[gid] = bs
		}
		out.Prefixes[r.Prefix] = gid
	}
	return out
}
