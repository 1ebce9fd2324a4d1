package sitetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/wait"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// seqStream sends a numbered datagram every interval and records which numbers come back, so a loss is
// counted exactly (a packet in flight when the sender stops is not one).
type seqStream struct {
	mu       sync.Mutex
	sent     uint64
	sentAt   []time.Time
	got      map[uint64]time.Time
	stopSend chan struct{}
	stopRecv chan struct{}
	done     sync.WaitGroup
}

func startSeqStream(t *testing.T, ns, addr string, every time.Duration) *seqStream {
	t.Helper()
	c, err := Dial(ns, "udp4", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st := &seqStream{got: map[uint64]time.Time{}, stopSend: make(chan struct{}), stopRecv: make(chan struct{})}
	st.done.Add(2)
	go func() {
		defer st.done.Done()
		defer func() { _ = c.Close() }()
		buf := make([]byte, 64)
		for {
			select {
			case <-st.stopRecv:
				return
			default:
			}
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if n, err := c.Read(buf); err == nil && n >= 8 {
				st.mu.Lock()
				st.got[binary.BigEndian.Uint64(buf)] = time.Now()
				st.mu.Unlock()
			}
		}
	}()
	go func() {
		defer st.done.Done()
		tk := time.NewTicker(every)
		defer tk.Stop()
		b := make([]byte, 64)
		for i := uint64(0); ; i++ {
			select {
			case <-st.stopSend:
				return
			case <-tk.C:
			}
			binary.BigEndian.PutUint64(b, i)
			_, _ = c.Write(b)
			st.mu.Lock()
			st.sent = i + 1
			st.sentAt = append(st.sentAt, time.Now())
			st.mu.Unlock()
		}
	}()
	return st
}

func (st *seqStream) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.got)
}

// finish stops sending, waits for the echoes in flight, and returns sent, lost and the send times of the
// missing numbers.
func (st *seqStream) finish() (uint64, uint64, []string) {
	close(st.stopSend)
	// Echoes still in flight get up to 500 ms; a lost datagram never arrives, so the wait ends there.
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return uint64(len(st.got)) >= st.sent, nil
	})
	close(st.stopRecv)
	st.done.Wait()
	var missing []string
	for i := uint64(0); i < st.sent; i++ {
		if _, ok := st.got[i]; !ok {
			missing = append(missing, fmt.Sprintf("#%d sent %s", i, st.sentAt[i].Format("15:04:05.000")))
		}
	}
	return st.sent, uint64(len(missing)), missing
}

