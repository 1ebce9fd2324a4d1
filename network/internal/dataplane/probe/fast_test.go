package probe

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// recordingProber is a prober (interval 200 ms, the threshold given) whose state changes are recorded as
// "<key> up" / "<key> down"; it is closed when the test ends.
func recordingProber(t *testing.T, threshold int) (*Prober, *[]string) {
	t.Helper()
	var events []string
	p, err := Listen(0, 200*time.Millisecond, threshold, func(k string, up bool) {
		events = append(events, k+map[bool]string{true: " up", false: " down"}[up])
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.conn.Close(); _ = p.side.Close() })
	return p, &events
}

// TestFastTargetsFailFastWithoutFlapping drives one prober's ticks and the peers' answers by hand, on a
// made-up clock (interval 200 ms, threshold 3, so fast targets are probed every 50 ms): a fast target (a
// gateway) is down after 3 unanswered probes at the fast cadence, long before the configured detection
// takes a slow target down; a stall of the prober sends nothing and so declares nothing down; a fast
// verdict contradicted by the peer's next answer is a false alarm, after which that peer is judged by the
// configured detection until the hold ends.
func TestFastTargetsFailFastWithoutFlapping(t *testing.T) {
	g := NewWithT(t)
	p, events := recordingProber(t, 3)
	gw, slow := netip.MustParseAddrPort("127.0.0.2:9"), netip.MustParseAddrPort("127.0.0.3:9")
	p.SetTargets([]Target{{Key: "gw", Addr: gw, Fast: true}, {Key: "slow", Addr: slow}})
	base := time.Now()
	at := func(tick int) time.Time { return base.Add(time.Duration(tick) * 50 * time.Millisecond) }
	tick := func(n int) { p.tick(at(n)) }
	// answer answers the probe of tick n (its sequence number) at tick n + 1 ms.
	answer := func(addr netip.AddrPort, n int, seq uint32) {
		p.onReply(header(typeReply, seq, at(n), 0), addr, at(n).Add(time.Millisecond))
	}
	up := func(k string) bool { return p.States()[k].Up }

	for n := 1; n <= 3; n++ {
		tick(n)
		answer(gw, n, p.seq)
		answer(slow, n, p.seq)
	}
	// Both stop answering after tick 3.
	for n := 4; n <= 6; n++ {
		tick(n)
		g.Expect(up("gw")).To(BeTrue(), "tick %d: fewer than 3 fast probes unanswered", n)
	}
	tick(7)
	g.Expect(up("gw")).To(BeFalse(), "3 fast probes unanswered")
	g.Expect(up("slow")).To(BeTrue(), "the slow target is judged by the configured detection")
	for n := 8; n <= 16; n++ {
		tick(n)
	}
	g.Expect(up("slow")).To(BeTrue(), "650 ms without an answer: the configured detection allows 700")
	for n := 17; n <= 18; n++ {
		tick(n)
	}
	g.Expect(up("slow")).To(BeFalse())
	g.Expect(*events).To(Equal([]string{"gw down", "slow down"}))

	// Both come back: a real outage, no false alarm.
	tick(19)
	answer(gw, 19, p.seq)
	answer(slow, 19, p.seq)
	g.Expect(up("gw")).To(BeTrue())
	g.Expect(p.States()["gw"].FalseDowns).To(BeZero())

	// The prober stalls for 500 ms (no tick, so no probe leaves): nothing is down.
	tick(20)
	answer(gw, 20, p.seq)
	tick(30)
	g.Expect(up("gw")).To(BeTrue(), "one probe unanswered after a stall")
	answer(gw, 30, p.seq)

	// A false alarm: the gateway's answers are late. Down after 3 unanswered probes, then the answer to a
	// probe sent before the verdict arrives.
	for n := 31; n <= 34; n++ {
		tick(n)
	}
	g.Expect(up("gw")).To(BeFalse())
	answer(gw, 34, p.seq-1)
	g.Expect(up("gw")).To(BeTrue())
	g.Expect(p.States()["gw"].FalseDowns).To(BeNumerically("==", 1))
	// From now on the configured detection judges it: up through 650 ms without an answer, down after 700.
	for n := 35; n <= 47; n++ {
		tick(n)
		g.Expect(up("gw")).To(BeTrue(), "tick %d: held to the configured detection after a false alarm", n)
	}
	tick(48)
	tick(49)
	g.Expect(up("gw")).To(BeFalse())

	// It stays down until after the hold, then the fast detection applies again.
	after := int(falseDownHold/(50*time.Millisecond)) + 50
	for n := 50; n <= after; n++ {
		tick(n)
	}
	answer(gw, after, p.seq)
	g.Expect(up("gw")).To(BeTrue())
	for n := after + 1; n <= after+3; n++ {
		tick(n)
		g.Expect(up("gw")).To(BeTrue())
	}
	tick(after + 4)
	g.Expect(up("gw")).To(BeFalse(), "3 fast probes unanswered once the hold ended")

	// A second false alarm (it answers the probe sent with the verdict) doubles the hold: 35 s later the
	// configured detection still judges it.
	answer(gw, after+4, p.seq)
	g.Expect(p.States()["gw"].FalseDowns).To(BeNumerically("==", 2))
	later := after + 4 + int(35*time.Second/(50*time.Millisecond))
	for n := after + 5; n <= later; n++ {
		tick(n)
		answer(gw, n, p.seq)
	}
	for n := later + 1; n <= later+13; n++ {
		tick(n)
		g.Expect(up("gw")).To(BeTrue(), "tick %d: the doubled hold has not ended", n)
	}
}

