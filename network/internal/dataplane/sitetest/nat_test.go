package sitetest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/dataplane/kernel"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// TestSitesBehindNAT runs every NAT scenario on one NATSites topology (its setup is the expensive part):
// detection and the three link kinds, pod ↔ pod both ways between a public and a NATed Site and between
// two NATed Sites through the relay, a NAT that forgets its mappings, a relay gateway and a NATed gateway
// failing.
func TestSitesBehindNAT(t *testing.T) {
	s := NewNATSites(t)
	t0 := time.Now()
	for _, n := range s.Nodes {
		Echo(t, n.Pod, 7000)
	}
	t.Run("detection", func(t *testing.T) { testNATDetection(t, s, t0) })
	t.Run("pod-to-pod", func(t *testing.T) { testNATPodToPod(t, s) })
	t.Run("rebinding", func(t *testing.T) { testNATRebinding(t, s) })
	t.Run("relay-fails", func(t *testing.T) { testNATFailover(t, s, "n3", "m1", []string{"p1", "p2"}, "yonder-vw") })
	t.Run("nated-gateway-fails", func(t *testing.T) { testNATFailover(t, s, "p1", "n3", []string{"n1", "n2"}, "yonder-vx") })
}

func (s *NATSites) diag() string {
	var b strings.Builder
	for _, name := range s.names() {
		n := s.Nodes[name]
		st, err := s.Debug(n)
		pub, _ := n.Publication()
		fmt.Fprintf(&b, "--- %s: published %+v\ndebug %+v %v\n%s\n", n.Name, pub.Reachability, st, err, n.Log())
	}
	return b.String()
}

func testNATDetection(t *testing.T, s *NATSites, t0 time.Time) {
	t.Helper()
	g := NewWithT(t)
	want := map[string]netv1.NodeReachability{
		"p1": {Inbound: netv1.ReachabilityReachable, ObservedAddress: "198.51.100.11"},
		"p2": {Inbound: netv1.ReachabilityReachable, ObservedAddress: "198.51.100.12"},
		"q1": {Inbound: netv1.ReachabilityReachable, ObservedAddress: "198.51.100.41"},
		"n1": {Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: s.WAN["n"].String()},
		"n2": {Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: s.WAN["n"].String()},
		"n3": {Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: s.WAN["n"].String()},
		"m1": {Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: s.WAN["m"].String()},
	}
	for name, w := range want {
		g.Eventually(func() (*netv1.NodeReachability, error) {
			pub, err := s.Nodes[name].Publication()
			return pub.Reachability, err
		}, 60*time.Second, 100*time.Millisecond).Should(Equal(&w), func() string { return name + ": " + s.diag() })
	}
	t.Logf("DETECTION: every node's reachability published %v after the daemons started", time.Since(t0).Round(10*time.Millisecond))
	links := map[[2]string]netv1.LinkStatus{
		{"p", "q"}: {Kind: netv1.LinkKindDirect},
		{"n", "p"}: {Kind: netv1.LinkKindNATInitiated, BehindNAT: []string{"n"}},
		{"m", "p"}: {Kind: netv1.LinkKindNATInitiated, BehindNAT: []string{"m"}},
		{"n", "q"}: {Kind: netv1.LinkKindNATInitiated, BehindNAT: []string{"n"}},
		{"m", "n"}: {Kind: netv1.LinkKindRelayed, BehindNAT: []string{"m", "n"}, Relay: "p"},
	}
	for pair, w := range links {
		g.Eventually(func() netv1.LinkStatus { return s.Link(pair[0], pair[1]) }, 30*time.Second, 100*time.Millisecond).Should(
			And(HaveField("Kind", w.Kind), HaveField("BehindNAT", w.BehindNAT), HaveField("Relay", w.Relay), HaveField("Up", true)), "%v", pair)
	}
	// Converged: every daemon applied the last plan, every tunnel has handshaken (the NATed ends dialled),
	// every probe answers. Until then a flow's path can still change under it.
	for _, name := range s.names() {
		g.Eventually(func(g Gomega) {
			d, err := s.Debug(s.Nodes[name])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.LastError).To(BeEmpty())
			g.Expect(d.Down).To(BeEmpty())
			for _, p := range d.WireGuard.Peers {
				g.Expect(p.HandshakeAge).To(BeNumerically(">=", 0), "%s peer %s", name, p.PublicKey)
			}
			for peer, p := range d.Probes {
				g.Expect(p.Up).To(BeTrue(), "%s probes %s", name, peer)
				g.Expect(p.Received).To(BeNumerically(">", 0), "%s probes %s", name, peer)
			}
		}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	}
	t.Logf("CONVERGED: every tunnel handshaken and every probe answered %v after the daemons started", time.Since(t0).Round(10*time.Millisecond))
}

