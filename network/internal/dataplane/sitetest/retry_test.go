package sitetest

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

// A failed apply is retried with backoff, with no new input and no probe change, and the daemon resyncs:
// a route deleted behind its back comes back within --resync-interval. The failure is real: a natively
// routed peer whose underlay address is on no connected network (the kernel refuses the route).
func TestFailedApplyIsRetriedAndStateResyncs(t *testing.T) {
	g := NewWithT(t)
	s := &Sites{T: t, Lab: topo.New(t), Nodes: map[string]*Node{}, bin: Binary(t), ExtraArgs: []string{"--resync-interval", "2s"}}
	s.Lab.Network("lan")
	n := &Node{Name: "r1", Site: "a", NS: s.Lab.AddNS("r1"), PodCIDR: netip.MustParsePrefix("10.90.1.0/24"), dir: t.TempDir()}
	n.LAN = netip.MustParseAddr("192.168.40.11")
	s.Lab.Attach(n.NS, "eth0", "lan", "192.168.40.11/24", 1500)
	n.PodIP = n.PodCIDR.Addr().Next().Next()
	n.Pod = s.Lab.Pod(n.NS, "br0", "r1p", n.PodCIDR, n.PodIP)
	s.Nodes[n.Name] = n
	s.Start(n)
	s.WaitPublished(n)

	peer := func(name, cidr, addr string) netv1.Peer {
		return netv1.Peer{Node: name, PodCIDRs: []string{cidr}, Endpoints: []netv1.Endpoint{{Address: addr, Type: netv1.EndpointInternal}}}
	}
	in := desired.Input{Node: "r1", Site: "a", PodCIDRs: []string{n.PodCIDR.String()},
		Plan: netv1.RoutePlanSpec{Site: "a", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolNone, TunnelMTU: 1500}, HealthProbe: netv1.HealthProbeSpec{Port: 51822}},
		Slices: []netv1.PeerSliceSpec{{Site: "a", Role: netv1.SliceRoleNodes, Peers: []netv1.Peer{
			peer("r1", n.PodCIDR.String(), "192.168.40.11"), peer("r2", "10.90.2.0/24", "192.168.41.12")}}}}
	b, err := yaml.Marshal(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(n.InputFile(), b, 0o600)).To(Succeed())

	// The first apply fails, and so do the retries while nothing changes.
	g.Eventually(func(g Gomega) {
		st, err := s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.LastError).To(ContainSubstring("routes"))
		g.Expect(st.ApplyFailures).To(BeNumerically(">=", 3), "retried without a new input")
		g.Expect(st.Applied).To(BeZero())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), n.Log)

	// The underlay gains the peer's network: the next retry succeeds, the input file untouched.
	s.Lab.MustIP(n.NS, "addr", "add", "192.168.41.11/24", "dev", "eth0")
	route := func() string {
		out, _ := s.Lab.Exec(n.NS, "ip", "route", "show", "10.90.2.0/24")
		return strings.TrimSpace(out)
	}
	g.Eventually(func(g Gomega) {
		st, err := s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.LastError).To(BeEmpty())
		g.Expect(st.Applied).To(BeNumerically(">=", 1))
	}, 60*time.Second, 100*time.Millisecond).Should(Succeed(), n.Log)
	g.Expect(route()).To(ContainSubstring("via 192.168.41.12"))

	// Someone deletes the daemon's route: the periodic resync puts it back (no event announces it).
	// MustIP fails the test unless the kernel deleted it; the test does not look for the gap itself,
	// because on a loaded machine the next resync can come before a second `ip` returns. The write
	// counter proves the daemon rewrote it: it only writes a route that is missing.
	st, err := s.Debug(n)
	g.Expect(err).NotTo(HaveOccurred())
	s.Lab.MustIP(n.NS, "route", "del", "10.90.2.0/24")
	g.Eventually(func(g Gomega) {
		after, err := s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(after.Writes.Routes).To(Equal(st.Writes.Routes+1), "the resync rewrote exactly the missing route")
		g.Expect(route()).To(ContainSubstring("via 192.168.41.12"))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), n.Log)
}
