package probe

import (
	"encoding/binary"
	"net/netip"
	"sort"
	"time"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Reachability checks: can peers at other Sites open a connection to this node, or is it behind a NAT (or a
// stateful firewall) that drops what it did not ask for? A node cannot tell by itself, and a peer answering
// its probes proves nothing (the answer is what the NAT expects). So a node sends a check to a few peers at
// other Sites (checkers); each answers from its probe port with the address the check came from (what the
// node is seen from: behind NAT, the NAT's address), and sends a reach probe to that address at the node's
// probe port from ANOTHER port. A NAT has no mapping for that one: it arrives only at a node peers can dial.
//
//   - a reach probe arrives: Reachable;
//   - checks were answered but missThreshold rounds in a row brought no reach probe: BehindNAT;
//   - no checker answers (none reachable, or all down): no verdict, the last one stands.
//
// Rounds run every checkTick until the first verdict, then every settledEvery ticks.
const (
	checkTick     = time.Second
	settledEvery  = 10
	missThreshold = 3
	// maxReachPerSecond bounds the reach probes a node sends for others (each is one 20-byte datagram to the
	// address the check came from: no amplification, and no third party can be targeted but by spoofing).
	maxReachPerSecond = 50
)

// Reachability is a node's reachability verdict.
type Reachability struct {
	// Inbound is netv1.ReachabilityReachable, netv1.ReachabilityBehindNAT or "" (no verdict yet).
	Inbound netv1.Reachability
	// Observed is the address the latest answered check came from, as the checker saw it.
	Observed netip.Addr
}

type reachState struct {
	checkers []netip.AddrPort
	round    uint32
	ticks    int
	answered bool // in the current round
	reached  bool
	misses   int
	verdict  Reachability
	// responder side
	sentAt []time.Time
}

// SetCheckers sets the peers (at other Sites, probe addresses) this node asks to check its reachability.
// An empty set stops the checks; the verdict stays.
func (p *Prober) SetCheckers(cs []netip.AddrPort) {
	cs = append([]netip.AddrPort(nil), cs...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Compare(cs[j]) < 0 })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reach.checkers = cs
}

// Reachability returns the current verdict.
func (p *Prober) Reachability() Reachability {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reach.verdict
}

// checkRound evaluates the round that ends and starts the next one: a check to every checker.
func (p *Prober) checkRound(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &p.reach
	r.ticks++
	if r.verdict.Inbound != "" && r.ticks%settledEvery != 0 {
		return
	}
	switch {
	case r.reached:
		r.verdict.Inbound, r.misses = netv1.ReachabilityReachable, 0
	case r.answered:
		if r.misses++; r.misses >= missThreshold {
			r.verdict.Inbound = netv1.ReachabilityBehindNAT
		}
	}
	r.answered, r.reached = false, false
	if len(r.checkers) == 0 {
		return
	}
	r.round++
	port := p.conn.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort().Port()
	for _, c := range r.checkers {
		b := header(typeCheck, r.round, now, 2)
		binary.BigEndian.PutUint16(b[headerLen:], port)
		_, _ = p.conn.WriteToUDPAddrPort(b, c)
	}
}

// answerCheck answers a check: the address it came from, then a reach probe to that address at the
// requester's probe port, from the side socket.
func (p *Prober) answerCheck(buf []byte, from netip.AddrPort) {
	if len(buf) < headerLen+2 || !from.Addr().Unmap().Is4() {
		return
	}
	port := binary.BigEndian.Uint16(buf[headerLen:])
	obs := from.Addr().Unmap().As4()
	reply := header(typeCheckReply, binary.BigEndian.Uint32(buf[8:]), time.Now(), 6)
	copy(reply[headerLen:], obs[:])
	binary.BigEndian.PutUint16(reply[headerLen+4:], from.Port())
	_, _ = p.conn.WriteToUDPAddrPort(reply, from)
	if port == 0 || !p.mayReach(time.Now()) {
		return
	}
	_, _ = p.side.WriteToUDPAddrPort(header(typeReach, binary.BigEndian.Uint32(buf[8:]), time.Now(), 0), netip.AddrPortFrom(from.Addr().Unmap(), port))
}

// mayReach is the responder's rate limit.
func (p *Prober) mayReach(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &p.reach
	for len(r.sentAt) > 0 && now.Sub(r.sentAt[0]) > time.Second {
		r.sentAt = r.sentAt[1:]
	}
	if len(r.sentAt) >= maxReachPerSecond {
		return false
	}
	r.sentAt = append(r.sentAt, now)
	return true
}

// onCheckReply records that a checker answered and what it saw.
func (p *Prober) onCheckReply(buf []byte, from netip.AddrPort) {
	if len(buf) < headerLen+6 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isChecker(from.Addr()) {
		return
	}
	p.reach.answered = true
	p.reach.verdict.Observed = netip.AddrFrom4([4]byte(buf[headerLen : headerLen+4]))
}

// onReach records an unsolicited probe from a checker: this node can be dialled.
func (p *Prober) onReach(from netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isChecker(from.Addr()) {
		p.reach.reached = true
	}
}

// isChecker reports whether addr is one of the checkers. p.mu must be held.
func (p *Prober) isChecker(addr netip.Addr) bool {
	for _, c := range p.reach.checkers {
		if c.Addr() == addr.Unmap() {
			return true
		}
	}
	return false
}
