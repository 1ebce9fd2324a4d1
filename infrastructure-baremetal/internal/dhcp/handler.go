// Package dhcp is Yonder's DHCPv4 server for network boot. It answers only MACs that belong to known
// hosts (everything else is ignored), leases each host its static reservation, and hands out boot options
// by client architecture (option 93): BIOS PXE ROMs get undionly.kpxe over TFTP, UEFI ones ipxe.efi /
// snp.efi, UEFI HTTP boot clients an HTTP URL, and iPXE itself (user class "iPXE" or option 175) the
// host's own iPXE script URL. It runs on one interface, behind DHCP relays (giaddr), or as a proxyDHCP
// server next to an existing DHCP server (boot options only, no addresses). A lease-only host (a
// provisioned host running its OS) gets its lease and never boot options, whatever its client kind.
package dhcp

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// Outcome says what the server did with a request; it is the label of the requests metric.
type Outcome string

// Outcomes.
const (
	OutcomeOffer      Outcome = "offer"
	OutcomeAck        Outcome = "ack"
	OutcomeNak        Outcome = "nak"
	OutcomeUnknownMAC Outcome = "ignored_unknown_mac"
	OutcomeNotForUs   Outcome = "ignored_other_server"
	OutcomeNotPXE     Outcome = "ignored_not_pxe"
	OutcomeNoReply    Outcome = "ignored_message_type"
	OutcomeMalformed  Outcome = "ignored_malformed"
	OutcomeNoAddress  Outcome = "ignored_no_reservation"
	// OutcomeLeaseOnly: a proxyDHCP request of a lease-only host (a proxy server only sends boot options).
	OutcomeLeaseOnly  Outcome = "ignored_lease_only"
	OutcomeProxyOffer Outcome = "proxy_offer"
	OutcomeProxyAck   Outcome = "proxy_ack"
)

// Boot file defaults: Debian's ipxe package ships undionly.kpxe and ipxe.efi (x86-64); snp.efi is the
// name sites use for an arm64 build they place in the TFTP directory.
const (
	DefaultBIOSFile  = "undionly.kpxe"
	DefaultEFIx64    = "ipxe.efi"
	DefaultEFIArm64  = "snp.efi"
	pxeClientClass   = "PXEClient"
	httpClientClass  = "HTTPClient"
	ipxeUserClass    = "iPXE"
	optionIPXE       = 175
	ipxeNoPXEDHCP    = 176
	pxeDiscoveryCtrl = 6
)

// Config is one DHCP server's site configuration.
type Config struct {
	// Interface is the interface to serve on ("" serves every interface, e.g. behind relays only).
	Interface string
	// ListenAddr is where requests arrive (default 0.0.0.0:67).
	ListenAddr netip.AddrPort
	// ServerIP is this server's address on the boot network: server identifier and TFTP next-server.
	ServerIP netip.Addr
	// TFTPServer overrides the next-server address (default ServerIP).
	TFTPServer netip.Addr
	// HTTPBase is the boot HTTP server's base URL, e.g. http://10.0.0.1:8080 (no trailing slash).
	HTTPBase string
	// ProxyDHCP makes the server answer only PXE clients with boot options and never lease addresses
	// (another DHCP server owns the network); it also listens on ProxyPort (4011) for boot requests.
	ProxyDHCP bool
	// ProxyListenAddr is the proxyDHCP boot-server port address (default 0.0.0.0:4011).
	ProxyListenAddr netip.AddrPort
	// RelayPort is the port replies to a relay agent go to (default 67).
	RelayPort int
	// ClientPort is the port replies to clients go to (default 68).
	ClientPort int
	// LeaseTime of reservations (default 1h).
	LeaseTime time.Duration
	// PrefixLen, Router and DNS are the defaults for hosts that do not set their own.
	PrefixLen int
	Router    netip.Addr
	DNS       []netip.Addr
	// BootFiles overrides the boot file per client architecture (option 93 values).
	BootFiles map[iana.Arch]string
}

