package plan

import (
	"sort"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Links and NAT. A node behind NAT (detected by its daemon, or pinned by its Site's spec.reachability)
// cannot be dialled: it dials its peers and they learn its endpoint from its handshake. So a pair of
// tunnel ends works when at least one of the two is reachable, and a link is
//
//   - Direct when every node carrying it is reachable;
//   - NATInitiated when every pair of its members (local × remote gateways, or nodes for a Site without
//     gateways) has a reachable end — if not, the Site with reachable gateways carries the link only on
//     those;
//   - Relayed when neither end can: both send to the gateways of a relay Site peered with both, which
//     route between them as any gateway does (the relay decrypts and re-encrypts; no key leaves a node).

// relayChoice is the relay of a link: a Site, its gateways carrying the link, and the two links through it.
type relayChoice struct {
	site     string
	gateways []string
	mtu      int32
	// via are the links (a, relay) and (relay, b).
	via [2]*link
}

// behindNAT reports whether peers at other Sites cannot dial n: the Site's pin, else what n's daemon
// detected (unknown counts as reachable, so a new node is planned as before any detection).
func (si *siteInfo) behindNAT(n *Node) bool {
	switch si.site.Spec.Reachability {
	case netv1.ReachabilityReachable:
		return false
	case netv1.ReachabilityBehindNAT:
		return true
	}
	return n.Network != nil && n.Network.Reachability != nil && n.Network.Reachability.Inbound == netv1.ReachabilityBehindNAT
}

// relayCapable reports whether a gateway may relay: its Site or one of its pools says so.
func (p *planner) relayCapable(si *siteInfo, node string) bool {
	if si.site.Spec.Relay {
		return true
	}
	for _, name := range si.candidate[node] {
		if gp := p.poolByName[name]; gp != nil && gp.Spec.Relay {
			return true
		}
	}
	return false
}

// involvesNAT reports whether any node that may carry l is behind NAT (decided before gateway health,
// which depends on the protocol).
func (p *planner) involvesNAT(l *link) bool {
	for _, s := range []string{l.a, l.b} {
		si := p.sites[s]
		if l.topology == netv1.TopologyGateway {
			if si.candidatesBehindNAT(l) {
				return true
			}
		} else if si.anyBehindNAT() {
			return true
		}
	}
	return false
}

// members are the nodes whose reachability decides how an end connects: its active gateways (its
// candidates while none is active), or every node when it has no candidates.
func (e linkEnd) members(filter map[string]bool) []*Node {
	if !e.hasCand {
		return e.si.nodes
	}
	var out []*Node
	for _, g := range e.gateways {
		if n := e.si.nodeIndex[g]; n != nil {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return candidatesOf(e.si, filter)
	}
	return out
}

func (e linkEnd) anyBehindNAT(filter map[string]bool) bool {
	for _, n := range e.members(filter) {
		if e.si.behindNAT(n) {
			return true
		}
	}
	return false
}

// reachableGateways are e's active gateways that peers can dial.
func (e linkEnd) reachableGateways() []string {
	var out []string
	for _, g := range e.gateways {
		if n := e.si.nodeIndex[g]; n != nil && !e.si.behindNAT(n) {
			out = append(out, g)
		}
	}
	return out
}

// decideKind sets l's ends and kind: Direct, NATInitiated (restricting an end to its reachable gateways
// when that makes every pair work) or, when neither end can be dialled, a link that needs a relay.
func (p *planner) decideKind(l *link) {
	for i, s := range []string{l.a, l.b} {
		m := p.sites[s].end(l)
		l.ends[i] = linkEnd{si: p.sites[s], gateways: m.gateways, hasCand: m.hasCand}
	}
	a, b := &l.ends[0], &l.ends[1]
	natA, natB := p.sites[l.a].end(l).membersNAT, p.sites[l.b].end(l).membersNAT
	if l.topology == netv1.TopologyFullMesh {
		// Every node peers with every remote node: nothing to restrict, nothing to relay through.
		l.setNAT(natA, natB)
		l.noPath = natA && natB
		return
	}
	if l.relayPolicy == netv1.RelayAlways {
		l.setNAT(natA, natB)
		l.kind, l.needsRelay = netv1.LinkKindRelayed, true
		return
	}
	if natA && natB {
		switch {
		case a.hasCand && len(a.reachableGateways()) > 0:
			a.gateways, natA = a.reachableGateways(), false
		case b.hasCand && len(b.reachableGateways()) > 0:
			b.gateways, natB = b.reachableGateways(), false
		}
	}
	l.setNAT(natA, natB)
	if natA && natB {
		l.kind, l.needsRelay = netv1.LinkKindRelayed, true
	}
}

// setNAT records which ends are behind NAT and the kind that follows for a link not relayed.
func (l *link) setNAT(natA, natB bool) {
	l.nat = nil
	if natA {
		l.nat = append(l.nat, l.a)
	}
	if natB {
		l.nat = append(l.nat, l.b)
	}
	l.kind = netv1.LinkKindDirect
	if natA || natB {
		l.kind = netv1.LinkKindNATInitiated
	}
}

// chooseRelay picks the relay Site of l: one peered with both ends through Gateway links that need no
// relay themselves, with reachable relay gateways carrying both; the largest path MTU wins, then the
// name. None (or relay: Never) leaves the link without a path.
func (p *planner) chooseRelay(l *link) {
	if l.relayPolicy == netv1.RelayNever {
		l.noPath = true
		return
	}
	for _, r := range p.siteNames {
		if r == l.a || r == l.b {
			continue
		}
		la, lb := p.linkByPair[pairKey(l.a, r)], p.linkByPair[pairKey(r, l.b)]
		if !relayableVia(la) || !relayableVia(lb) {
			continue
		}
		gws := p.relayGateways(r, la, lb)
		if len(gws) == 0 {
			continue
		}
		mtu := min(la.tunnelMTU, lb.tunnelMTU)
		if l.relay == nil || mtu > l.relay.mtu {
			l.relay = &relayChoice{site: r, gateways: gws, mtu: mtu, via: [2]*link{la, lb}}
		}
	}
	l.noPath = l.relay == nil
}

func relayableVia(l *link) bool {
	return l != nil && l.topology == netv1.TopologyGateway && !l.needsRelay && !l.noPath
}

// relayGateways are the relay Site's gateways that carry both links, may relay and are reachable, sorted.
func (p *planner) relayGateways(r string, la, lb *link) []string {
	si := p.sites[r]
	ea, eb := la.end(r), lb.end(r)
	var out []string
	for _, g := range ea.gateways {
		if !contains(eb.gateways, g) || !p.relayCapable(si, g) {
			continue
		}
		if n := si.nodeIndex[g]; n != nil && !si.behindNAT(n) {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}

// relaySiteLink turns the local end's SiteLink of a Relayed link into the path through the relay: the
// local gateways (those carrying the link to the relay) send the remote Site's prefixes to the relay's
// gateways, with the protocol of that link and the smallest MTU of the two hops.
func (p *planner) relaySiteLink(sl *netv1.SiteLink, l *link, local, remote linkEnd) {
	if l.relay == nil {
		sl.Up = false
		return
	}
	toRelay, fromRelay := l.relay.via[0], l.relay.via[1]
	if local.si.site.Name == l.b {
		toRelay, fromRelay = fromRelay, toRelay
	}
	le, re := toRelay.end(local.si.site.Name), fromRelay.end(remote.si.site.Name)
	sl.LocalGateways, sl.SelfGateway = le.gateways, !le.hasCand
	sl.RemoteGateways, sl.RemoteSelfGateway = re.gateways, !re.hasCand
	sl.Protocol, sl.TunnelMTU = toRelay.protocol, l.relay.mtu
	sl.EndpointType = remoteEndpointType(p.sites[l.relay.site], toRelay.poolFilter, toRelay.endpointType)
	sl.Relay = &netv1.LinkRelay{Site: l.relay.site, Gateways: l.relay.gateways}
	sl.Up = endUp(le) && endUp(re) && len(l.relay.gateways) > 0
}
