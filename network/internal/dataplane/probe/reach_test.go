package probe

import (
	"context"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

// checkPair starts a node and a checker prober inside namespace ns (loopback) with the node checking its
// reachability with the checker; it returns the node.
func checkPair(t *testing.T, ns string) *Prober {
	t.Helper()
	g := NewWithT(t)
	var node, checker *Prober
	g.Expect(topo.RunIn(ns, func() error {
		var err error
		if node, err = Listen(0, 50*time.Millisecond, 3, func(string, bool) {}); err != nil {
			return err
		}
		checker, err = Listen(0, 50*time.Millisecond, 3, func(string, bool) {})
		return err
	})).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go node.Run(ctx)
	go checker.Run(ctx)
	node.SetCheckers([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:" + portOf(checker))})
	return node
}

// A node nothing filters is Reachable, seen from its own address.
func TestReachabilityCheckFindsAReachableNode(t *testing.T) {
	g := NewWithT(t)
	lab := topo.New(t)
	node := checkPair(t, lab.AddNS("open"))
	g.Eventually(node.Reachability, 10*time.Second, 50*time.Millisecond).Should(Equal(Reachability{
		Inbound: netv1.ReachabilityReachable, Observed: netip.MustParseAddr("127.0.0.1")}))
}

// A node behind a stateful firewall that drops what it did not ask for — what a NAT does — is BehindNAT:
// the checker's answer comes back (it is the reply to the node's own check) but its unsolicited probe from
// another port does not. A node whose checkers never answer gets no verdict.
func TestReachabilityCheckFindsANodeBehindNAT(t *testing.T) {
	g := NewWithT(t)
	lab := topo.New(t)
	ns := lab.AddNS("closed")
	node := checkPair(t, ns)
	_, err := lab.Exec(ns, "iptables", "-w", "-A", "INPUT", "-p", "udp", "--dport", portOf(node), "-m", "conntrack", "--ctstate", "NEW", "-j", "DROP")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(node.Reachability, 20*time.Second, 50*time.Millisecond).Should(HaveField("Inbound", netv1.ReachabilityBehindNAT))
	g.Expect(node.Reachability().Observed).To(Equal(netip.MustParseAddr("127.0.0.1")))

	silent := checkPair(t, lab.AddNS("alone"))
	silent.SetCheckers([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}) // nobody answers there
	g.Consistently(silent.Reachability, 5*time.Second, 100*time.Millisecond).Should(Equal(Reachability{}))
}
