package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// networkData is the part of OpenStack's network_data.json (what Metal3's networkData Secret holds and
// CAPM3's Metal3DataTemplate renders) that a diskless ramdisk applies itself, as cloud-init would on a
// disk image: links by MAC, their static addresses and routes, and DNS servers.
type networkData struct {
	Links []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		MAC  string `json:"ethernet_mac_address"`
		MTU  int    `json:"mtu"`
	} `json:"links"`
	Networks []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Link      string `json:"link"`
		IPAddress string `json:"ip_address"`
		Netmask   string `json:"netmask"`
		Routes    []struct {
			Network string `json:"network"`
			Netmask string `json:"netmask"`
			Gateway string `json:"gateway"`
		} `json:"routes"`
	} `json:"networks"`
	Services []struct {
		Type    string `json:"type"`
		Address string `json:"address"`
	} `json:"services"`
}

// networkPlan is what applying network data does: `ip` commands (argv without "ip"), each with the line
// that reports it, and the DNS servers.
type networkPlan struct {
	Commands    [][]string
	Said        []string
	Nameservers []string
}

// planNetwork turns network data into commands for the interfaces named by MAC (lower-case MAC → name).
// DHCP and SLAAC networks are left as they are: the ramdisk's boot NIC holds its lease, and the kernel does
// SLAAC. Bonds, VLANs and other virtual links need tools the ramdisk lacks: refused, so that a host whose
// record asks for them fails its provisioning with this message instead of running without its network.
func planNetwork(raw []byte, ifaces map[string]string) (*networkPlan, error) {
	var nd networkData
	if err := json.Unmarshal(raw, &nd); err != nil {
		return nil, fmt.Errorf("the network data is not OpenStack's network_data.json: %w", err)
	}
	p := &networkPlan{}
	links := map[string]string{}
	for _, l := range nd.Links {
		switch l.Type {
		case "", "phy", "ethernet", "vif", "ovs", "bridge", "tap", "vhostuser", "hw_veb", "dvs":
		default:
			return nil, fmt.Errorf("link %q is of type %s: a diskless host applies physical links only (bonds and VLANs need a disk image)", l.ID, l.Type)
		}
		mac, err := net.ParseMAC(l.MAC)
		if err != nil {
			return nil, fmt.Errorf("link %q: ethernet_mac_address %q: %w", l.ID, l.MAC, err)
		}
		name, ok := ifaces[mac.String()]
		if !ok {
			return nil, fmt.Errorf("link %q: no interface of this host has MAC %s", l.ID, mac)
		}
		links[l.ID] = name
		if l.MTU > 0 {
			p.step(fmt.Sprintf("link %s: MTU %d on %s", l.ID, l.MTU, name), []string{"link", "set", "dev", name, "mtu", strconv.Itoa(l.MTU)})
		}
		p.step(fmt.Sprintf("link %s: %s up", l.ID, name), []string{"link", "set", "dev", name, "up"})
	}
	for _, n := range nd.Networks {
		name, ok := links[n.Link]
		if !ok {
			return nil, fmt.Errorf("network %q names link %q, which the network data does not define", n.ID, n.Link)
		}
		switch n.Type {
		case "ipv4_dhcp", "ipv6_dhcp", "ipv6_dhcpv6-stateful", "ipv6_dhcpv6-stateless", "ipv6_slaac":
			continue
		case "ipv4", "ipv6":
		default:
			return nil, fmt.Errorf("network %q is of type %q, which a diskless host does not apply", n.ID, n.Type)
		}
		addr, err := prefixOf(n.IPAddress, n.Netmask)
		if err != nil {
			return nil, fmt.Errorf("network %q: %w", n.ID, err)
		}
		p.step(fmt.Sprintf("network %s: %s on %s", n.ID, addr, name), []string{"addr", "replace", addr.String(), "dev", name})
		for _, r := range n.Routes {
			dst, err := prefixOf(r.Network, r.Netmask)
			if err != nil {
				return nil, fmt.Errorf("network %q: route: %w", n.ID, err)
			}
			gw, err := netip.ParseAddr(r.Gateway)
			if err != nil {
				return nil, fmt.Errorf("network %q: route to %s: gateway %q: %w", n.ID, dst, r.Gateway, err)
			}
			dst = dst.Masked()
			to := dst.String()
			if dst.Bits() == 0 {
				to = "default"
			}
			p.step(fmt.Sprintf("network %s: route %s via %s on %s", n.ID, to, gw, name), []string{"route", "replace", to, "via", gw.String(), "dev", name})
		}
	}
	for _, s := range nd.Services {
		if s.Type == "dns" {
			if _, err := netip.ParseAddr(s.Address); err != nil {
				return nil, fmt.Errorf("dns service %q: %w", s.Address, err)
			}
			p.Nameservers = append(p.Nameservers, s.Address)
		}
	}
	return p, nil
}

func (p *networkPlan) step(said string, argv []string) {
	p.Commands = append(p.Commands, argv)
	p.Said = append(p.Said, said)
}

// prefixOf parses an address with its netmask (dotted, or a prefix length), or in CIDR form.
func prefixOf(addr, mask string) (netip.Prefix, error) {
	if strings.Contains(addr, "/") {
		return netip.ParsePrefix(addr)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("address %q: %w", addr, err)
	}
	if mask == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	if bits, err := strconv.Atoi(mask); err == nil {
		return netip.PrefixFrom(a, bits), nil
	}
	m, err := netip.ParseAddr(mask)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("netmask %q: %w", mask, err)
	}
	ones, bits := net.IPMask(m.AsSlice()).Size()
	if bits == 0 {
		return netip.Prefix{}, fmt.Errorf("netmask %q is not contiguous", mask)
	}
	return netip.PrefixFrom(a, ones), nil
}

// interfacesByMAC maps each network interface's MAC (lower case) to its name, from sysfs.
func interfacesByMAC(sysRoot string) (map[string]string, error) {
	dir := filepath.Join(sysRoot, "class", "net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to list the network interfaces: %w", err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "address")) //nolint:gosec // sysfs
		if err != nil {
			continue
		}
		if mac, err := net.ParseMAC(strings.TrimSpace(string(b))); err == nil {
			if _, dup := out[mac.String()]; !dup {
				out[mac.String()] = e.Name()
			}
		}
	}
	return out, nil
}
