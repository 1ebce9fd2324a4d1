// Package probe runs BFD-style UDP health probes: every daemon answers echo requests on its probe port and
// sends one to each monitored peer every interval; a peer that misses `threshold` consecutive intervals is
// down, one answer brings it back. State changes are reported at once, without waiting for the API.
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

// Target is one peer to monitor.
type Target struct {
	Key  string
	Addr netip.AddrPort
}

// PeerState is a target's health.
type PeerState struct {
	Up       bool
	Sent     uint64
	Received uint64
	LastRTT  time.Duration
	Changes  uint64
	lastSeen time.Time
	started  time.Time
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
	targets map[string]Target
	state   map[string]*PeerState
	seq     uint32
	reach   reachState
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
		targets: map[string]Target{}, state: map[string]*PeerState{}}, nil
}

// SetTargets replaces the monitored set; new targets start up (so a fresh start does not flap everything
// down) and are declared down only after missing threshold intervals.
func (p *Prober) SetTargets(ts []Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := map[string]Target{}
	for _, t := range ts {
		next[t.Key] = t
		if _, ok := p.state[t.Key]; !ok {
			p.state[t.Key] = &PeerState{Up: true, started: time.Now(), lastSeen: time.Now()}
		}
	}
	for k := range p.state {
		if _, ok := next[k]; !ok {
			delete(p.state, k)
		}
	}
	p.targets = next
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
		select {
		case p.retime <- interval:
		default:
		}
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
	iv := p.interval
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
		case iv := <-p.retime:
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
		_, _ = p.conn.WriteToUDPAddrPort(header(typeRequest, p.seq, now, 0), t.Addr)
		s.Sent++
		if s.Up && now.Sub(s.lastSeen) > time.Duration(p.threshold)*p.interval+p.interval/2 {
			s.Up = false
			s.Changes++
			changes = append(changes, change{k, false})
		}
	}
	p.mu.Unlock()
	for _, c := range changes {
		p.onChange(c.key, c.up)
	}
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
			p.onReply(buf[:n], from)
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

func (p *Prober) onReply(buf []byte, from netip.AddrPort) {
	sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[12:]))) //nolint:gosec // our own timestamp echoed back
	now := time.Now()
	var changed string
	p.mu.Lock()
	for k, t := range p.targets {
		if t.Addr.Addr() != from.Addr().Unmap() {
			continue
		}
		s := p.state[k]
		s.Received++
		s.LastRTT = now.Sub(sent)
		s.lastSeen = now
		if !s.Up {
			s.Up = true
			s.Changes++
			changed = k
		}
	}
	p.mu.Unlock()
	if changed != "" {
		p.onChange(changed, true)
	}
}
