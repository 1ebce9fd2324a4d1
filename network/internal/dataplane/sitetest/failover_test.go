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
func startStream(t *testing.T, ns, addr string) *stream {
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
	st.mu.Lock()
	defer st.mu.Unlock()
	var maxGap time.Duration
	prev := time.Time{}
	for _, a := range st.arrived {
		if a.Before(t0) {
			prev = a
			continue
		}
		if !prev.IsZero() && a.Sub(prev) > maxGap {
			maxGap = a.Sub(prev)
		}
		prev = a
	}
	return maxGap
}

// TestGatewayFailover cuts both links of the gateway carrying a continuous flow and measures how long the flow
// (a1's pod → gateway → remote gateway → b2's pod and back) is interrupted. The probes (200 ms × 3) take the
// gateway out of the eBPF groups and fallback routes of a1 and gb1 without any plan change.
func TestGatewayFailover(t *testing.T) {
	for _, mode := range []string{"links", "daemon"} {
		t.Run(mode, func(t *testing.T) { testGatewayFailover(t, mode) })
	}
}

func testGatewayFailover(t *testing.T, mode string) {
	t.Helper()
	g := NewWithT(t)
	s := NewSites(t, netv1.ProtocolWireGuard)
	a1, b2 := s.Nodes["a1"], s.Nodes["b2"]
	Echo(t, b2.Pod, 7000)
	to := net.JoinHostPort(b2.PodIP.String(), "7000")

	// Both gateways must be healthy on both sides before the flow starts — answered probes on a1 (VXLAN) and
	// gb1 (WireGuard, so the survivor's handshake is done). Until then the flow's path can still change: on a
	// loaded machine a flow started earlier went through a gateway whose tunnel was not up yet and saw no
	// echo at all. The waits below are for convergence, not measurements: they are generous so that a busy
	// machine only makes the test slower, never red.
	for _, n := range []*Node{a1, s.Nodes["gb1"]} {
		g.Eventually(func(g Gomega) {
			d, err := s.Debug(n)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Down).To(BeEmpty())
			g.Expect(d.Probes).NotTo(BeEmpty())
			for peer, p := range d.Probes {
				g.Expect(p.Up).To(BeTrue(), "%s probes %s", n.Name, peer)
				g.Expect(p.Received).To(BeNumerically(">", 0), "%s probes %s", n.Name, peer)
			}
		}, 60*time.Second, 100*time.Millisecond).Should(Succeed())
	}
	g.Eventually(func() error { return udpRoundTrip(a1.Pod, to, 100) }, 60*time.Second, 100*time.Millisecond).Should(Succeed())

	st := startStream(t, a1.Pod, to)
	defer func() { close(st.stop); st.done.Wait() }()
	g.Eventually(st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", 100))

	// Which gateway carries the flow out of site a?
	tx1, tx2 := txPackets(s, s.Nodes["ga1"], "yonder-vw"), txPackets(s, s.Nodes["ga2"], "yonder-vw")
	n0 := st.count()
	g.Eventually(st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", n0+100))
	d1, d2 := txPackets(s, s.Nodes["ga1"], "yonder-vw")-tx1, txPackets(s, s.Nodes["ga2"], "yonder-vw")-tx2
	victim, survivor := s.Nodes["ga1"], s.Nodes["ga2"]
	if d2 > d1 {
		victim, survivor = survivor, victim
	}
	t.Logf("flow leaves site a through %s (vw tx +%d / +%d)", victim.Name, d1, d2)

	t0 := time.Now()
	if mode == "links" {
		s.Lab.MustIP(victim.NS, "link", "set", "eth0", "down")
		s.Lab.MustIP(victim.NS, "link", "set", "eth1", "down")
	} else {
		g.Expect(victim.cmd.Process.Kill()).To(Succeed()) // SIGKILL: no clean shutdown
		<-victim.done
	}
	before := st.count()
	g.Eventually(st.count, 30*time.Second, 10*time.Millisecond).Should(BeNumerically(">", before+200), "the flow resumes through %s", survivor.Name)
	gap := st.gapAfter(t0)
	t.Logf("FAILOVER (%s): flow interrupted for %v (probe 200ms x 3)", mode, gap)
	// Without the probes nothing would move the flow (the plan does not change in this test), so resuming at
	// all proves the failover; the bound only rules out a path that recovered by some slower means. The loss
	// window itself is a figure for the benchmarks, not an assertion.
	g.Expect(gap).To(BeNumerically("<", 5*time.Second))

	for _, n := range []*Node{a1, s.Nodes["gb1"]} {
		d, err := s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Down).To(ContainElement(victim.Name + "/" + map[bool]string{true: "vxlan", false: "wireguard"}[n == a1]))
		g.Expect(d.Failovers).To(BeNumerically(">=", 1))
	}

	// The gateway comes back: probes bring it back into the groups.
	if mode == "links" {
		s.Lab.MustIP(victim.NS, "link", "set", "eth0", "up")
		s.Lab.MustIP(victim.NS, "link", "set", "eth1", "up")
	} else {
		s.Start(victim)
	}
	g.Eventually(func() ([]string, error) {
		d, err := s.Debug(a1)
		return d.Down, err
	}, 10*time.Second, 100*time.Millisecond).Should(BeEmpty())
}
