package sitetest

import (
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/benchsize"
)

// BenchmarkGatewayFailover measures the loss window of a gateway failover: a continuous UDP echo flow
// (failoverLab: a1's pod → b2's pod, one datagram every 2 ms) leaves site a through one of two gateways;
// both links of that gateway go down, and the loss window is the longest gap in the echoes until the flow
// runs through the other gateway. Each failover is undone (links up, the gateway probed healthy again on
// both sides) before the next. The baseline is the same flow's longest gap over a quiet stretch just
// before each failure (~0.5 s, nothing failing): what the flow loses on this machine anyway.
func BenchmarkGatewayFailover(b *testing.B) {
	g := NewWithT(b)
	f := newFailoverLab(b)
	perOp := benchsize.Pick(5, 1)
	var windows []time.Duration
	var quiet time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range perOp {
			victim, survivor, q := f.carrier(g)
			quiet = max(quiet, q)
			w := f.failOver(g, victim, survivor, "links")
			windows = append(windows, w)
			b.Logf("failover %d: %s → %s, loss window %v (quiet gap before it %v)", len(windows), victim.Name, survivor.Name, w, q)
			f.restore(victim, "links")
			f.waitHealthy(g, false)
			// The flow moves back to its gateway; let it run a while before the next quiet stretch.
			n := f.st.count()
			g.Eventually(f.st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", n+250))
		}
	}
	b.StopTimer()
	slices.Sort(windows)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	worst := ms(windows[len(windows)-1])
	b.ReportMetric(worst, "ms-loss-window")
	b.ReportMetric(ms(quiet), "baseline-ms-loss-window")
	b.ReportMetric(worst/max(ms(quiet), 1e-3), "x-baseline")
	b.ReportMetric(ms(windows[len(windows)/2]), "p50-ms-loss-window")
	b.ReportMetric(ms(windows[0]), "min-ms-loss-window")
	b.ReportMetric(float64(len(windows)), "failovers")
}
