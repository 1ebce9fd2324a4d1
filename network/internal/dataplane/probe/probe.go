// Package probe runs BFD-style UDP health probes: every daemon answers echo requests on its probe port and
// sends one to each monitored peer every interval; a peer that misses `threshold` consecutive intervals is
// down, one answer brings it back. State changes are reported at once, without waiting for the API.
//
// Fast targets (gateways: members of a group that traffic can move away from) are probed fastDivisor times
// per interval and are down after `threshold` consecutive probes at that cadence went unanswered, so a
// gateway failure is detected in a quarter of the configured time. Counting unanswered probes rather than
// elapsed time keeps a stall of this process (a loaded machine) from declaring anything down: no probe
// leaves while it stalls. A fast verdict that the peer's next answer contradicts at once — it answers a probe
// sent before the verdict (it was slow, not gone) or one of the two sent right after it (a few probes lost in
// a row) — was a false alarm; that peer is then judged by the configured detection alone for falseDownHold,
// doubled for each further false alarm up to maxFalseDownHold, so a peer whose answers are merely slow or
// lossy cannot flap faster than the configured detection lets it.
package probe

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

const magic = 0x59505242 // "YPRB"

// Message types (byte 4 of every datagram).
const (
	typeRequest = iota
	typeReply
	typeCheck      // reachability check request (reach.go)
	typeCheckReply // its answer: the address the request came from
	typeReach      // the unsolicited probe a check asks for, sent from another port
)

// Fast-path timing (see the package comment).
const (
	// fastDivisor is how many probes a fast target gets per interval.
	fastDivisor = 4
	// minFastInterval bounds the fast cadence from below (the API allows intervals down to 20 ms).
	minFastInterval = 20 * time.Millisecond
	// falseDownHold is how long a fast target that was declared down by mistake is judged by the configured
	// detection only; each further false alarm doubles it, up to maxFalseDownHold.
	falseDownHold    = 30 * time.Second
	maxFalseDownHold = 10 * time.Minute
)

// Target is one peer to monitor.
type Target struct {
	Key  string
	Addr netip.AddrPort
	// Fast probes the target fastDivisor times per interval and declares it down after threshold of those
	// probes went unanswered (gateways, whose failure moves traffic).
	Fast bool
}

// PeerState is a target's health.
type PeerState struct {
	Up       bool
	Sent     uint64
	Received uint64
	LastRTT  time.Duration
	Changes  uint64
	// FalseDowns counts fast verdicts that the peer's next answer proved wrong (see the package comment).
	FalseDowns uint64
	lastSeen   time.Time
	started    time.Time
	// unanswered is how many probes left since the last answer; nextSend when the next one is due;
	// downSeq the sequence number of the probes sent when the peer was declared down; slowUntil the end of
	// a false alarm's hold.
	unanswered int
	nextSend   time.Time
	downSeq    uint32
	slowUntil  time.Time
}

// Prober sends probes from one socket and answers probes arriving on it.
type Prober struct {
	conn *net.UDPConn
	// side sends the unsolicited reach probes of reachability checks: its port is not the probe port, so
	// a NAT's mapping for this node's own probes does not let them through.
	side      *net.UDPConn
	interval  time.Duration
	threshold int
	onChange  func(key string, up bool)

	mu      sync.Mutex
	retime  chan time.Duration
	fast    bool // some target is fast: tick at the fast cadence
	targets map[string]Target
	// byAddr indexes the targets' keys by address, so that a reply finds its targets at once: a gateway
	// probing every gateway of 200 sites receives thousands of replies a second.
	byAddr map[netip.Addr][]string
	state  map[string]*PeerState
	seq    uint32
	reach  reachState
}

// Listen opens the probe socket on port (all addresses).
func Listen(port int, interval time.Duration, threshold int, onChange func(key string, up bool)) (*Prober, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
	if err != nil {
		return nil, fmt.Errorf("failed to listen for probes on port %d: %w", port, err)
	}
	side, err := net.ListenUDP("udp4", &net.UDPAddr{})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("failed to open the reachability probe socket: %w", err)
	}
	if threshold < 1 {
		threshold = 1
	}
	return &Prober{conn: c, side: side, interval: interval, threshold: threshold, onChange: onChange, retime: make(chan time.Duration, 1),
		targets: map[string]Target{}, byAddr: map[netip.Addr][]string{}, state: map[string]*PeerState{}}, nil
}

// SetTargets replaces the monitored set; new targets start up (so a fresh start does not flap everything
// down) and are declared down only after missing threshold intervals.
func (p *Prober) SetTargets(ts []Target) {
	p.mu.Lock()
	next := map[string]Target{}
	byAddr := map[netip.Addr][]string{}
	fast := false
	for _, t := range ts {
		if _, dup := next[t.Key]; !dup {
			a := t.Addr.Addr().Unmap()
			byAddr[a] = append(byAddr[a], t.Key)
		}
		next[t.Key] = t
		fast = fast || t.Fast
		if _, ok := p.state[t.Key]; !ok {
			p.state[t.Key] = &PeerState{Up: true, started: time.Now(), lastSeen: time.Now()}
		}
	}
	for k := range p.state {
		if _, ok := next[k]; !ok {
			delete(p.state, k)
		}
	}
	p.targets, p.byAddr = next, byAddr
	changed := p.fast != fast
	p.fast = fast
	p.mu.Unlock()
	if changed {
		p.kickRetime()
	}
}

// tickInterval is how often Run ticks: the fast cadence while any target is fast. p.mu must be held.
func (p *Prober) tickInterval() time.Duration {
	if !p.fast {
		return p.interval
	}
	return fastInterval(p.interval)
}

// fastInterval is a fast target's probe interval for a configured interval.
func fastInterval(iv time.Duration) time.Duration {
	return min(iv, max(iv/fastDivisor, minFastInterval))
}