func testNATPodToPod(t *testing.T, s *NATSites) {
	t.Helper()
	g := NewWithT(t)
	to := func(n *Node) string { return net.JoinHostPort(n.PodIP.String(), "7000") }
	p1, n3, m1 := s.Nodes["p1"], s.Nodes["n3"], s.Nodes["m1"]
	// Public ↔ NATed (n3 is an ordinary node behind n's gateways), then NATed ↔ NATed through the relay.
	for _, pair := range [][2]*Node{{p1, n3}, {n3, p1}, {n3, m1}, {m1, n3}} {
		from, dst := pair[0], pair[1]
		g.Eventually(func() error { return udpRoundTrip(from.Pod, to(dst), 100) }, 30*time.Second, 100*time.Millisecond).Should(Succeed(), func() string { return from.Name + " → " + dst.Name + ": " + s.diag() })
		g.Expect(tcpTransfer(from.Pod, to(dst), 1<<20)).To(Succeed(), "%s → %s", from.Name, dst.Name)
		g.Eventually(func() error { return dfPing(s.Sites, from.Pod, dst.PodIP.String(), 84) }, 10*time.Second, 200*time.Millisecond).Should(Succeed(), "ICMP %s → %s", from.Name, dst.Name)
	}
	// The relayed path's MTU is the smaller of its two hops: exactly that crosses with DF, one byte more is
	// refused with "fragmentation needed" (and TCP above went through MSS clamping on the same routes).
	relayMTU := int(plan.DefaultMTU - plan.Overhead(netv1.ProtocolWireGuard))
	g.Eventually(func() error { return dfPing(s.Sites, n3.Pod, m1.PodIP.String(), relayMTU) }, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func() error { return dfPing(s.Sites, m1.Pod, n3.PodIP.String(), relayMTU) }, 5*time.Second, 200*time.Millisecond).Should(Succeed())
	err := dfPing(s.Sites, n3.Pod, m1.PodIP.String(), relayMTU+1)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(MatchRegexp(`(?i)frag needed|message too long|mtu ?= ?%d`, relayMTU))

	// m1 has no tunnel to n's gateways at all: only to the reachable Sites' gateways (the relay's among them).
	keys := map[string]string{}
	for _, n := range s.Nodes {
		pub, err := n.Publication()
		g.Expect(err).NotTo(HaveOccurred())
		keys[pub.PublicKey] = n.Name
	}
	st, err := s.Debug(m1)
	g.Expect(err).NotTo(HaveOccurred())
	var peers []string
	for _, p := range st.WireGuard.Peers {
		peers = append(peers, keys[p.PublicKey])
	}
	g.Expect(peers).To(ConsistOf("p1", "p2", "q1"))
	// p1 was never told where n1 is: it learned the NAT's address from n1's handshake.
	st, err = s.Debug(p1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(peerEndpoint(st, keys, "n1")).To(HavePrefix(s.WAN["n"].String()+":"), "p1 accepts n1 at its NAT's address")
}

// peerEndpoint is the endpoint the node's WireGuard device has for the named peer.
func peerEndpoint(st daemon.Status, keys map[string]string, name string) string {
	for _, p := range st.WireGuard.Peers {
		if keys[p.PublicKey] == name {
			return p.Endpoint
		}
	}
	return ""
}

// testNATRebinding flushes both NAT routers' conntrack tables while a public pod sends to a NATed pod
// (the direction a NAT blocks once it forgot the mapping) and a NATed pod sends to the other NATed Site
// through the relay. Each NAT maps the next packet to a new random port; the NATed gateways' probes (they
// probe every reachable peer they dial) re-create the mappings and the reachable ends follow the new
// endpoints.
func testNATRebinding(t *testing.T, s *NATSites) {
	t.Helper()
	g := NewWithT(t)
	p1, n3, m1 := s.Nodes["p1"], s.Nodes["n3"], s.Nodes["m1"]
	keys := publishedKeys(g, s)
	public := startStream(t, p1.Pod, net.JoinHostPort(n3.PodIP.String(), "7000"))
	defer func() { close(public.stop); public.done.Wait() }()
	relayed := startStream(t, n3.Pod, net.JoinHostPort(m1.PodIP.String(), "7000"))
	defer func() { close(relayed.stop); relayed.done.Wait() }()
	for _, st := range []*stream{public, relayed} {
		g.Eventually(st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", 200))
	}
	before, err := s.Debug(p1)
	g.Expect(err).NotTo(HaveOccurred())

	t0 := time.Now()
	g.Expect(s.FlushNAT("n")).To(Succeed())
	g.Expect(s.FlushNAT("m")).To(Succeed())
	np, nr := public.count(), relayed.count()
	g.Eventually(public.count, 60*time.Second, 10*time.Millisecond).Should(BeNumerically(">", np+200), s.diag)
	g.Eventually(relayed.count, 60*time.Second, 10*time.Millisecond).Should(BeNumerically(">", nr+200), s.diag)
	gp, gr := public.gapAfter(t0), relayed.gapAfter(t0)
	t.Logf("NAT REBIND (conntrack -F on both NATs): public → NATed flow interrupted %v, relayed flow %v (probes every 50 ms to gateways in a group, else 200 ms; keepalive %v)", gp, gr, kernel.PersistentKeepalive)
	// The bound: the traffic is back within the keepalive interval (in practice one probe interval).
	g.Expect(gp).To(BeNumerically("<", kernel.PersistentKeepalive))
	g.Expect(gr).To(BeNumerically("<", kernel.PersistentKeepalive))

	// The NAT really rebound: p1 now reaches an n gateway at another port of the NAT's address.
	g.Eventually(func(g Gomega) {
		after, err := s.Debug(p1)
		g.Expect(err).NotTo(HaveOccurred())
		moved := 0
		for _, gw := range []string{"n1", "n2"} {
			old, cur := peerEndpoint(before, keys, gw), peerEndpoint(after, keys, gw)
			g.Expect(cur).To(HavePrefix(s.WAN["n"].String() + ":"))
			if cur != old {
				moved++
			}
		}
		g.Expect(moved).To(BeNumerically(">=", 1))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

func publishedKeys(g Gomega, s *NATSites) map[string]string {
	keys := map[string]string{}
	for _, n := range s.Nodes {
		pub, err := n.Publication()
		g.Expect(err).NotTo(HaveOccurred())
		keys[pub.PublicKey] = n.Name
	}
	return keys
}

// testNATFailover kills (SIGKILL) the daemon of whichever of gateways carries a continuous flow from → to
// (the one transmitting more on dev) and measures the interruption: probes take it out of every group
// without a plan change, as for any gateway. It comes back afterwards.
func testNATFailover(t *testing.T, s *NATSites, from, to string, gateways []string, dev string) {
	t.Helper()
	g := NewWithT(t)
	src, dst := s.Nodes[from], s.Nodes[to]
	st := startStream(t, src.Pod, net.JoinHostPort(dst.PodIP.String(), "7000"))
	defer func() { close(st.stop); st.done.Wait() }()
	g.Eventually(st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", 100), s.diag)

	tx := map[string]uint64{}
	for _, gw := range gateways {
		tx[gw] = txPackets(s.Sites, s.Nodes[gw], dev)
	}
	n0 := st.count()
	g.Eventually(st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", n0+200))
	victim := gateways[0]
	var most uint64
	for _, gw := range gateways {
		if d := txPackets(s.Sites, s.Nodes[gw], dev) - tx[gw]; d > most {
			victim, most = gw, d
		}
	}
	v := s.Nodes[victim]
	t.Logf("flow %s → %s is carried by %s (%s tx +%d)", from, to, victim, dev, most)

	t0 := time.Now()
	g.Expect(v.cmd.Process.Kill()).To(Succeed())
	<-v.done
	before := st.count()
	g.Eventually(st.count, 60*time.Second, 10*time.Millisecond).Should(BeNumerically(">", before+200), func() string { return "the flow resumes without " + victim + ": " + s.diag() })
	gap := st.gapAfter(t0)
	t.Logf("NAT FAILOVER (%s killed, flow %s → %s): interrupted for %v (gateways probed every 50 ms, down after 3 unanswered)", victim, from, to, gap)
	// The plan does not change in this test: only the probes can move the flow, so resuming proves the
	// failover; the bound rules out a path that recovered by slower means. The figure is the measurement.
	g.Expect(gap).To(BeNumerically("<", 5*time.Second))

	restarted := time.Now()
	s.Start(v)
	for _, name := range s.names() {
		if name == victim {
			continue
		}
		g.Eventually(func() ([]string, error) {
			d, err := s.Debug(s.Nodes[name])
			return d.Down, err
		}, 60*time.Second, 200*time.Millisecond).Should(BeEmpty(), "%s sees %s back", name, victim)
	}
	// A restarted userspace device has no sessions and cannot dial its NATed peers: they redial it as soon
	// as their probes fail (instead of WireGuard's own ~15 s retry).
	t.Logf("%s restarted: every peer probes it up again after %v", victim, time.Since(restarted).Round(10*time.Millisecond))
}
