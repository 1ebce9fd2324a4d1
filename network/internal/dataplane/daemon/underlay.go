package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// ResolveUnderlay names the node's underlay interface: name when one is given (it must exist), else the
// interface holding nodeIP — the kubelet's InternalIP, which the DaemonSet passes as NODE_IP from the
// downward API's status.hostIP — else the one the default route leaves through. Hosts name their NICs
// eth0, ens2, enp1s0f0, bond0…: a fixed default broke every node whose NIC is not eth0.
func ResolveUnderlay(name, nodeIP string) (string, error) {
	if name != "" {
		if _, err := netlink.LinkByName(name); err != nil {
			return "", fmt.Errorf("underlay device %s: %w", name, err)
		}
		return name, nil
	}
	if ip, err := netip.ParseAddr(nodeIP); err == nil {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return "", fmt.Errorf("failed to list the node's addresses: %w", err)
		}
		for _, a := range addrs {
			if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip.Unmap() {
				l, err := netlink.LinkByIndex(a.LinkIndex)
				if err != nil {
					return "", fmt.Errorf("failed to read the link holding %s: %w", ip, err)
				}
				return l.Attrs().Name, nil
			}
		}
	}
	routes, err := netlink.RouteGet(net.IPv4(192, 0, 2, 1)) // TEST-NET-1: only the routing decision is asked
	if err != nil || len(routes) == 0 {
		return "", errors.Join(fmt.Errorf("no underlay device: none was named (--underlay-device), no interface holds the node address %q (NODE_IP) and there is no default route", nodeIP), err)
	}
	l, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return "", fmt.Errorf("failed to read the default route's link: %w", err)
	}
	return l.Attrs().Name, nil
}
