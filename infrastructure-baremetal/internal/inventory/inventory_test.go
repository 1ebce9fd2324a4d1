package inventory_test

import (
	"net"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// A provisioned host's entry is lease-only: HostByMAC (what DHCP reads) still finds it with its
// reservation, HostByName (the attestation service's lookup) does not, and DeleteHost removes it only for
// its own host, as any entry.
func TestStaticLeaseOnly(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x10, 0x00, 0x01}
	addr := netip.MustParseAddr("192.0.2.50")
	boot := inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}
	booting := inventory.Host{Name: "metal/a", MAC: mac, Address: addr, Boot: boot}
	leasing := inventory.Host{Name: "metal/a", MAC: mac, Address: addr, LeaseOnly: true}
	for _, tc := range []struct {
		name string
		// do changes a table that holds booting.
		do        func(s *inventory.Static)
		byMAC     bool // HostByMAC finds metal/a's MAC
		leaseOnly bool // ... as a lease-only entry
		byName    bool // HostByName("metal/a") finds it
	}{
		{name: "a host being booted is found by MAC and by name", do: func(*inventory.Static) {}, byMAC: true, byName: true},
		{name: "a lease-only host is found by MAC with its reservation, not by name",
			do: func(s *inventory.Static) { s.Set(leasing) }, byMAC: true, leaseOnly: true},
		{name: "booted again, the host is found by name again",
			do: func(s *inventory.Static) { s.Set(leasing); s.Set(booting) }, byMAC: true, byName: true},
		{name: "another host's DeleteHost leaves the lease-only entry",
			do: func(s *inventory.Static) { s.Set(leasing); s.DeleteHost(mac, "other/a") }, byMAC: true, leaseOnly: true},
		{name: "its own DeleteHost removes the lease-only entry",
			do: func(s *inventory.Static) { s.Set(leasing); s.DeleteHost(mac, "metal/a") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := inventory.NewStatic(booting)
			tc.do(s)
			h, ok := s.HostByMAC(net.HardwareAddr{0x52, 0x54, 0x00, 0x10, 0x00, 0x01})
			g.Expect(ok).To(Equal(tc.byMAC))
			if ok {
				g.Expect(h.Name).To(Equal("metal/a"))
				g.Expect(h.Address).To(Equal(addr))
				g.Expect(h.LeaseOnly).To(Equal(tc.leaseOnly))
			}
			byName, ok := s.HostByName("metal/a")
			g.Expect(ok).To(Equal(tc.byName))
			if ok {
				g.Expect(byName.LeaseOnly).To(BeFalse())
				g.Expect(byName.Boot).To(Equal(boot))
			}
		})
	}
}
