package dhcp_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

var (
	knownMAC   = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	unknownMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x99, 0x99, 0x99}
	// leaseMAC is a provisioned host's: it keeps its reserved address and is never booted.
	leaseMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x57}
	serverIP = netip.MustParseAddr("192.0.2.1")
)

func testInventory() *inventory.Static {
	return inventory.NewStatic(
		inventory.Host{Name: "metal/a", MAC: knownMAC, Address: netip.MustParseAddr("192.0.2.50")},
		inventory.Host{Name: "metal/relayed", MAC: net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}, Address: netip.MustParseAddr("198.51.100.7"),
			PrefixLen: 26, Router: netip.MustParseAddr("198.51.100.1")},
		// A boot configuration left in a lease-only entry must not reach the wire either.
		inventory.Host{Name: "metal/provisioned", MAC: leaseMAC, Address: netip.MustParseAddr("192.0.2.60"), Hostname: "provisioned",
			Boot: inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}, LeaseOnly: true},
	)
}

// leaseWithoutBoot checks a lease-only host's reply: its reservation, lease times and site options, and
// none of what makes a client boot from the network (file name, next-server, TFTP server, PXE vendor
// options, the iPXE options).
func leaseWithoutBoot(g Gomega, rep *dhcp.Reply) {
	p := rep.Packet
	g.Expect(p.YourIPAddr.String()).To(Equal("192.0.2.60"))
	g.Expect(p.IPAddressLeaseTime(0)).To(Equal(time.Hour))
	g.Expect(p.SubnetMask().String()).To(Equal("ffffff00"))
	g.Expect(p.Router()[0].String()).To(Equal("192.0.2.1"))
	g.Expect(p.HostName()).To(Equal("provisioned"))
	g.Expect(p.BootFileName).To(BeEmpty())
	g.Expect(p.ServerIPAddr.IsUnspecified()).To(BeTrue(), "siaddr (next-server) %s", p.ServerIPAddr)
	for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionBootfileName, dhcpv4.OptionTFTPServerName, dhcpv4.OptionClassIdentifier,
		dhcpv4.OptionVendorSpecificInformation, dhcpv4.OptionClientMachineIdentifier, dhcpv4.GenericOptionCode(175)} {
		g.Expect(p.Options.Has(o)).To(BeFalse(), "option %s", o)
	}
}

