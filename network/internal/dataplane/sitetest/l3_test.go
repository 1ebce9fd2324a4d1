package sitetest

import (
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// useWireGuardL3 restarts every daemon with --wireguard-l3 and leaves one active gateway per Site (ga2
// inactive), the condition for the L3 path.
func useWireGuardL3(s *Sites) {
	s.ExtraArgs = []string{"--wireguard-l3"}
	for _, n := range s.Nodes {
		s.Stop(n)
		s.Start(n)
	}
	s.WritePlans(map[string]bool{"ga2": true})
}

func routeL3(st daemon.Status, prefix string) bool {
	for _, r := range st.Routes {
		if r.Prefix.String() == prefix {
			return r.L3
		}
	}
	return false
}

// TestWireGuardL3: with one active gateway per Site and --wireguard-l3, pod traffic crosses WireGuard
// without VXLAN inside (the gateways' routes and eBPF members point at the WireGuard device), both ways, TCP
// and UDP, and the planned MTU still holds exactly.
func TestWireGuardL3(t *testing.T) {
	g := NewWithT(t)
	s := NewSites(t, netv1.ProtocolWireGuard)
	useWireGuardL3(s)
	a1, b2, ga1, gb1 := s.Nodes["a1"], s.Nodes["b2"], s.Nodes["ga1"], s.Nodes["gb1"]
	for _, n := range []*Node{a1, b2} {
		Echo(t, n.Pod, 7000)
	}
	diag := func() string {
		out := ""
		for _, n := range []*Node{ga1, gb1} {
			st, err := s.Debug(n)
			out += fmt.Sprintf("--- %s: %+v %v\n%s\n", n.Name, st, err, n.Log())
		}
		return out
	}
	to := func(n *Node) string { return net.JoinHostPort(n.PodIP.String(), "7000") }
	g.Eventually(func(g Gomega) {
		st, err := s.Debug(ga1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(routeL3(st, "10.20.0.0/16")).To(BeTrue())
		st, err = s.Debug(gb1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(routeL3(st, "10.10.0.0/16")).To(BeTrue())
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
	g.Eventually(func() error { return udpRoundTrip(a1.Pod, to(b2), 100) }, 20*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
	g.Eventually(func() error { return udpRoundTrip(b2.Pod, to(a1), 100) }, 5*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
	// The first full-size datagram teaches the pod the path MTU ("fragmentation needed"), later ones fragment.
	g.Eventually(func() error { return udpRoundTrip(a1.Pod, to(b2), 1400) }, 5*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
	before, err := s.Debug(ga1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tcpTransfer(a1.Pod, to(b2), 1<<20)).To(Succeed(), diag)
	g.Expect(tcpTransfer(b2.Pod, to(a1), 1<<20)).To(Succeed(), diag)
	after, err := s.Debug(ga1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Counters[0]).To(BeNumerically(">", before.Counters[0]), "ga1 redirected transit traffic to the WireGuard device")
	linkMTU := int(plan.DefaultMTU - plan.Overhead(netv1.ProtocolWireGuard))
	g.Eventually(func() error { return dfPing(s, a1.Pod, b2.PodIP.String(), linkMTU) }, 5*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
	g.Eventually(func() error { return dfPing(s, b2.Pod, a1.PodIP.String(), linkMTU) }, 5*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
	g.Expect(dfPing(s, a1.Pod, b2.PodIP.String(), linkMTU+1)).NotTo(Succeed())

	// Key rotations on an L3 link lose nothing either: sending falls back to VXLAN inside while either end
	// rotates or drains, and the peers' allowed prefixes move to the new key with the switch.
	dropsBefore, err := s.drops()
	g.Expect(err).NotTo(HaveOccurred())
	st := startSeqStream(t, a1.Pod, to(b2), 2*time.Millisecond)
	g.Eventually(st.count, 5*time.Second).Should(BeNumerically(">", 100))
	for _, n := range []*Node{gb1, ga1} {
		old := n.PubKey
		_, err := s.Lab.Exec(n.NS, s.bin, "rotate")
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() bool { s.Republish(); return n.PubKey != old && n.NextKey == "" }, 60*time.Second, 20*time.Millisecond).Should(BeTrue(), diag)
		g.Eventually(func(g Gomega) {
			d, err := s.Debug(n)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.WireGuard.Rotation).To(BeEmpty())
		}, 60*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
		// L3 resumes after the drain.
		g.Eventually(func(g Gomega) {
			d, err := s.Debug(ga1)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(routeL3(d, "10.20.0.0/16")).To(BeTrue())
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
	}
	sent, lost, missing := st.finish()
	dropsAfter, err := s.drops()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("continuous flow over the L3 link across two rotations: %d datagrams sent, %d lost %v; kernel drop counters that grew: %v", sent, lost, missing, dropsAfter.since(dropsBefore))
	g.Expect(lost).To(BeZero(), diag)
}
