package attest

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The per-address buckets: a burst, then the rate; another address is not affected; memory stays at
// MaxSources however many addresses send (the least recently seen is forgotten and starts afresh).
func TestLimiterBucketsPerAddressBounded(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	l := newLimiter(RateLimit{Rate: 2, Burst: 3, MaxSources: 4}, func() time.Time { return now })
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for range 3 {
		ok, _ := l.allow(a)
		g.Expect(ok).To(BeTrue())
	}
	ok, wait := l.allow(a)
	g.Expect(ok).To(BeFalse())
	g.Expect(wait).To(Equal(500*time.Millisecond), "one token at 2/s")
	ok, _ = l.allow(b)
	g.Expect(ok).To(BeTrue(), "another address has its own bucket")
	now = now.Add(500 * time.Millisecond)
	ok, _ = l.allow(a)
	g.Expect(ok).To(BeTrue(), "refilled at the rate")
	ok, _ = l.allow(a)
	g.Expect(ok).To(BeFalse())

	for i := range 1000 {
		l.allow(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}))
	}
	g.Expect(l.tracked()).To(Equal(4))
	ok, _ = l.allow(a)
	g.Expect(ok).To(BeTrue(), "a forgotten address starts with a full bucket")

	unlimited := newLimiter(RateLimit{Rate: -1}, time.Now)
	for range 1000 {
		ok, _ := unlimited.allow(a)
		g.Expect(ok).To(BeTrue())
	}
	g.Expect(unlimited.tracked()).To(BeZero())
	g.Expect(newLimiter(RateLimit{}, time.Now).cfg).To(Equal(RateLimit{Rate: DefaultRateLimit, Burst: DefaultRateBurst, MaxSources: DefaultRateMaxSources}))
}
