package kernel

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// The chain admits each planned underlay VXLAN peer once, sorted (so an unchanged plan compares equal to
// what iptables prints), and no peer reached another way.
func TestVXLANFilterRulesAdmitOnlyUnderlayVXLANPeers(t *testing.T) {
	g := NewWithT(t)
	st := desired.State{Hops: map[string]desired.NextHop{
		"b/vxlan":      {Node: "b", Via: desired.ViaVXLAN, Underlay: netip.MustParseAddr("192.168.1.12")},
		"a/vxlan":      {Node: "a", Via: desired.ViaVXLAN, Underlay: netip.MustParseAddr("192.168.1.11")},
		"a2/vxlan":     {Node: "a2", Via: desired.ViaVXLAN, Underlay: netip.MustParseAddr("192.168.1.11")},
		"gw/wireguard": {Node: "gw", Via: desired.ViaWireGuard, Underlay: netip.MustParseAddr("203.0.113.1")},
		"v6/vxlan":     {Node: "v6", Via: desired.ViaVXLAN, Underlay: netip.MustParseAddr("fd00::1")},
	}}
	g.Expect(vxlanFilterRules(st)).To(Equal([]string{
		"-A YONDER-VXLAN -s 192.168.1.11/32 -j RETURN",
		"-A YONDER-VXLAN -s 192.168.1.12/32 -j RETURN",
		"-A YONDER-VXLAN -j DROP",
	}))
	g.Expect(vxlanFilterRules(desired.State{})).To(Equal([]string{"-A YONDER-VXLAN -j DROP"}))
	g.Expect(chainRules([]byte("-N YONDER-VXLAN\n-A YONDER-VXLAN -s 192.168.1.11/32 -j RETURN\n-A YONDER-VXLAN -j DROP\n"))).To(Equal([]string{
		"-A YONDER-VXLAN -s 192.168.1.11/32 -j RETURN", "-A YONDER-VXLAN -j DROP",
	}))
}
