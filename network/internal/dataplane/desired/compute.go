package desired

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Compute derives the desired dataplane from the input. down lists next-hop keys the probes found dead: they
// are left out of multi-member groups (a single-member route keeps its member: there is nowhere else to go).
func Compute(in Input, down map[string]bool) (State, error) {
	return ComputeWith(in, down, Features{})
}

// ComputeWith is Compute with node-local features.
func ComputeWith(in Input, down map[string]bool, f Features) (State, error) {
	c := &computation{in: in, down: down, f: f, routes: map[netip.Prefix]*Route{}}
	if err := c.self(); err != nil {
		return State{}, err
	}
	c.indexPeers()
	c.intraSite()
	for _, l := range in.Plan.Links {
		c.link(l)
	}
	c.finish()
	return c.st, nil
}

// computation is one Compute. Each method is a phase (or, for links, the path one kind of link takes);
// ComputeWith runs them in order.
type computation struct {
	in     Input
	down   map[string]bool
	f      Features
	st     State
	peers  map[string]map[string]netv1.Peer // site → node → peer
	me     *netv1.Peer                      // this node's own entry in its Site's slices
	routes map[netip.Prefix]*Route
}

// self sets the node's own identity: tunnel address, MAC, intra-site MTU and probe settings.
func (c *computation) self() error {
	self, ok := TunnelPrefix(c.in.PodCIDRs)
	if !ok {
		return fmt.Errorf("failed to compute dataplane for node %s: no IPv4 pod CIDR", c.in.Node)
	}
	c.st = State{
		Self: c.in.Node, Tunnel: self.Addr(), TunnelPrefix: self, MAC: NodeMAC(c.in.Node), Hops: map[string]NextHop{},
		VXLANMTU: int(c.in.Plan.IntraSite.TunnelMTU), Probe: c.in.Plan.HealthProbe,
	}
	if c.st.VXLANMTU == 0 {
		c.st.VXLANMTU = 1430
	}
	return nil
}

// indexPeers indexes the slices' peers by Site and finds the node's own entry.
func (c *computation) indexPeers() {
	c.peers = map[string]map[string]netv1.Peer{}
	for _, s := range c.in.Slices {
		if c.peers[s.Site] == nil {
			c.peers[s.Site] = map[string]netv1.Peer{}
		}
		for _, p := range s.Peers {
			c.peers[s.Site][p.Node] = p
			if s.Site == c.in.Site && p.Node == c.in.Node {
				pp := p
				c.me = &pp
			}
		}
	}
	c.st.BehindNAT = c.me != nil && c.me.BehindNAT
}

// intraSite routes every other node of the Site's pod CIDRs to it.
func (c *computation) intraSite() {
	for _, p := range sortedPeers(c.peers[c.in.Site]) {
		if k, ok := c.hop(p, c.in.Plan.IntraSite.Protocol, netv1.EndpointInternal, c.st.VXLANMTU, false); ok {
			for _, cidr := range p.PodCIDRs {
				c.addRoute(cidr, []string{k}, c.st.Hops[k].MTU)
			}
		}
	}
}

// link routes one link's destinations by the path this node takes to the remote Site.
func (c *computation) link(l netv1.SiteLink) {
	switch {
	case l.Kind == netv1.LinkKindRelayed && c.carries(l):
		c.toRelay(l)
	case l.Kind == netv1.LinkKindRelayed:
		c.viaLocalGateways(l)
	case l.Mode == netv1.LinkModeDirect || (l.RemoteSelfGateway && c.carries(l)):
		c.toRemoteNodes(l)
	case c.carries(l):
		c.toRemoteGateways(l)
	default:
		c.viaLocalGateways(l)
	}
}

// carries reports whether this node sends a Gateway link's traffic to the other Site itself: it is one of
// the link's local gateways, or its Site has none (each node is its own gateway).
func (c *computation) carries(l netv1.SiteLink) bool {
	return l.SelfGateway || (c.me != nil && c.me.Gateway != nil && c.me.Gateway.Active && slices.Contains(l.LocalGateways, c.in.Node))
}

// toRemoteNodes peers with every node of the remote Site (Direct links, or a remote Site without
// gateways) and routes each one's pod CIDRs to it.
func (c *computation) toRemoteNodes(l netv1.SiteLink) {
	for _, p := range sortedPeers(c.peers[l.Site]) {
		if k, ok := c.hop(p, l.Protocol, l.EndpointType, int(l.TunnelMTU), true); ok {
			for _, cidr := range p.PodCIDRs {
				c.addRoute(cidr, []string{k}, c.st.Hops[k].MTU)
			}
		}
	}
}

