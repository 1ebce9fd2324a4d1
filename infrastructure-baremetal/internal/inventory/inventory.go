// Package inventory is the narrow view of the host inventory that the network boot services need: which
// MAC belongs to which host, the host's address reservation and its boot configuration. The services
// depend only on the Lookup interface, so they compile without Kubernetes; the BareMetalHost controller
// keeps a Static inventory in step with its objects (or implements Lookup itself).
//
// An entry is either a host to boot (DHCP with boot options, an iPXE script with a one-time ticket,
// attestation) or, with Host.LeaseOnly, a host that only keeps its reserved address: a provisioned host
// running the OS it booted from disk, which needs its lease and must never be served a provisioning boot.
package inventory

import (
	"net"
	"net/netip"
	"strings"
	"sync"
)

// Host is everything the boot services know about one bare-metal host.
type Host struct {
	// Name identifies the host, "<namespace>/<name>" of its BareMetalHost.
	Name string
	// MAC is the address of the NIC the host boots from.
	MAC net.HardwareAddr
	// Address is the host's reserved IPv4 address. Unused in proxyDHCP mode, where another server leases.
	Address netip.Addr
	// PrefixLen, Router and DNS override the server's defaults for this host's subnet (relayed networks).
	PrefixLen int
	Router    netip.Addr
	DNS       []netip.Addr
	// Hostname is sent in option 12 when set.
	Hostname string
	// Boot is what the host's iPXE script loads.
	Boot BootConfig
	// LeaseOnly: the host keeps its reserved address but is not booted. DHCP leases it Address without
	// boot options (and ignores it in proxyDHCP mode, which only sends boot options); the boot server
	// serves it no script, no ticket and no attestation, as for an unknown MAC. Boot is not used.
	LeaseOnly bool
}

// BootConfig is the content of a host's iPXE script.
type BootConfig struct {
	// Kernel and Initrd are artifact names (served under /artifacts/) or absolute http(s) URLs.
	Kernel string
	Initrd string
	// Cmdline is the kernel command line; the server appends the attestation endpoint and the one-time ticket.
	Cmdline string
	// LiveISO, when set, replaces the kernel: the script SAN-boots this ISO over HTTP (iPXE sanboot, which
	// reads it with range requests) and the ISO's own boot loader takes over; no ticket is issued, as the
	// ISO does not attest. A path on the boot server ("/live/<key>.iso", its verified ISO cache) or an
	// absolute http(s) URL.
	LiveISO string
}

// Lookup finds hosts by MAC. Implementations must be safe for concurrent use.
type Lookup interface {
	// HostByMAC returns the host whose boot NIC has this MAC, lease-only entries included: a boot service
	// (script, ticket, attestation) treats a LeaseOnly host as unknown.
	HostByMAC(mac net.HardwareAddr) (Host, bool)
}

// Static is an in-memory Lookup, updated by its owner (a controller, a test).
type Static struct {
	mu    sync.RWMutex
	byMAC map[string]Host
}

// NewStatic returns a Static inventory holding hosts.
func NewStatic(hosts ...Host) *Static {
	s := &Static{byMAC: make(map[string]Host, len(hosts))}
	for _, h := range hosts {
		s.Set(h)
	}
	return s
}

// Set adds or replaces the host with h's MAC.
func (s *Static) Set(h Host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byMAC[key(h.MAC)] = h
}

// Delete removes the host with this MAC.
func (s *Static) Delete(mac net.HardwareAddr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byMAC, key(mac))
}

// DeleteHost removes the entry with this MAC only when it is the named host's: a host that gives up its
// boot never removes another host's entry with the same MAC.
func (s *Static) DeleteHost(mac net.HardwareAddr, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.byMAC[key(mac)]; ok && h.Name == name {
		delete(s.byMAC, key(mac))
	}
}

// HostByMAC implements Lookup.
func (s *Static) HostByMAC(mac net.HardwareAddr) (Host, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.byMAC[key(mac)]
	return h, ok
}

// HostByName returns the host with this name that the boot services may boot (linear: for the
// attestation service's rare lookups). A lease-only entry is not returned: a host that only keeps its
// lease is unknown for boot purposes.
func (s *Static) HostByName(name string) (Host, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, h := range s.byMAC {
		if h.Name == name && !h.LeaseOnly {
			return h, true
		}
	}
	return Host{}, false
}

func key(mac net.HardwareAddr) string { return strings.ToLower(mac.String()) }
