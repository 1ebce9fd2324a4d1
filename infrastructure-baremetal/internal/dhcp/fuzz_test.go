package dhcp_test

import (
	"bytes"
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// FuzzRespond feeds arbitrary datagrams through the same path as the server: parse, respond in normal and
// proxyDHCP mode, serialise the reply. Nothing may panic, a reply must parse back, and a lease-only host's
// reply never carries a boot file.
type respondFunc func(*dhcpv4.DHCPv4, *net.UDPAddr, bool) (*dhcp.Reply, dhcp.Outcome, *inventory.Host)

func FuzzRespond(f *testing.F) {
	seed := func(mods ...dhcpv4.Modifier) {
		d, err := dhcpv4.NewDiscovery(knownMAC, mods...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(d.ToBytes())
	}
	seed()
	seed(dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000")), dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)))
	seed(dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016")), dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64_HTTP)))
	seed(dhcpv4.WithUserClass("iPXE", false), dhcpv4.WithGeneric(dhcpv4.GenericOptionCode(175), []byte{19, 1, 1, 176, 1, 1}))
	seed(dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0x00}))        // odd-length option 93
	seed(dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte{0xff, 'i', 'P', 'X'})) // bad RFC 3004 length
	seed(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(192, 0, 2, 1))))
	seed(dhcpv4.WithGatewayIP(net.IPv4(198, 51, 100, 1)))
	for _, mods := range [][]dhcpv4.Modifier{{pxe}, {dhcpv4.WithUserClass("iPXE", false)}, {dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)}} {
		d, err := dhcpv4.NewDiscovery(leaseMAC, mods...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(d.ToBytes())
	}
	d, _ := dhcpv4.NewDiscovery(unknownMAC)
	f.Add(d.ToBytes())
	f.Add([]byte{})
	f.Add(make([]byte, 240))
	f.Add(append(d.ToBytes()[:236], 0x63, 0x82, 0x53, 0x63, 53, 200))
	normal, proxy := responder(f, false), responder(f, true)
	peer := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 9), Port: 68}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := dhcpv4.FromBytes(data)
		if err != nil {
			return
		}
		for i, resp := range []respondFunc{normal.Respond, proxy.Respond} {
			rep, _, _ := resp(req, peer, i == 1)
			if rep == nil {
				continue
			}
			if _, err := dhcpv4.FromBytes(rep.Packet.ToBytes()); err != nil {
				t.Fatalf("reply does not parse back: %v", err)
			}
			if rep.To == nil {
				t.Fatal("reply without destination")
			}
			if bytes.Equal(req.ClientHWAddr, leaseMAC) && (rep.Packet.BootFileName != "" || rep.Packet.Options.Has(dhcpv4.OptionBootfileName)) {
				t.Fatalf("lease-only host got a boot file: %q %q", rep.Packet.BootFileName, rep.Packet.BootFileNameOption())
			}
		}
	})
}
