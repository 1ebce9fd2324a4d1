package sitetest

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// BenchmarkLinkKinds measures single-stream iperf3 throughput and ping latency over each kind of link,
// next to a Direct link and plain veth in the same run, on one NATSites topology (embedded wireguard-go on
// this kernel, VXLAN inside WireGuard everywhere):
//
//   - Direct: q1's pod → p1's pod (both Sites reachable);
//   - NAT-initiated: n1's pod → p1's pod (n1 behind NAT dialled p's gateways);
//   - Relayed: n1's pod → m1's pod, through one of p's relay gateways (two WireGuard hops).
func BenchmarkLinkKinds(b *testing.B) {
	s := NewNATSites(b)
	lab := s.Lab
	v1, v2 := vethBaseline(lab)
	q1, n1, m1, p1 := s.Nodes["q1"], s.Nodes["n1"], s.Nodes["m1"], s.Nodes["p1"]
	deadline := time.Now().Add(60 * time.Second)
	NewWithT(b).Eventually(func(g Gomega) {
		l := s.Link("m", "n")
		g.Expect(l.Kind).To(Equal(netv1.LinkKindRelayed), "m↔n %+v", l)
		g.Expect(l.Up).To(BeTrue(), "m↔n %+v", l)
		g.Expect(s.Link("n", "p").Kind).To(Equal(netv1.LinkKindNATInitiated))
		g.Expect(s.Link("p", "q").Kind).To(Equal(netv1.LinkKindDirect))
	}, time.Until(deadline), 100*time.Millisecond).Should(Succeed(), "the link kinds did not converge")
	waitPaths(b, lab, deadline, [][2]*Node{{q1, p1}, {n1, p1}, {n1, m1}})
	var veth, direct, nat, relay, vethRTT, directRTT, natRTT, relayRTT, directCPU, natCPU, relayCPU float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, _ := iperf(b, lab, v1, v2, "10.99.0.2", 5201)
		veth += g
		g, c := iperf(b, lab, q1.Pod, p1.Pod, p1.PodIP.String(), 5201)
		direct, directCPU = direct+g, directCPU+c
		g, c = iperf(b, lab, n1.Pod, p1.Pod, p1.PodIP.String(), 5201)
		nat, natCPU = nat+g, natCPU+c
		g, c = iperf(b, lab, n1.Pod, m1.Pod, m1.PodIP.String(), 5201)
		relay, relayCPU = relay+g, relayCPU+c
		vethRTT += rtt(b, lab, v1, "10.99.0.2")
		directRTT += rtt(b, lab, q1.Pod, p1.PodIP.String())
		natRTT += rtt(b, lab, n1.Pod, p1.PodIP.String())
		relayRTT += rtt(b, lab, n1.Pod, m1.PodIP.String())
	}
	n := float64(b.N)
	b.ReportMetric(veth/n, "veth-Gbit/s")
	b.ReportMetric(direct/n, "direct-Gbit/s")
	b.ReportMetric(nat/n, "nat-initiated-Gbit/s")
	b.ReportMetric(relay/n, "relayed-Gbit/s")
	b.ReportMetric(direct/veth, "direct-x-veth")
	b.ReportMetric(nat/direct, "nat-initiated-x-direct")
	b.ReportMetric(relay/direct, "relayed-x-direct")
	b.ReportMetric((directRTT-vethRTT)/n, "direct-added-µs")
	b.ReportMetric((natRTT-vethRTT)/n, "nat-initiated-added-µs")
	b.ReportMetric((relayRTT-vethRTT)/n, "relayed-added-µs")
	b.ReportMetric(directCPU/n, "direct-cpu%/Gbit")
	b.ReportMetric(natCPU/n, "nat-initiated-cpu%/Gbit")
	b.ReportMetric(relayCPU/n, "relayed-cpu%/Gbit")
}