func (c *Config) defaults() {
	if !c.ListenAddr.IsValid() {
		c.ListenAddr = netip.AddrPortFrom(netip.IPv4Unspecified(), dhcpv4.ServerPort)
	}
	if !c.ProxyListenAddr.IsValid() {
		c.ProxyListenAddr = netip.AddrPortFrom(netip.IPv4Unspecified(), 4011)
	}
	if c.RelayPort == 0 {
		c.RelayPort = dhcpv4.ServerPort
	}
	if c.ClientPort == 0 {
		c.ClientPort = dhcpv4.ClientPort
	}
	if c.LeaseTime == 0 {
		c.LeaseTime = time.Hour
	}
	if c.PrefixLen == 0 {
		c.PrefixLen = 24
	}
	if !c.TFTPServer.IsValid() {
		c.TFTPServer = c.ServerIP
	}
	files := map[iana.Arch]string{
		iana.INTEL_X86PC:     DefaultBIOSFile,
		iana.EFI_X86_64:      DefaultEFIx64,
		iana.EFI_BC:          DefaultEFIx64,
		iana.EFI_ARM64:       DefaultEFIArm64,
		iana.EFI_X86_64_HTTP: DefaultEFIx64,
		iana.EFI_ARM64_HTTP:  DefaultEFIArm64,
	}
	for a, f := range c.BootFiles {
		files[a] = f
	}
	c.BootFiles = files
}

// Validate reports configuration errors.
func (c *Config) Validate() error {
	if !c.ServerIP.Is4() {
		return fmt.Errorf("failed to configure DHCP: ServerIP %q is not an IPv4 address", c.ServerIP)
	}
	if c.HTTPBase == "" {
		return fmt.Errorf("failed to configure DHCP: HTTPBase is required (iPXE script URLs)")
	}
	return nil
}

// ScriptURL is the per-host iPXE script URL the boot server serves.
func ScriptURL(httpBase string, mac net.HardwareAddr) string {
	return fmt.Sprintf("%s/ipxe/%s", httpBase, strings.ToLower(mac.String()))
}

// Responder computes replies; it holds no sockets, so it can be tested and fuzzed directly.
type Responder struct {
	cfg    Config
	lookup inventory.Lookup
}

// NewResponder returns a Responder for a validated configuration.
func NewResponder(cfg Config, lookup inventory.Lookup) (*Responder, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Responder{cfg: cfg, lookup: lookup}, nil
}

// ClientKind is how a request identified itself.
type ClientKind struct {
	PXE  bool // vendor class PXEClient (firmware PXE ROM)
	HTTP bool // vendor class HTTPClient (UEFI HTTP boot)
	IPXE bool // iPXE (user class or option 175)
	Arch iana.Arch
	// HasArch is false when option 93 is absent (legacy BIOS ROMs and plain DHCP clients).
	HasArch bool
}

// Classify inspects a request's vendor class, user class, option 175 and option 93.
func Classify(req *dhcpv4.DHCPv4) ClientKind {
	var k ClientKind
	class := req.ClassIdentifier()
	k.PXE = strings.HasPrefix(class, pxeClientClass)
	k.HTTP = strings.HasPrefix(class, httpClientClass)
	if req.Options.Has(dhcpv4.GenericOptionCode(optionIPXE)) {
		k.IPXE = true
	}
	// iPXE sends user class "iPXE" as a plain string, RFC 3004 clients as length-prefixed strings.
	if raw := req.Options.Get(dhcpv4.OptionUserClassInformation); raw != nil && bytes.Contains(raw, []byte(ipxeUserClass)) {
		k.IPXE = true
	}
	if archs := req.ClientArch(); len(archs) > 0 {
		k.Arch, k.HasArch = archs[0], true
	}
	return k
}

// Reply is a reply and where to send it.
type Reply struct {
	Packet *dhcpv4.DHCPv4
	To     *net.UDPAddr
}

