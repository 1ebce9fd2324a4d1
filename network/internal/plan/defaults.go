package plan

import (
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Defaults the controller applies where a field is unset.
const (
	// DefaultMTU is the underlay MTU of a Site without spec.mtu.
	DefaultMTU = 1500
	// DefaultProbeIntervalMillis: 200 ms × 3 lost probes detects a failure in 600 ms; gateways in a group are
	// probed four times per interval, so their failure is detected in 150–200 ms (dataplane/probe).
	DefaultProbeIntervalMillis = 200
	// DefaultProbeFailureThreshold is the number of lost probes that mark a peer down.
	DefaultProbeFailureThreshold = 3
	// DefaultProbePort is the UDP port of the health probes.
	DefaultProbePort = 51822
	// DefaultSliceSize bounds a PeerSlice: 100 peers is ~30 KiB, far from etcd's 1.5 MiB limit, and a
	// change rewrites at most that much.
	DefaultSliceSize = 100
)

// Overhead is the worst-case (IPv6 underlay) encapsulation overhead of a protocol. Planning with the
// worst case costs a few bytes of MTU and removes a whole class of MTU black holes.
func Overhead(p netv1.Protocol) int32 {
	switch p {
	case netv1.ProtocolWireGuard:
		// IPv6 40 + UDP 8 + WireGuard 32, plus the VXLAN the dataplane carries inside WireGuard (inner IPv4
		// 20 + UDP 8 + VXLAN 8 + Ethernet 14 = 50; see docs/network-dataplane.md): the link's tunnelMTU is
		// what a pod packet may be, end to end.
		return 130
	case netv1.ProtocolVXLAN:
		return 70 // IPv6 40 + UDP 8 + VXLAN 8 + inner Ethernet 14
	case netv1.ProtocolGENEVE:
		return 70 // as VXLAN, without options
	case netv1.ProtocolIPIP:
		return 40 // an IPv6 outer header
	default:
		return 0
	}
}

// ResolveInterSite returns the protocol of a link between two Sites. A peering's explicit protocol wins;
// otherwise the Sites' preferences apply, and when they disagree or either says Auto, encryption wins:
// traffic between sites crosses networks we do not control.
func ResolveInterSite(peering, a, b netv1.Protocol) netv1.Protocol {
	if peering != "" && peering != netv1.ProtocolAuto {
		return peering
	}
	if a == b && a != "" && a != netv1.ProtocolAuto {
		return a
	}
	return netv1.ProtocolWireGuard
}

// ResolveIntraSite returns the protocol inside a Site: Auto means VXLAN (the site's own network is trusted
// and VXLAN works across L3 subnets without underlay routes).
func ResolveIntraSite(p netv1.Protocol) netv1.Protocol {
	if p == "" || p == netv1.ProtocolAuto {
		return netv1.ProtocolVXLAN
	}
	return p
}

// SiteMTU returns a Site's underlay MTU with the default applied.
func SiteMTU(s *netv1.Site) int32 {
	if s.Spec.MTU == 0 {
		return DefaultMTU
	}
	return s.Spec.MTU
}

// HealthProbe returns a Site's probe settings with defaults applied.
func HealthProbe(s *netv1.Site) netv1.HealthProbeSpec {
	h := s.Spec.HealthProbe
	if h.IntervalMilliseconds == 0 {
		h.IntervalMilliseconds = DefaultProbeIntervalMillis
	}
	if h.FailureThreshold == 0 {
		h.FailureThreshold = DefaultProbeFailureThreshold
	}
	if h.Port == 0 {
		h.Port = DefaultProbePort
	}
	return h
}