// TestKeyRotationLosesNothing: a continuous UDP flow (one datagram every 2 ms, echoed) crosses the WireGuard
// link a1 → ga1|ga2 → gb1 → b2 while gb1 rotates its key twice (slot 0 → 1 → 0) and then both site-a
// gateways rotate at once. The test plays the controller (it copies the publications into the plans). No
// datagram may be lost.
func TestKeyRotationLosesNothing(t *testing.T) {
	g := NewWithT(t)
	s := NewSites(t, netv1.ProtocolWireGuard)
	a1, b2, ga1, ga2, gb1 := s.Nodes["a1"], s.Nodes["b2"], s.Nodes["ga1"], s.Nodes["ga2"], s.Nodes["gb1"]
	Echo(t, b2.Pod, 7000)
	diag := func() string {
		out := ""
		for _, n := range []*Node{ga1, ga2, gb1} {
			st, err := s.Debug(n)
			out += fmt.Sprintf("--- %s: %+v %v\n%s\n", n.Name, st.WireGuard, err, n.Log())
		}
		return out
	}
	to := net.JoinHostPort(b2.PodIP.String(), "7000")
	g.Eventually(func() error { return udpRoundTrip(a1.Pod, to, 100) }, 20*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
	// Both site-a gateways have handshaken with gb1 (either may carry the flow).
	g.Eventually(func(g Gomega) {
		d, err := s.Debug(gb1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.WireGuard.Peers).To(HaveLen(2))
		for _, p := range d.WireGuard.Peers {
			g.Expect(p.HandshakeAge).To(BeNumerically(">=", 0))
		}
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed(), diag)

	dropsBefore, err := s.drops()
	g.Expect(err).NotTo(HaveOccurred())
	st := startSeqStream(t, a1.Pod, to, 2*time.Millisecond)
	g.Eventually(st.count, 5*time.Second).Should(BeNumerically(">", 100))

	gateways := []*Node{ga1, ga2, gb1}
	rotate := func(nodes ...*Node) { rotateKeys(t, s, diag, gateways, nodes...) }
	rotate(gb1)
	g.Expect(gb1.Slot).To(Equal(int32(1)))
	// In slot 1 gb1's WireGuard address is its pod CIDR's last address but one, on the slot-1 device only
	// (the pod bridge keeps the second address: the same address on both was the old slot 1).
	s1, err := desired.SlotAddr(gb1.PodCIDR, 1)
	g.Expect(err).NotTo(HaveOccurred())
	addrs, err := s.Lab.Exec(gb1.NS, "ip", "-o", "-4", "addr", "show")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(addrs).To(MatchRegexp(`(?m)^\d+: %s\s+inet %s/32 `, daemon.SlotDevice(s.Lab.Prefix+gb1.Name, 1), s1), addrs)
	g.Expect(strings.Count(addrs, " "+s1.String()+"/")).To(Equal(1), addrs)
	g.Expect(addrs).To(MatchRegexp(`(?m)^\d+: br0\s+inet %s/`, gb1.PodCIDR.Addr().Next()), addrs)
	rotate(gb1)
	g.Expect(gb1.Slot).To(Equal(int32(0)))
	rotate(ga1, ga2)

	sent, lost, missing := st.finish()
	dropsAfter, err := s.drops()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("continuous flow: %d datagrams sent, %d lost %v; kernel drop counters that grew: %v", sent, lost, missing, dropsAfter.since(dropsBefore))
	g.Expect(sent).To(BeNumerically(">", 1000))
	g.Expect(lost).To(BeZero(), diag)
	// The flow still works after the rotations.
	g.Expect(udpRoundTrip(a1.Pod, to, 1000)).To(Succeed())
}

// rotateKeys rotates the keys of nodes at once and plays the controller until each has switched, drained
// and removed its previous slot, and every one of peers has removed the old keys.
func rotateKeys(t *testing.T, s *Sites, diag func() string, peers []*Node, nodes ...*Node) {
	t.Helper()
	g := NewWithT(t)
	old := map[string]string{}
	for _, n := range nodes {
		old[n.Name] = n.PubKey
		_, err := s.Lab.Exec(n.NS, s.bin, "rotate")
		g.Expect(err).NotTo(HaveOccurred())
	}
	start := time.Now()
	t.Logf("rotation of %d node(s) started at %s", len(nodes), start.Format("15:04:05.000"))
	// The controller's part: publications → plans, until every rotating node has switched.
	g.Eventually(func() bool {
		s.Republish()
		for _, n := range nodes {
			if n.PubKey == old[n.Name] || n.NextKey != "" {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond).Should(BeTrue(), diag)
	switched := time.Since(start)
	// Peers moved to the new slot; the previous slot drains and is removed.
	for _, n := range nodes {
		g.Eventually(func(g Gomega) {
			d, err := s.Debug(n)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.WireGuard.Rotation).To(BeEmpty())
			g.Expect(d.WireGuard.OtherDevice).To(BeEmpty())
			g.Expect(d.PublicKey).To(Equal(n.PubKey))
			g.Expect(d.WireGuard.Slot).To(Equal(int(n.Slot)))
		}, 60*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
	}
	// The peers removed the old keys too (PeerRetireDelay after they stopped routing to them).
	for _, m := range peers {
		g.Eventually(func(g Gomega) {
			d, err := s.Debug(m)
			g.Expect(err).NotTo(HaveOccurred())
			for _, p := range d.WireGuard.Peers {
				for _, n := range nodes {
					g.Expect(p.PublicKey).NotTo(Equal(old[n.Name]), "%s still has %s's old key", m.Name, n.Name)
				}
			}
		}, 60*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
	}
	t.Logf("rotated %d node(s): switched after %v, old slot removed after %v", len(nodes), switched.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