// Respond computes the reply to req, which arrived from peer on the proxyDHCP port when proxyPort is set.
// A nil Reply means the request is ignored; Outcome says why.
func (r *Responder) Respond(req *dhcpv4.DHCPv4, peer *net.UDPAddr, proxyPort bool) (*Reply, Outcome, *inventory.Host) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6 {
		return nil, OutcomeMalformed, nil
	}
	host, ok := r.lookup.HostByMAC(req.ClientHWAddr)
	if !ok {
		return nil, OutcomeUnknownMAC, nil
	}
	kind := Classify(req)
	if r.cfg.ProxyDHCP || proxyPort {
		if host.LeaseOnly {
			return nil, OutcomeLeaseOnly, &host
		}
		rep, out := r.respondProxy(req, peer, proxyPort, kind, &host)
		return rep, out, &host
	}
	if !host.Address.Is4() {
		return nil, OutcomeNoAddress, &host
	}
	var typ dhcpv4.MessageType
	outcome := OutcomeOffer
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(net.IP(r.cfg.ServerIP.AsSlice())) {
			return nil, OutcomeNotForUs, &host
		}
		want := req.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = req.ClientIPAddr
		}
		if want != nil && !want.IsUnspecified() && !want.Equal(net.IP(host.Address.AsSlice())) {
			rep, err := dhcpv4.NewReplyFromRequest(req,
				dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(r.cfg.ServerIP.AsSlice()))),
				dhcpv4.WithOption(dhcpv4.OptMessage("requested address is not this host's reservation")))
			if err != nil {
				return nil, OutcomeMalformed, &host
			}
			rep.YourIPAddr = net.IPv4zero
			return &Reply{Packet: rep, To: r.destination(req, rep, peer)}, OutcomeNak, &host
		}
		typ, outcome = dhcpv4.MessageTypeAck, OutcomeAck
	case dhcpv4.MessageTypeInform:
		typ, outcome = dhcpv4.MessageTypeAck, OutcomeAck
	default:
		return nil, OutcomeNoReply, &host
	}
	rep, err := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(typ))
	if err != nil {
		return nil, OutcomeMalformed, &host
	}
	r.addLease(rep, req, &host)
	r.addBoot(rep, req, kind, &host)
	return &Reply{Packet: rep, To: r.destination(req, rep, peer)}, outcome, &host
}

func (r *Responder) addLease(rep, req *dhcpv4.DHCPv4, h *inventory.Host) {
	if req.MessageType() != dhcpv4.MessageTypeInform {
		rep.YourIPAddr = net.IP(h.Address.AsSlice())
		rep.UpdateOption(dhcpv4.OptIPAddressLeaseTime(r.cfg.LeaseTime))
		rep.UpdateOption(dhcpv4.OptRenewTimeValue(r.cfg.LeaseTime / 2))
		rep.UpdateOption(dhcpv4.OptRebindingTimeValue(r.cfg.LeaseTime * 7 / 8))
	}
	rep.UpdateOption(dhcpv4.OptServerIdentifier(net.IP(r.cfg.ServerIP.AsSlice())))
	plen := r.cfg.PrefixLen
	if h.PrefixLen != 0 {
		plen = h.PrefixLen
	}
	rep.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(plen, 32)))
	router := r.cfg.Router
	if h.Router.IsValid() {
		router = h.Router
	}
	if router.Is4() {
		rep.UpdateOption(dhcpv4.OptRouter(net.IP(router.AsSlice())))
	}
	dns := r.cfg.DNS
	if len(h.DNS) > 0 {
		dns = h.DNS
	}
	if len(dns) > 0 {
		ips := make([]net.IP, 0, len(dns))
		for _, d := range dns {
			ips = append(ips, net.IP(d.AsSlice()))
		}
		rep.UpdateOption(dhcpv4.OptDNS(ips...))
	}
	if h.Hostname != "" {
		rep.UpdateOption(dhcpv4.OptHostName(h.Hostname))
	}
}