func responder(t testing.TB, proxy bool) *dhcp.Responder {
	t.Helper()
	r, err := dhcp.NewResponder(dhcp.Config{ServerIP: serverIP, HTTPBase: "http://192.0.2.1:8080", ProxyDHCP: proxy,
		Router: serverIP}, testInventory())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func discover(t *testing.T, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	d, err := dhcpv4.NewDiscovery(mac, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pxe marks a request as a PXE client's.
var pxe = dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"))

func arch(a iana.Arch) dhcpv4.Modifier { return dhcpv4.WithOption(dhcpv4.OptClientArch(a)) }

// responderCases are what the Responder answers to which request.
var responderCases = []struct {
	name      string
	proxy     bool
	proxyPort bool
	req       func(t *testing.T) *dhcpv4.DHCPv4
	outcome   dhcp.Outcome
	check     func(g Gomega, rep *dhcp.Reply)
}{
	{name: "unknown MAC is ignored", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		return discover(t, unknownMAC, pxe)
	},
		outcome: dhcp.OutcomeUnknownMAC},
	{name: "discover gets the reservation, broadcast", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		return discover(t, knownMAC)
	},
		outcome: dhcp.OutcomeOffer, check: func(g Gomega, rep *dhcp.Reply) {
			g.Expect(rep.Packet.YourIPAddr.String()).To(Equal("192.0.2.50"))
			g.Expect(rep.To.String()).To(Equal("255.255.255.255:68"))
			g.Expect(rep.Packet.BootFileName).To(BeEmpty())
		}},
	{name: "relayed discover goes back to the relay with the host's own subnet",
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			t.Helper()
			d := discover(t, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}, pxe, arch(iana.EFI_X86_64))
			d.GatewayIPAddr = net.IPv4(198, 51, 100, 1)
			d.HopCount = 1
			return d
		}, outcome: dhcp.OutcomeOffer, check: func(g Gomega, rep *dhcp.Reply) {
			g.Expect(rep.To.String()).To(Equal("198.51.100.1:67"))
			g.Expect(rep.Packet.GatewayIPAddr.String()).To(Equal("198.51.100.1"))
			g.Expect(rep.Packet.SubnetMask().String()).To(Equal("ffffffc0"))
			g.Expect(rep.Packet.Router()[0].String()).To(Equal("198.51.100.1"))
			g.Expect(rep.Packet.BootFileName).To(Equal("ipxe.efi"))
		}},
	{name: "request for another address is NAKed", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		d := discover(t, knownMAC)
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(knownMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithTransactionID(d.TransactionID), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(192, 0, 2, 99))))
		return r
	}, outcome: dhcp.OutcomeNak},
	{name: "request for another server is ignored", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(knownMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(192, 0, 2, 77))))
		return r
	}, outcome: dhcp.OutcomeNotForUs},
	{name: "renewing client is answered by unicast", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(knownMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(net.IPv4(192, 0, 2, 50)))
		return r
	}, outcome: dhcp.OutcomeAck, check: func(g Gomega, rep *dhcp.Reply) {
		g.Expect(rep.To.String()).To(Equal("192.0.2.50:68"))
	}},
	{name: "release gets no reply", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(knownMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease))
		return r
	}, outcome: dhcp.OutcomeNoReply},
	{name: "proxyDHCP ignores non-PXE clients", proxy: true,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			t.Helper()
			return discover(t, knownMAC)
		}, outcome: dhcp.OutcomeNotPXE},
	{name: "proxyDHCP offers boot options without an address", proxy: true,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			t.Helper()
			return discover(t, knownMAC, pxe, arch(iana.INTEL_X86PC))
		},
		outcome: dhcp.OutcomeProxyOffer, check: func(g Gomega, rep *dhcp.Reply) {
			g.Expect(rep.Packet.YourIPAddr.IsUnspecified()).To(BeTrue())
			g.Expect(rep.Packet.BootFileName).To(Equal("undionly.kpxe"))
			g.Expect(rep.Packet.ClassIdentifier()).To(Equal("PXEClient"))
			g.Expect(rep.Packet.Options.Get(dhcpv4.OptionVendorSpecificInformation)).To(Equal([]byte{6, 1, 8, 255}))
			g.Expect(rep.Packet.IPAddressLeaseTime(0)).To(BeZero())
		}},
	{name: "proxyDHCP boot request on 4011 is answered to the sender", proxy: true, proxyPort: true,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			t.Helper()
			r, _ := dhcpv4.New(dhcpv4.WithHwAddr(knownMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), pxe,
				dhcpv4.WithClientIP(net.IPv4(203, 0, 113, 9)), dhcpv4.WithUserClass("iPXE", false))
			return r
		}, outcome: dhcp.OutcomeProxyAck, check: func(g Gomega, rep *dhcp.Reply) {
			g.Expect(rep.To.String()).To(Equal("203.0.113.9:4011"))
			g.Expect(rep.Packet.BootFileNameOption()).To(Equal("http://192.0.2.1:8080/ipxe/52:54:00:12:34:56"))
		}},
	{name: "option 175 alone identifies iPXE", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		return discover(t, knownMAC, dhcpv4.WithGeneric(dhcpv4.GenericOptionCode(175), []byte{19, 1, 1}))
	}, outcome: dhcp.OutcomeOffer, check: func(g Gomega, rep *dhcp.Reply) {
		g.Expect(rep.Packet.BootFileName).To(Equal("http://192.0.2.1:8080/ipxe/52:54:00:12:34:56"))
		g.Expect(rep.Packet.Options.Get(dhcpv4.GenericOptionCode(175))).To(Equal([]byte{176, 1, 1}))
	}},
	{name: "lease-only host: PXE discover gets its reservation and no boot file", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		return discover(t, leaseMAC, pxe, arch(iana.INTEL_X86PC), dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte{0, 1, 2, 3})),
			dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}))
	}, outcome: dhcp.OutcomeOffer, check: leaseWithoutBoot},
	{name: "lease-only host: UEFI PXE discover gets no boot file", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		return discover(t, leaseMAC, pxe, arch(iana.EFI_X86_64))
	}, outcome: dhcp.OutcomeOffer, check: leaseWithoutBoot},
	{name: "lease-only host: UEFI HTTP boot discover gets no URL", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		return discover(t, leaseMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016")), arch(iana.EFI_X86_64_HTTP))
	}, outcome: dhcp.OutcomeOffer, check: leaseWithoutBoot},
	{name: "lease-only host: iPXE request is acknowledged without its script URL", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(leaseMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), pxe,
			dhcpv4.WithUserClass("iPXE", false), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(192, 0, 2, 60))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(192, 0, 2, 1))))
		return r
	}, outcome: dhcp.OutcomeAck, check: leaseWithoutBoot},
	{name: "lease-only host: the OS renews its lease by unicast", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(leaseMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(net.IPv4(192, 0, 2, 60)))
		return r
	}, outcome: dhcp.OutcomeAck, check: func(g Gomega, rep *dhcp.Reply) {
		leaseWithoutBoot(g, rep)
		g.Expect(rep.To.String()).To(Equal("192.0.2.60:68"))
	}},
	{name: "lease-only host: request for another address is NAKed", req: func(t *testing.T) *dhcpv4.DHCPv4 {
		t.Helper()
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(leaseMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(192, 0, 2, 50))))
		return r
	}, outcome: dhcp.OutcomeNak},
	{name: "proxyDHCP ignores a lease-only host's PXE discover", proxy: true,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			t.Helper()
			return discover(t, leaseMAC, pxe, arch(iana.INTEL_X86PC))
		}, outcome: dhcp.OutcomeLeaseOnly},
	{name: "proxyDHCP ignores a lease-only host's boot request on 4011", proxy: true, proxyPort: true,
		req: func(t *testing.T) *dhcpv4.DHCPv4 {
			t.Helper()
			r, _ := dhcpv4.New(dhcpv4.WithHwAddr(leaseMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), pxe,
				dhcpv4.WithClientIP(net.IPv4(203, 0, 113, 9)), dhcpv4.WithUserClass("iPXE", false))
			return r
		}, outcome: dhcp.OutcomeLeaseOnly},
}

