package kernel

import (
	"fmt"
	"os"
	"sort"

	"github.com/vishvananda/netlink"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// KernelTunnelTypes probes which tunnel link types the kernel can create, by adding and removing a scratch
// link of each type (modules load on demand, so reading /proc/modules would miss them). The names carry the
// process id so daemons probing in the same namespace at once do not collide.
func KernelTunnelTypes() []netv1.Protocol {
	name := func(kind string) string { return fmt.Sprintf("yp%s%d", kind, os.Getpid()%1000000) }
	attrs := func(n string) netlink.LinkAttrs {
		la := netlink.NewLinkAttrs()
		la.Name = n
		return la
	}
	probes := map[netv1.Protocol]netlink.Link{
		netv1.ProtocolVXLAN:     &netlink.Vxlan{LinkAttrs: attrs(name("vx")), VxlanId: 1, Port: 0},
		netv1.ProtocolGENEVE:    &netlink.Geneve{LinkAttrs: attrs(name("gn")), ID: 1, Remote: []byte{127, 0, 0, 2}},
		netv1.ProtocolIPIP:      &netlink.Iptun{LinkAttrs: attrs(name("ip")), Remote: []byte{127, 0, 0, 2}},
		netv1.ProtocolWireGuard: &netlink.Wireguard{LinkAttrs: attrs(name("wg"))},
	}
	var out []netv1.Protocol
	for p, l := range probes {
		if err := netlink.LinkAdd(l); err != nil {
			continue
		}
		out = append(out, p)
		if got, err := netlink.LinkByName(l.Attrs().Name); err == nil {
			_ = netlink.LinkDel(got)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