// toRemoteGateways peers with the remote Site's active gateways and spreads the link's prefixes over them
// (L3 where both Sites have exactly one active gateway and the feature is on).
func (c *computation) toRemoteGateways(l netv1.SiteLink) {
	members, minMTU := c.gatewayHops(l.Site, l.RemoteGateways, l)
	if !l.Up {
		members = nil
	}
	// L3 where both Sites have exactly one active gateway on this link: this node and members[0]. The accept
	// side (the peer's allowed prefixes) holds whenever the link qualifies; sending L3 pauses while either
	// end rotates its key.
	l3 := c.f.WireGuardL3 && l.Protocol == netv1.ProtocolWireGuard && l.Up && !l.SelfGateway &&
		!l.RemoteSelfGateway && len(l.LocalGateways) == 1 && l.LocalGateways[0] == c.in.Node && len(members) == 1
	send := false
	if l3 {
		h := c.st.Hops[members[0]]
		for _, pf := range l.Prefixes {
			if p, err := netip.ParsePrefix(pf); err == nil && p.Addr().Is4() && !slices.Contains(h.L3Prefixes, p.Masked()) {
				h.L3Prefixes = append(h.L3Prefixes, p.Masked())
			}
		}
		c.st.Hops[members[0]] = h
		send = !c.f.Rotating && h.NextPublicKey == "" && c.me.NextPublicKey == ""
	}
	for _, pf := range l.Prefixes {
		c.addRoute(pf, members, minMTU)
		if p, err := netip.ParsePrefix(pf); err == nil && c.routes[p] != nil {
			c.routes[p].L3 = send
		}
	}
}

// toRelay sends a Relayed link's prefixes to the relay Site's gateways, which forward them to the remote
// Site's gateways as they forward their own traffic (tunnelMTU is already the smaller of both hops').
func (c *computation) toRelay(l netv1.SiteLink) {
	var members []string
	minMTU := int(l.TunnelMTU)
	if l.Relay != nil && l.Up {
		members, minMTU = c.gatewayHops(l.Relay.Site, l.Relay.Gateways, l)
	}
	for _, pf := range l.Prefixes {
		c.addRoute(pf, members, minMTU)
	}
}

// gatewayHops are the hops to the named gateways of site, and the smallest of their MTUs.
func (c *computation) gatewayHops(site string, gateways []string, l netv1.SiteLink) ([]string, int) {
	var members []string
	minMTU := int(l.TunnelMTU)
	for _, p := range sortedPeers(c.peers[site]) {
		if p.Gateway == nil || !slices.Contains(gateways, p.Node) {
			continue
		}
		if k, ok := c.hop(p, l.Protocol, l.EndpointType, int(l.TunnelMTU), true); ok {
			members = append(members, k)
			minMTU = min(minMTU, c.st.Hops[k].MTU)
		}
	}
	return members, minMTU
}

// viaLocalGateways routes a link's prefixes to this Site's gateways carrying it, over the intra-site path.
func (c *computation) viaLocalGateways(l netv1.SiteLink) {
	var members []string
	minMTU := c.st.VXLANMTU
	for _, p := range sortedPeers(c.peers[c.in.Site]) {
		if !slices.Contains(l.LocalGateways, p.Node) {
			continue
		}
		if k, ok := c.hop(p, c.in.Plan.IntraSite.Protocol, netv1.EndpointInternal, c.st.VXLANMTU, false); ok {
			members = append(members, k)
			minMTU = min(minMTU, c.st.Hops[k].MTU)
		}
	}
	if !l.Up {
		members = nil
	}
	for _, pf := range l.Prefixes {
		// The path MTU includes the gateways' link (its tunnelMTU already counts VXLAN inside WireGuard).
		c.addRoute(pf, members, min(minMTU, int(l.TunnelMTU)))
	}
}

