package probe

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestDetectsLossAndRecovery runs two probers on loopback: b answers a; when b stops, a declares it down
// within about threshold × interval, and up again as soon as b answers.
func TestDetectsLossAndRecovery(t *testing.T) {
	g := NewWithT(t)
	var mu sync.Mutex
	var events []bool
	var downAt time.Time
	a, err := Listen(0, 50*time.Millisecond, 3, func(_ string, up bool) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, up)
		if !up {
			downAt = time.Now()
		}
	})
	g.Expect(err).NotTo(HaveOccurred())
	b, err := Listen(0, 50*time.Millisecond, 3, func(string, bool) {})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bctx, bcancel := context.WithCancel(ctx)
	go a.Run(ctx)
	go b.Run(bctx)
	target := netip.MustParseAddrPort("127.0.0.1:" + portOf(b))
	a.SetTargets([]Target{{Key: "b", Addr: target}})
	g.Eventually(func() uint64 { return a.States()["b"].Received }, 5*time.Second).Should(BeNumerically(">=", 3))
	g.Expect(a.States()["b"].LastRTT).To(BeNumerically(">", 0))

	stopped := time.Now()
	bcancel()
	g.Eventually(func() bool { return a.States()["b"].Up }, 5*time.Second, 10*time.Millisecond).Should(BeFalse())
	mu.Lock()
	detect := downAt.Sub(stopped)
	mu.Unlock()
	t.Logf("detected after %v (interval 50ms × 3)", detect)

	// b comes back on the same port.
	b2, err := Listen(int(target.Port()), 50*time.Millisecond, 3, func(string, bool) {})
	g.Expect(err).NotTo(HaveOccurred())
	go b2.Run(ctx)
	g.Eventually(func() bool { return a.States()["b"].Up }, 5*time.Second, 10*time.Millisecond).Should(BeTrue())
	mu.Lock()
	g.Expect(events).To(Equal([]bool{false, true}))
	mu.Unlock()
}

func portOf(p *Prober) string {
	a := p.conn.LocalAddr().String()
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			return a[i+1:]
		}
	}
	return a
}
