package sitetest

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/prometheus"
)

func txPackets(s *Sites, n *Node, dev string) uint64 {
	out, err := s.Lab.Exec(n.NS, "ip", "-j", "-s", "link", "show", dev)
	if err != nil {
		return 0
	}
	var v []struct {
		Stats struct {
			TX struct {
				Packets uint64 `json:"packets"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal([]byte(out), &v) != nil || len(v) == 0 {
		return 0
	}
	return v[0].Stats.TX.Packets
}

// stream is a continuous UDP echo flow (one 5-tuple) that records when each echo came back.
type stream struct {
	mu      sync.Mutex
	arrived []time.Time
	sent    int
	stop    chan struct{}
	done    sync.WaitGroup
}

// streamInterval is how often a stream sends; the gaps in its echoes time an outage.
const streamInterval = 2 * time.Millisecond

// startStream starts a stream from namespace ns to addr, one datagram every streamInterval.
func startStream(t testing.TB, ns, addr string) *stream {
	t.Helper()
	c, err := Dial(ns, "udp4", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{stop: make(chan struct{})}
	st.done.Add(2)
	go func() {
		defer st.done.Done()
		buf := make([]byte, 64)
		for {
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Read(buf); err == nil {
				st.mu.Lock()
				st.arrived = append(st.arrived, time.Now())
				st.mu.Unlock()
			}
			select {
			case <-st.stop:
				return
			default:
			}
		}
	}()
	go func() {
		defer st.done.Done()
		defer func() { _ = c.Close() }()
		t := time.NewTicker(streamInterval)
		defer t.Stop()
		b := make([]byte, 64)
		for i := uint64(0); ; i++ {
			select {
			case <-st.stop:
				return
			case <-t.C:
			}
			binary.BigEndian.PutUint64(b, i)
			_, _ = c.Write(b)
			st.mu.Lock()
			st.sent++
			st.mu.Unlock()
		}
	}()
	return st
}

func (st *stream) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.arrived)
}

// gapAfter is the longest time without an echo after t0 (until the last echo).
func (st *stream) gapAfter(t0 time.Time) time.Duration {
	return st.gapBetween(t0, time.Time{})
}

// gapBetween is the longest time without an echo from t0 to t1 (zero: until the last echo); the gap that
// spans t0 counts from the echo before it.
func (st *stream) gapBetween(t0, t1 time.Time) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	var maxGap time.Duration
	prev := time.Time{}
	for _, a := range st.arrived {
		if a.Before(t0) {
			prev = a
			continue
		}
		if !t1.IsZero() && a.After(t1) {
			break
		}
		if !prev.IsZero() && a.Sub(prev) > maxGap {
			maxGap = a.Sub(prev)
		}
		prev = a
	}
	return maxGap
}

// close stops the stream and waits for its goroutines.
func (st *stream) close() {
	close(st.stop)
	st.done.Wait()
}

// failoverLab is a two-site lab (NewSites, WireGuard between the Sites) carrying a continuous UDP echo flow
// from a1's pod to b2's pod, out of site a through one of its two gateways: what TestGatewayFailover and
// BenchmarkGatewayFailover fail over.
type failoverLab struct {
	s  *Sites
	a1 *Node
	st *stream
}

// newFailoverLab builds the lab, waits until every gateway is probed healthy and starts the flow.
func newFailoverLab(t testing.TB) *failoverLab {
	t.Helper()
	g := NewWithT(t)
	s := NewSites(t, netv1.ProtocolWireGuard)
	f := &failoverLab{s: s, a1: s.Nodes["a1"]}
	b2 := s.Nodes["b2"]
	Echo(t, b2.Pod, 7000)
	to := net.JoinHostPort(b2.PodIP.String(), "7000")
	f.waitHealthy(g, true)
	g.Eventually(func() error { return udpRoundTrip(f.a1.Pod, to, 100) }, 60*time.Second, 100*time.Millisecond).Should(Succeed())
	f.st = startStream(t, f.a1.Pod, to)
	t.Cleanup(f.st.close)
	g.Eventually(f.st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", 100))
	return f
}

// waitHealthy waits until both gateways are up on both sides — probes answered on a1 (VXLAN) and gb1
// (WireGuard, so the survivor's handshake is done); answered requires every probe state to have received
// one (a fresh lab). Until then the flow's path can still change: on a loaded machine a flow started earlier
// went through a gateway whose tunnel was not up yet and saw no echo at all. The waits are for convergence,
// not measurements: they are generous so that a busy machine only makes a test slower, never red.
func (f *failoverLab) waitHealthy(g Gomega, answered bool) {
	for _, n := range []*Node{f.a1, f.s.Nodes["gb1"]} {
		g.Eventually(func(g Gomega) {
			d, err := f.s.Debug(n)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Down).To(BeEmpty())
			g.Expect(d.Probes).NotTo(BeEmpty())
			for peer, p := range d.Probes {
				g.Expect(p.Up).To(BeTrue(), "%s probes %s", n.Name, peer)
				if answered {
					g.Expect(p.Received).To(BeNumerically(">", 0), "%s probes %s", n.Name, peer)
				}
			}
		}, 60*time.Second, 100*time.Millisecond).Should(Succeed())
	}
}

// carrier finds the gateway that carries the flow out of site a (by the WireGuard-side VXLAN device's
// transmitted packets while the flow runs) and the other one; quiet is the longest gap in the echoes while
// it watched (nothing failed meanwhile: the flow's own jitter).
func (f *failoverLab) carrier(g Gomega) (victim, survivor *Node, quiet time.Duration) {
	ga1, ga2 := f.s.Nodes["ga1"], f.s.Nodes["ga2"]
	tx1, tx2 := txPackets(f.s, ga1, "yonder-vw"), txPackets(f.s, ga2, "yonder-vw")
	from, n0 := time.Now(), f.st.count()
	g.Eventually(f.st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", n0+250))
	quiet = f.st.gapBetween(from, time.Now())
	d1, d2 := txPackets(f.s, ga1, "yonder-vw")-tx1, txPackets(f.s, ga2, "yonder-vw")-tx2
	victim, survivor = ga1, ga2
	if d2 > d1 {
		victim, survivor = survivor, victim
	}
	return victim, survivor, quiet
}

// failOver fails victim (mode "links": both its links down; "daemon": its daemon SIGKILLed), waits until
// the flow resumes through the survivor and returns the loss window: the longest gap in the echoes from
// the failure until then.
func (f *failoverLab) failOver(g Gomega, victim, survivor *Node, mode string) time.Duration {
	t0 := time.Now()
	if mode == "links" {
		f.s.Lab.MustIP(victim.NS, "link", "set", "eth0", "down")
		f.s.Lab.MustIP(victim.NS, "link", "set", "eth1", "down")
	} else {
		g.Expect(victim.cmd.Process.Kill()).To(Succeed()) // SIGKILL: no clean shutdown
		<-victim.done
	}
	before := f.st.count()
	g.Eventually(f.st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", before+200), "the flow resumes through %s", survivor.Name)
	return f.st.gapBetween(t0, time.Now())
}

// restore brings the failed gateway back (links up, or its daemon started again).
func (f *failoverLab) restore(victim *Node, mode string) {
	if mode == "links" {
		f.s.Lab.MustIP(victim.NS, "link", "set", "eth0", "up")
		f.s.Lab.MustIP(victim.NS, "link", "set", "eth1", "up")
	} else {
		f.s.Start(victim)
	}
}

// TestGatewayFailover cuts both links of the gateway carrying a continuous flow, or kills its daemon, and
// measures how long the flow (a1's pod → gateway → remote gateway → b2's pod and back) is interrupted. The
// probes take the gateway out of the eBPF groups and fallback routes of a1 and gb1 without any plan change.
//
// A real Prometheus scrapes the daemons of a1 and gb1 throughout: the failover moves their
// yonder_net_failovers_total and their yonder_net_probe_up for the failed gateway, as an operator's
// dashboard would show it.
func TestGatewayFailover(t *testing.T) {
	prom := startPrometheus(t)
	for _, mode := range []string{"links", "daemon"} {
		t.Run(mode, func(t *testing.T) { testGatewayFailover(t, prom, mode) })
	}
}

func testGatewayFailover(t *testing.T, prom *prometheus.Prometheus, mode string) {
	t.Helper()
	g := NewWithT(t)
	f := newFailoverLab(t)
	scraped := f.scrape(t, prom, mode)
	victim, survivor, _ := f.carrier(g)
	t.Logf("flow leaves site a through %s", victim.Name)
	before := scraped.failovers(t)
	gap := f.failOver(g, victim, survivor, mode)
	t.Logf("FAILOVER (%s): flow interrupted for %v", mode, gap)
	// Without the probes nothing would move the flow (the plan does not change in this test), so resuming at
	// all proves the failover; the bound only rules out a path that recovered by some slower means. The loss
	// window itself is a figure for the benchmarks (BenchmarkGatewayFailover), not an assertion.
	g.Expect(gap).To(BeNumerically("<", 5*time.Second))

	for _, n := range []*Node{f.a1, f.s.Nodes["gb1"]} {
		d, err := f.s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Down).To(ContainElement(f.probeKey(n, victim)))
		g.Expect(d.Failovers).To(BeNumerically(">=", 1))
	}
	scraped.expectFailedOver(t, before, victim)

	// The gateway comes back: probes bring it back into the groups.
	f.restore(victim, mode)
	g.Eventually(func() ([]string, error) {
		d, err := f.s.Debug(f.a1)
		return d.Down, err
	}, 10*time.Second, 100*time.Millisecond).Should(BeEmpty())
	scraped.expectBackUp(t, victim)
}

// probeKey is how node n's daemon names its probes of gateway gw: a1 reaches site a's gateways over VXLAN,
// gb1 over WireGuard.
func (f *failoverLab) probeKey(n, gw *Node) string {
	if n == f.a1 {
		return gw.Name + "/vxlan"
	}
	return gw.Name + "/wireguard"
}
