package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

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

// RemoveVXLAN deletes the device name when it exists (its FDB and neighbour entries and the routes through it
// go with it); an absent device is fine.
func (a *Applier) RemoveVXLAN(name string) error {
	l, err := netlink.LinkByName(name)
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to find %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("failed to remove VXLAN device %s: %w", name, err)
	}
	a.Writes.Links++
	return nil
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