// TestReplyCreditsEveryTargetAtItsAddress: two targets may share an address (one next hop watched under two
// keys); a reply from it is credited to both, and when both were down both come back up and both changes are
// reported. A reply from an address no target has changes nothing.
func TestReplyCreditsEveryTargetAtItsAddress(t *testing.T) {
	g := NewWithT(t)
	p, events := recordingProber(t, 1)
	shared, other := netip.MustParseAddrPort("127.0.0.2:9"), netip.MustParseAddrPort("127.0.0.3:9")
	p.SetTargets([]Target{{Key: "a/vxlan", Addr: shared}, {Key: "a/wireguard", Addr: shared}, {Key: "b", Addr: other}})
	base := time.Now()
	// Nothing answers for longer than the configured detection (1 interval and a half): all three are down.
	p.tick(base.Add(time.Second))
	g.Expect(*events).To(ConsistOf("a/vxlan down", "a/wireguard down", "b down"))
	*events = nil

	// A stranger's reply, then the shared address's: both of its keys are up, b stays down.
	p.onReply(header(typeReply, p.seq, base.Add(time.Second), 0), netip.MustParseAddrPort("127.0.0.4:9"), base.Add(time.Second+time.Millisecond))
	g.Expect(*events).To(BeEmpty())
	// The reply arrives from an IPv4-mapped IPv6 address, as a dual-stack socket reports it.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(shared.Addr().As16()), shared.Port())
	p.onReply(header(typeReply, p.seq, base.Add(time.Second), 0), mapped, base.Add(time.Second+time.Millisecond))
	g.Expect(*events).To(ConsistOf("a/vxlan up", "a/wireguard up"))
	st := p.States()
	g.Expect(st["a/vxlan"].Received).To(BeEquivalentTo(1))
	g.Expect(st["a/wireguard"].Received).To(BeEquivalentTo(1))
	g.Expect(st["b"].Up).To(BeFalse())
	g.Expect(st["b"].Received).To(BeZero())

	// Targets replaced: the old address is no longer credited.
	*events = nil
	p.SetTargets([]Target{{Key: "b", Addr: other}})
	p.onReply(header(typeReply, p.seq, base.Add(time.Second), 0), shared, base.Add(time.Second+2*time.Millisecond))
	g.Expect(*events).To(BeEmpty())
	g.Expect(p.States()).NotTo(HaveKey("a/vxlan"))
}