// addBoot adds the boot options a PXE/HTTP/iPXE client needs; plain DHCP clients get none, nor does a
// lease-only host: a provisioned host whose firmware falls back to the network gets its address and no
// boot file (it has nothing to boot there; its script would be refused anyway).
func (r *Responder) addBoot(rep, req *dhcpv4.DHCPv4, k ClientKind, h *inventory.Host) bool {
	if h.LeaseOnly || (!k.PXE && !k.HTTP && !k.IPXE) {
		return false
	}
	var file string
	switch {
	case k.IPXE:
		// iPXE already runs: chain to this host's own script over HTTP.
		file = ScriptURL(r.cfg.HTTPBase, h.MAC)
	case k.HTTP || k.Arch == iana.EFI_X86_64_HTTP || k.Arch == iana.EFI_ARM64_HTTP:
		f, ok := r.cfg.BootFiles[k.Arch]
		if !ok {
			return false
		}
		file = r.cfg.HTTPBase + "/artifacts/" + f
		rep.UpdateOption(dhcpv4.OptClassIdentifier(httpClientClass))
	default:
		arch := iana.INTEL_X86PC
		if k.HasArch {
			arch = k.Arch
		}
		f, ok := r.cfg.BootFiles[arch]
		if !ok {
			return false
		}
		file = f
		rep.UpdateOption(dhcpv4.OptTFTPServerName(r.cfg.TFTPServer.String()))
	}
	// next-server on every boot reply: iPXE counts a (proxy)DHCP reply as carrying PXE options only when it
	// has both next-server and a file name.
	rep.ServerIPAddr = net.IP(r.cfg.TFTPServer.AsSlice())
	if k.PXE {
		rep.UpdateOption(dhcpv4.OptClassIdentifier(pxeClientClass))
		// PXE discovery control 8: boot from the file name at once, no boot server discovery.
		rep.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{pxeDiscoveryCtrl, 1, 8, 255}))
	}
	if uuid := req.Options.Get(dhcpv4.OptionClientMachineIdentifier); uuid != nil {
		rep.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
	}
	// iPXE: 175.176 = 1 ("no-pxedhcp") makes iPXE skip waiting for a proxyDHCP offer.
	rep.UpdateOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(optionIPXE), []byte{ipxeNoPXEDHCP, 1, 1}))
	rep.UpdateOption(dhcpv4.OptBootFileName(file))
	if len(file) < 128 {
		rep.BootFileName = file
	}
	return true
}

// respondProxy answers as a proxyDHCP server: PXE clients only, no address, boot options only.
func (r *Responder) respondProxy(req *dhcpv4.DHCPv4, peer *net.UDPAddr, proxyPort bool, k ClientKind, h *inventory.Host) (*Reply, Outcome) {
	if !k.PXE && !k.HTTP && !k.IPXE {
		return nil, OutcomeNotPXE
	}
	var typ dhcpv4.MessageType
	outcome := OutcomeProxyOffer
	switch {
	case req.MessageType() == dhcpv4.MessageTypeDiscover && !proxyPort:
		typ = dhcpv4.MessageTypeOffer
	case req.MessageType() == dhcpv4.MessageTypeRequest && proxyPort:
		typ, outcome = dhcpv4.MessageTypeAck, OutcomeProxyAck
	case req.MessageType() == dhcpv4.MessageTypeRequest && !proxyPort:
		// The network's own DHCP server acknowledges the lease; iPXE re-requests with its class and
		// needs the boot options, which are harmless to repeat.
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(net.IP(r.cfg.ServerIP.AsSlice())) {
			return nil, OutcomeNotForUs
		}
		typ, outcome = dhcpv4.MessageTypeAck, OutcomeProxyAck
	default:
		return nil, OutcomeNoReply
	}
	rep, err := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(typ))
	if err != nil {
		return nil, OutcomeMalformed
	}
	rep.YourIPAddr = net.IPv4zero
	rep.UpdateOption(dhcpv4.OptServerIdentifier(net.IP(r.cfg.ServerIP.AsSlice())))
	if !r.addBoot(rep, req, k, h) {
		return nil, OutcomeNotPXE
	}
	to := r.destination(req, rep, peer)
	if proxyPort && peer != nil {
		// Boot-server requests come by unicast from the client's new address, but a PXE client (iPXE
		// included) applies that address only after the whole exchange, so it does not answer ARP yet:
		// on the client's own link the reply is broadcast to its port; a routed client gets unicast.
		to = peer
		if r.cfg.Interface != "" && (req.GatewayIPAddr == nil || req.GatewayIPAddr.IsUnspecified()) {
			to = &net.UDPAddr{IP: net.IPv4bcast, Port: peer.Port}
		}
	}
	return &Reply{Packet: rep, To: to}, outcome
}

// destination follows RFC 2131 4.1: relay agent, then an addressed client, then broadcast.
func (r *Responder) destination(req, rep *dhcpv4.DHCPv4, _ *net.UDPAddr) *net.UDPAddr {
	if req.GatewayIPAddr != nil && !req.GatewayIPAddr.IsUnspecified() {
		return &net.UDPAddr{IP: req.GatewayIPAddr, Port: r.cfg.RelayPort}
	}
	if req.ClientIPAddr != nil && !req.ClientIPAddr.IsUnspecified() && rep.MessageType() != dhcpv4.MessageTypeNak {
		return &net.UDPAddr{IP: req.ClientIPAddr, Port: r.cfg.ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: r.cfg.ClientPort}
}