// hop records the next hop to peer p over proto and returns its key; false when p cannot be a next hop
// (itself, no IPv4 pod CIDR or endpoint, or for WireGuard no public key or no address for its slot).
// interSite hops follow NAT: a peer behind NAT is accepted, not dialled, and a node behind NAT keeps its
// mapping to a reachable peer.
func (c *computation) hop(p netv1.Peer, proto netv1.Protocol, etype netv1.EndpointType, mtu int, interSite bool) (string, bool) {
	if p.Node == c.in.Node {
		return "", false
	}
	t, ok := TunnelPrefix(p.PodCIDRs)
	if !ok {
		return "", false
	}
	ep, ok := pickEndpoint(p.Endpoints, etype)
	if !ok {
		return "", false
	}
	n := NextHop{Node: p.Node, Underlay: ep, Tunnel: t.Addr(), MAC: NodeMAC(p.Node), PublicKey: p.PublicKey,
		WGPort: int(p.Ports.WireGuard), ProbePort: int(p.Ports.Probe), MTU: mtu}
	if err := c.slots(&n, t, p); err != nil && proto == netv1.ProtocolWireGuard {
		// A peer in (or rotating to) slot 1 whose pod CIDR has no slot-1 address: its own daemon refuses
		// that rotation, so only a peer outside the rules gets here. Every node leaves it out alike rather
		// than give it an address that another interface of that node holds.
		return "", false
	}
	if interSite {
		n.Accept, n.Initiate = p.BehindNAT && !c.st.BehindNAT, c.st.BehindNAT && !p.BehindNAT
	}
	switch proto {
	case netv1.ProtocolWireGuard:
		if p.PublicKey == "" {
			return "", false
		}
		n.Via = ViaWireGuard
		if c.st.WGMTU == 0 || n.MTU < c.st.WGMTU {
			c.st.WGMTU = n.MTU
		}
	case netv1.ProtocolNone:
		n.Via = ViaNative
	default: // VXLAN; GENEVE and IPIP fall back to VXLAN (what both ends compute)
		n.Via = ViaVXLAN
	}
	c.st.Hops[n.Key()] = n
	return n.Key(), true
}

// slots fills a hop's probe port and WireGuard ports and slot addresses (both slots while the peer rotates
// its key; the addresses from the peer's tunnel prefix). An error leaves the addresses incomplete.
func (c *computation) slots(n *NextHop, tunnel netip.Prefix, p netv1.Peer) error {
	if n.ProbePort == 0 {
		n.ProbePort = int(c.in.Plan.HealthProbe.Port)
	}
	if n.ProbePort == 0 {
		n.ProbePort = DefaultProbePort
	}
	if n.WGPort == 0 {
		n.WGPort = DefaultWireGuardPort
	}
	slot := int(p.WireGuardSlot) & 1
	base := n.WGPort
	n.WGPort = SlotPort(base, slot)
	var err error
	if n.WGAddr, err = SlotAddr(tunnel, slot); err != nil {
		return err
	}
	if p.NextPublicKey != "" {
		n.NextPublicKey, n.NextWGPort = p.NextPublicKey, SlotPort(base, 1-slot)
		if n.NextWGAddr, err = SlotAddr(tunnel, 1-slot); err != nil {
			return err
		}
	}
	return nil
}

// addRoute adds members to prefix's group (a route without members is a blackhole). Non-IPv4 prefixes are
// skipped (no IPv6 dataplane yet).
func (c *computation) addRoute(prefix string, members []string, mtu int) {
	p, err := netip.ParsePrefix(prefix)
	if err != nil || !p.Addr().Is4() {
		return
	}
	if len(members) == 0 {
		c.routes[p] = &Route{Prefix: p, MTU: mtu}
		return
	}
	r, ok := c.routes[p]
	if !ok {
		r = &Route{Prefix: p, MTU: mtu}
		c.routes[p] = r
	}
	for _, m := range members {
		if !slices.Contains(r.Members, m) {
			r.Members = append(r.Members, m)
		}
	}
}

// finish drops routes to the node's own pod CIDRs (local, whatever a link lists), leaves members the probes
// found down out of multi-member groups (unless every member is down), and sorts everything.
func (c *computation) finish() {
	for _, cidr := range c.in.PodCIDRs {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			delete(c.routes, p.Masked())
		}
	}
	for _, r := range c.routes {
		sort.Strings(r.Members)
		if len(r.Members) > 1 {
			// Every member down keeps them all: sending to members the probes gave up on loses no more than
			// an empty group's drop, and loses nothing when the verdicts were wrong (one stall on this
			// node's side of every path, which the gateways' fast probes cannot tell from a failure).
			if up := slices.DeleteFunc(slices.Clone(r.Members), func(m string) bool { return c.down[m] }); len(up) > 0 {
				r.Members = up
			}
		}
		c.st.Routes = append(c.st.Routes, *r)
	}
	sort.Slice(c.st.Routes, func(i, j int) bool { return c.st.Routes[i].Prefix.String() < c.st.Routes[j].Prefix.String() })
	if c.st.WGMTU == 0 {
		c.st.WGMTU = 1500 - WireGuardOverhead - VXLANOverhead
	}
}

func pickEndpoint(eps []netv1.Endpoint, t netv1.EndpointType) (netip.Addr, bool) {
	var fallback netip.Addr
	for _, e := range eps {
		a, err := netip.ParseAddr(e.Address)
		if err != nil || !a.Is4() {
			continue
		}
		if e.Type == t || t == "" {
			return a, true
		}
		if !fallback.IsValid() {
			fallback = a
		}
	}
	return fallback, fallback.IsValid()
}

func sortedPeers(m map[string]netv1.Peer) []netv1.Peer {
	out := make([]netv1.Peer, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