// kickRetime makes Run pick up a new tick interval.
func (p *Prober) kickRetime() {
	p.mu.Lock()
	iv := p.tickInterval()
	p.mu.Unlock()
	select {
	case p.retime <- iv:
	default:
		// One is pending; Run reads the current interval when it takes it.
	}
}

// SetTiming changes the probe interval and failure threshold (from the Site's healthProbe settings).
func (p *Prober) SetTiming(interval time.Duration, threshold int) {
	if threshold < 1 {
		threshold = 1
	}
	p.mu.Lock()
	changed := p.interval != interval
	p.interval, p.threshold = interval, threshold
	p.mu.Unlock()
	if changed {
		p.kickRetime()
	}
}

// States returns a copy of every target's state.
func (p *Prober) States() map[string]PeerState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]PeerState{}
	for k, s := range p.state {
		out[k] = *s
	}
	return out
}

// Run sends and answers probes until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	go p.read()
	// SetTiming may run concurrently (the daemon's first plan arrives while Run starts).
	p.mu.Lock()
	iv := p.tickInterval()
	p.mu.Unlock()
	t := time.NewTicker(iv)
	defer t.Stop()
	checks := time.NewTicker(checkTick)
	defer checks.Stop()
	go func() { <-ctx.Done(); _ = p.conn.Close(); _ = p.side.Close() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.retime:
			p.mu.Lock()
			iv := p.tickInterval()
			p.mu.Unlock()
			t.Reset(iv)
		case now := <-t.C:
			p.tick(now)
		case now := <-checks.C:
			p.checkRound(now)
		}
	}
}

func (p *Prober) tick(now time.Time) {
	type change struct {
		key string
		up  bool
	}
	var changes []change
	p.mu.Lock()
	p.seq++
	for k, t := range p.targets {
		s := p.state[k]
		if s.Up && p.lost(t, s, now) {
			s.Up = false
			s.Changes++
			s.downSeq = p.seq
			changes = append(changes, change{k, false})
		}
		if now.Before(s.nextSend) {
			continue
		}
		_, _ = p.conn.WriteToUDPAddrPort(header(typeRequest, p.seq, now, 0), t.Addr)
		s.Sent++
		s.unanswered++
		s.nextSend = p.next(t, now)
	}
	p.mu.Unlock()
	for _, c := range changes {
		p.onChange(c.key, c.up)
	}
}

// lost reports whether an up target is down at now. p.mu must be held.
func (p *Prober) lost(t Target, s *PeerState, now time.Time) bool {
	// The configured detection: threshold intervals and half of one more without an answer.
	if now.Sub(s.lastSeen) > time.Duration(p.threshold)*p.interval+p.interval/2 {
		return true
	}
	if !t.Fast || now.Before(s.slowUntil) {
		return false
	}
	// Fast: threshold probes, each sent at least one fast interval ago, went unanswered.
	return s.unanswered >= p.threshold && now.Sub(s.lastSeen) > time.Duration(p.threshold)*fastInterval(p.interval)
}

// next is when the target's next probe is due after one left at now: a fast target's at the next tick, any
// other's one configured interval later, less half a tick so that a tick arriving a little early still
// sends it. p.mu must be held.
func (p *Prober) next(t Target, now time.Time) time.Time {
	if t.Fast {
		return now
	}
	return now.Add(p.interval - p.tickInterval()/2)
}

func (p *Prober) read() {
	buf := make([]byte, 64)
	for {
		n, from, err := p.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if n < headerLen || binary.BigEndian.Uint32(buf) != magic {
			continue
		}
		switch buf[4] {
		case typeRequest:
			buf[4] = typeReply
			_, _ = p.conn.WriteToUDPAddrPort(buf[:headerLen], from)
		case typeReply:
			p.onReply(buf[:n], from, time.Now())
		case typeCheck:
			p.answerCheck(buf[:n], from)
		case typeCheckReply:
			p.onCheckReply(buf[:n], from)
		case typeReach:
			p.onReach(from)
		}
	}
}

// header returns a datagram of type typ with room for extra bytes after the common part.
func header(typ byte, seq uint32, now time.Time, extra int) []byte {
	b := make([]byte, headerLen+extra)
	binary.BigEndian.PutUint32(b[0:], magic)
	b[4] = typ
	binary.BigEndian.PutUint32(b[8:], seq)
	binary.BigEndian.PutUint64(b[12:], uint64(now.UnixNano()))
	return b
}

// headerLen is the size of every datagram's common part: magic, type, 3 bytes padding, sequence, send time.
const headerLen = 20

func (p *Prober) onReply(buf []byte, from netip.AddrPort, now time.Time) {
	sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[12:]))) //nolint:gosec // our own timestamp echoed back
	seq := binary.BigEndian.Uint32(buf[8:])
	var changed []string
	p.mu.Lock()
	// Every target at the reply's address is credited (two keys may share a next hop's address).
	for _, k := range p.byAddr[from.Addr().Unmap()] {
		t, s := p.targets[k], p.state[k]
		s.Received++
		s.LastRTT = now.Sub(sent)
		s.lastSeen = now
		s.unanswered = 0
		if !s.Up {
			s.Up = true
			s.Changes++
			changed = append(changed, k)
			if t.Fast && int32(seq-s.downSeq) <= 1 { //nolint:gosec // sequence arithmetic: wraps on purpose
				// It answered a probe sent before the verdict or one of the two right after it: a false alarm.
				s.slowUntil = now.Add(min(falseDownHold<<min(s.FalseDowns, 5), maxFalseDownHold))
				s.FalseDowns++
			}
		}
	}
	p.mu.Unlock()
	for _, k := range changed {
		p.onChange(k, true)
	}
}