func TestResponder(t *testing.T) {
	cases := responderCases
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			peer := &net.UDPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 4011}
			rep, outcome, _ := responder(t, tc.proxy).Respond(tc.req(t), peer, tc.proxyPort)
			g.Expect(outcome).To(Equal(tc.outcome))
			if tc.outcome == dhcp.OutcomeLeaseOnly {
				g.Expect(rep).To(BeNil(), "a proxy server has nothing but boot options to send")
			}
			if tc.check != nil {
				g.Expect(rep).NotTo(BeNil())
				tc.check(g, rep)
			}
		})
	}
}

// TestRelayAndProxyPortOverSockets drives the real server sockets on loopback: a relay agent's unicast
// request comes back to the relay, and a proxyDHCP boot request on the boot-server port comes back to
// its sender.
func TestRelayAndProxyPortOverSockets(t *testing.T) {
	g := NewWithT(t)
	relay, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = relay.Close() }()
	relayPort := relay.LocalAddr().(*net.UDPAddr).Port
	// The server listens on the same port number on another loopback address (as relays use port 67 on both).
	lo := netip.MustParseAddr("127.0.0.2")
	srv, err := dhcp.NewServer(dhcp.Config{ServerIP: lo, HTTPBase: "http://127.0.0.2:8080", ProxyDHCP: true,
		ListenAddr: netip.AddrPortFrom(lo, uint16(relayPort)), ProxyListenAddr: netip.AddrPortFrom(lo, 0), RelayPort: relayPort},
		testInventory(), logr.Discard(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	ls, err := srv.Listen()
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ls) }()
	defer func() { cancel(); <-done }()

	req := discover(t, knownMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")))
	req.GatewayIPAddr = net.IPv4(127, 0, 0, 3)
	_, err = relay.WriteToUDP(req.ToBytes(), &net.UDPAddr{IP: lo.AsSlice(), Port: relayPort})
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, 1500)
	g.Expect(relay.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	n, _, err := relay.ReadFromUDP(buf)
	g.Expect(err).NotTo(HaveOccurred())
	rep, err := dhcpv4.FromBytes(buf[:n])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.MessageType()).To(Equal(dhcpv4.MessageTypeOffer))
	g.Expect(rep.TransactionID).To(Equal(req.TransactionID))
	g.Expect(rep.BootFileName).To(Equal("undionly.kpxe"))

	// Boot-server port: the client has a lease from the network's DHCP server and asks us by unicast.
	proxyAddr := ls[1].Addr()
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 4)})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = client.Close() }()
	breq, err := dhcpv4.New(dhcpv4.WithHwAddr(knownMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")), dhcpv4.WithClientIP(net.IPv4(127, 0, 0, 4)),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = client.WriteToUDP(breq.ToBytes(), proxyAddr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(client.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	n, _, err = client.ReadFromUDP(buf)
	g.Expect(err).NotTo(HaveOccurred())
	ack, err := dhcpv4.FromBytes(buf[:n])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ack.MessageType()).To(Equal(dhcpv4.MessageTypeAck))
	g.Expect(ack.BootFileName).To(Equal("ipxe.efi"))
	g.Expect(ack.YourIPAddr.IsUnspecified()).To(BeTrue())
}
