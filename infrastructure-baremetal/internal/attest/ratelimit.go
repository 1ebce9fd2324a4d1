package attest

import (
	"container/list"
	"math"
	"net/netip"
	"sync"
	"time"
)

// RateLimit bounds how fast one source address may call the attestation API (start, verify and the
// bootstrap-data endpoint together): a token bucket per address. The defaults let every host of a rack
// that boots at once attest in parallel (each host has its own address and needs three requests), and
// even a few dozen hosts behind one NAT address, while a flood from one address costs the manager at
// most Rate requests a second of RSA work, logging and host lookups.
type RateLimit struct {
	// Rate is the sustained requests per second of one address (default 5). Negative: no limit.
	Rate float64
	// Burst is how many requests one address may send at once before Rate applies (default 30: ten
	// complete attestations).
	Burst int
	// MaxSources is how many addresses are tracked at once (default 16384, about 2 MiB): when full, the
	// address seen least recently is forgotten, so memory stays bounded however many addresses a flood
	// spoofs. A forgotten address starts again with a full bucket.
	MaxSources int
}

// Default rate limit values (RateLimit).
const (
	DefaultRateLimit      = 5
	DefaultRateBurst      = 30
	DefaultRateMaxSources = 16384
)

func (r RateLimit) withDefaults() RateLimit {
	if r.Rate == 0 {
		r.Rate = DefaultRateLimit
	}
	if r.Burst <= 0 {
		r.Burst = DefaultRateBurst
	}
	if r.MaxSources <= 0 {
		r.MaxSources = DefaultRateMaxSources
	}
	return r
}

// limiter is a token bucket per source address in a least-recently-used list of bounded length.
type limiter struct {
	cfg RateLimit
	now func() time.Time

	mu      sync.Mutex
	lru     *list.List // of *bucket, most recently seen first
	buckets map[netip.Addr]*list.Element
}

type bucket struct {
	addr   netip.Addr
	tokens float64
	at     time.Time // when tokens was computed
}

func newLimiter(cfg RateLimit, now func() time.Time) *limiter {
	return &limiter{cfg: cfg.withDefaults(), now: now, lru: list.New(), buckets: map[netip.Addr]*list.Element{}}
}

// allow spends one token of addr's bucket; when there is none it returns false and how long until there
// is one.
func (l *limiter) allow(addr netip.Addr) (bool, time.Duration) {
	if l.cfg.Rate < 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(addr, now)
	b.tokens = math.Min(float64(l.cfg.Burst), b.tokens+now.Sub(b.at).Seconds()*l.cfg.Rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.cfg.Rate * float64(time.Second))
}

// bucket returns addr's bucket, most recently used now, creating a full one (and forgetting the least
// recently used address when MaxSources are tracked); callers hold mu.
func (l *limiter) bucket(addr netip.Addr, now time.Time) *bucket {
	if el, ok := l.buckets[addr]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*bucket)
	}
	if l.lru.Len() >= l.cfg.MaxSources {
		oldest := l.lru.Back()
		l.lru.Remove(oldest)
		delete(l.buckets, oldest.Value.(*bucket).addr)
	}
	b := &bucket{addr: addr, tokens: float64(l.cfg.Burst), at: now}
	l.buckets[addr] = l.lru.PushFront(b)
	return b
}

// tracked is how many addresses the limiter remembers (tests).
func (l *limiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}
