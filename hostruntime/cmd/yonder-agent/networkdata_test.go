package main

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestPlanNetworkAppliesStaticAddressesRoutesAndDNS(t *testing.T) {
	g := NewWithT(t)
	// What an inventory record holds (CAPM3's Metal3DataTemplate renders the same shape): DHCP kept on the
	// boot NIC, a static address beside it, a second NIC with a static address, a route and a default route.
	raw := []byte(`{"links": [{"id": "boot0", "type": "phy", "ethernet_mac_address": "52:54:00:AB:CD:01", "mtu": 9000},
	  {"id": "data0", "type": "ethernet", "ethernet_mac_address": "52:54:00:ab:cd:02"}],
	"networks": [{"id": "lease", "type": "ipv4_dhcp", "link": "boot0"},
	  {"id": "extra", "type": "ipv4", "link": "boot0", "ip_address": "198.18.7.150", "netmask": "255.255.255.0"},
	  {"id": "data", "type": "ipv4", "link": "data0", "ip_address": "10.20.0.5", "netmask": "24",
	   "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.20.0.1"}, {"network": "10.30.0.0", "netmask": "255.255.0.0", "gateway": "10.20.0.254"}]},
	  {"id": "v6", "type": "ipv6", "link": "data0", "ip_address": "2001:db8::5/64"}],
	"services": [{"type": "dns", "address": "10.20.0.53"}, {"type": "ntp", "address": "10.20.0.123"}]}`)
	p, err := planNetwork(raw, map[string]string{"52:54:00:ab:cd:01": "eth0", "52:54:00:ab:cd:02": "eth1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Commands).To(Equal([][]string{
		{"link", "set", "dev", "eth0", "mtu", "9000"},
		{"link", "set", "dev", "eth0", "up"},
		{"link", "set", "dev", "eth1", "up"},
		{"addr", "replace", "198.18.7.150/24", "dev", "eth0"},
		{"addr", "replace", "10.20.0.5/24", "dev", "eth1"},
		{"route", "replace", "default", "via", "10.20.0.1", "dev", "eth1"},
		{"route", "replace", "10.30.0.0/16", "via", "10.20.0.254", "dev", "eth1"},
		{"addr", "replace", "2001:db8::5/64", "dev", "eth1"},
	}))
	g.Expect(p.Said).To(ContainElement("network extra: 198.18.7.150/24 on eth0"))
	g.Expect(p.Nameservers).To(Equal([]string{"10.20.0.53"}))
}

func TestPlanNetworkRefusesWhatItCannotApply(t *testing.T) {
	ifaces := map[string]string{"52:54:00:ab:cd:01": "eth0"}
	for name, tc := range map[string]struct{ raw, want string }{
		"a bond":                       {`{"links": [{"id": "bond0", "type": "bond", "bond_links": ["a", "b"]}]}`, "bonds and VLANs need a disk image"},
		"a VLAN":                       {`{"links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:ab:cd:01"}, {"id": "v", "type": "vlan", "vlan_link": "eth0"}]}`, "link \"v\" is of type vlan"},
		"a MAC the host does not have": {`{"links": [{"id": "x", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:09"}]}`, "no interface of this host has MAC 52:54:00:00:00:09"},
		"an unknown link":              {`{"networks": [{"id": "n", "type": "ipv4", "link": "nope", "ip_address": "10.0.0.1", "netmask": "255.0.0.0"}]}`, `names link "nope"`},
		"a bad netmask": {`{"links": [{"id": "l", "ethernet_mac_address": "52:54:00:ab:cd:01"}],
		  "networks": [{"id": "n", "type": "ipv4", "link": "l", "ip_address": "10.0.0.1", "netmask": "255.0.255.0"}]}`, "not contiguous"},
		"a route without a gateway": {`{"links": [{"id": "l", "ethernet_mac_address": "52:54:00:ab:cd:01"}],
		  "networks": [{"id": "n", "type": "ipv4", "link": "l", "ip_address": "10.0.0.1", "netmask": "8", "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0"}]}]}`, "gateway"},
		"not JSON": {`links: []`, "not OpenStack's network_data.json"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := planNetwork([]byte(tc.raw), ifaces)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestInterfacesByMACReadsSysfs(t *testing.T) {
	g := NewWithT(t)
	sys := t.TempDir()
	for name, mac := range map[string]string{"eth0": "52:54:00:AB:CD:01\n", "lo": "00:00:00:00:00:00\n"} {
		g.Expect(os.MkdirAll(filepath.Join(sys, "class", "net", name), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(sys, "class", "net", name, "address"), []byte(mac), 0o644)).To(Succeed())
	}
	g.Expect(interfacesByMAC(sys)).To(Equal(map[string]string{"52:54:00:ab:cd:01": "eth0", "00:00:00:00:00:00": "lo"}))
}
