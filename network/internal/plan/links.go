package plan

import (
	"sort"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// link is one pair of peered Sites (a < b) while the plan is computed.
type link struct {
	peering      *netv1.SitePeering
	a, b         string
	protocol     netv1.Protocol
	topology     netv1.Topology
	poolFilter   map[string]bool
	filterKey    string // "" without a filter, else the peering's name (memoization key of the ends)
	endpointType netv1.EndpointType
	tunnelMTU    int32
	relayPolicy  netv1.RelayPolicy

	// Set by connectLinks.
	ends       [2]linkEnd // of a and b
	kind       netv1.LinkKind
	nat        []string // Sites whose members carrying the link are behind NAT, sorted
	needsRelay bool
	relay      *relayChoice
	noPath     bool // no relay for a link that needs one, or a FullMesh link between two NATed Sites
	up         bool
}

// linkEnd is one Site's side of a link.
type linkEnd struct {
	si *siteInfo
	// gateways are the active gateways carrying the link, sorted; restricted to the reachable ones when
	// the other end is behind NAT too (see decideKind).
	gateways []string
	// hasCand is false when the Site has no gateway candidate for the link: each node is its own gateway.
	hasCand bool
}

// end returns the side of l at site (which must be one of its two Sites).
func (l *link) end(site string) linkEnd {
	if site == l.a {
		return l.ends[0]
	}
	return l.ends[1]
}

func pairKey(x, y string) [2]string {
	if y < x {
		x, y = y, x
	}
	return [2]string{x, y}
}

// resolveLinks turns the SitePeerings into links: one per pair of existing Sites, owned by the first
// peering by name that names the pair, with its protocol and tunnel MTU.
func (p *planner) resolveLinks() {
	ps := make([]*netv1.SitePeering, 0, len(p.in.Peerings))
	for i := range p.in.Peerings {
		ps = append(ps, &p.in.Peerings[i])
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	for _, sp := range ps {
		pr := &PeeringReport{}
		p.out.Peerings[sp.Name] = pr
		names := append([]string(nil), sp.Spec.Sites...)
		sort.Strings(names)
		for _, s := range names {
			if p.sites[s] == nil {
				pr.MissingSites = append(pr.MissingSites, s)
			}
		}
		for i, a := range names {
			for _, b := range names[i+1:] {
				if a == b || p.sites[a] == nil || p.sites[b] == nil || p.linkByPair[[2]string{a, b}] != nil {
					continue
				}
				// The first peering by name owns a pair; later ones naming it again add nothing.
				l := p.newLink(sp, a, b)
				p.links = append(p.links, l)
				p.linkByPair[[2]string{a, b}] = l
			}
		}
	}
}

func (p *planner) newLink(sp *netv1.SitePeering, a, b string) *link {
	l := &link{peering: sp, a: a, b: b, topology: sp.Spec.Topology, endpointType: sp.Spec.EndpointType, relayPolicy: sp.Spec.Relay}
	if l.topology == "" {
		l.topology = netv1.TopologyGateway
	}
	if l.endpointType == "" {
		l.endpointType = netv1.EndpointExternal
	}
	if l.relayPolicy == "" {
		l.relayPolicy = netv1.RelayAuto
	}
	if len(sp.Spec.GatewayPools) > 0 {
		l.poolFilter, l.filterKey = map[string]bool{}, "peering/"+sp.Name
		for _, gp := range sp.Spec.GatewayPools {
			l.poolFilter[gp] = true
		}
	}
	sa, sb := p.sites[a], p.sites[b]
	l.protocol = ResolveInterSite(sp.Spec.Protocol, sa.site.Spec.Tunnel.InterSite, sb.site.Spec.Tunnel.InterSite)
	if p.involvesNAT(l) {
		// Only WireGuard learns a peer's endpoint from its traffic: an end behind NAT cannot be dialled, so
		// VXLAN (static destinations) cannot reach it.
		l.protocol = netv1.ProtocolWireGuard
	}
	l.tunnelMTU = min(SiteMTU(sa.site), SiteMTU(sb.site)) - Overhead(l.protocol)
	return l
}

// connectLinks decides how every link connects (direct, NAT-initiated, relayed) and writes the Sites'
// SiteLinks and the peerings' link status.
func (p *planner) connectLinks() {
	for _, l := range p.links {
		p.decideKind(l)
	}
	for _, l := range p.links {
		if l.needsRelay {
			p.chooseRelay(l)
		}
	}
	for _, l := range p.links {
		up := true
		for i := range 2 {
			sl := p.siteLink(l, l.ends[i], l.ends[1-i])
			up = up && sl.Up
			l.ends[i].si.links = append(l.ends[i].si.links, sl)
		}
		l.up = up
		p.reportLink(l)
	}
}

// siteLink is the link as the local end's plan describes it.
func (p *planner) siteLink(l *link, local, remote linkEnd) netv1.SiteLink {
	sl := netv1.SiteLink{
		Site: remote.si.site.Name, Protocol: l.protocol, TunnelMTU: l.tunnelMTU, EndpointType: l.endpointType,
		Prefixes: remote.si.end(l).prefixes, Kind: l.kind,
	}
	if l.topology == netv1.TopologyFullMesh {
		sl.Mode, sl.Up = netv1.LinkModeDirect, !l.noPath
		return sl
	}
	sl.Mode = netv1.LinkModeGateway
	sl.LocalGateways, sl.SelfGateway = local.gateways, !local.hasCand
	sl.RemoteGateways, sl.RemoteSelfGateway = remote.gateways, !remote.hasCand
	sl.EndpointType = remoteEndpointType(remote.si, l.poolFilter, l.endpointType)
	sl.Up = endUp(local) && endUp(remote)
	if l.kind == netv1.LinkKindRelayed {
		p.relaySiteLink(&sl, l, local, remote)
	}
	if local.hasCand && len(local.gateways) == 0 {
		r := p.out.Sites[local.si.site.Name]
		r.GatewayLinksWithoutGate = append(r.GatewayLinksWithoutGate, remote.si.site.Name)
	}
	return sl
}

// endUp is true when an end has a way out: an active gateway, or its nodes as their own gateways.
func endUp(e linkEnd) bool { return len(e.gateways) > 0 || !e.hasCand }

// reportLink adds the link to its peering's status.
func (p *planner) reportLink(l *link) {
	pr := p.out.Peerings[l.peering.Name]
	ls := netv1.LinkStatus{Sites: []string{l.a, l.b}, Protocol: l.protocol, TunnelMTU: l.tunnelMTU, Up: l.up, Kind: l.kind, BehindNAT: l.nat}
	if l.relay != nil {
		ls.Relay, ls.TunnelMTU = l.relay.site, l.relay.mtu
		ls.Protocol = l.relay.via[0].protocol
	}
	if l.noPath {
		pr.NoPath = append(pr.NoPath, l.a+"↔"+l.b)
	}
	pr.Links = append(pr.Links, ls)
}

// end is what si contributes to links with l's pool filter, computed once per filter and pass, after
// assessGateways.
func (si *siteInfo) end(l *link) *endMemo {
	if m := si.ends[l.filterKey]; m != nil {
		return m
	}
	m := &endMemo{}
	m.gateways, m.hasCand = gatewaysOf(si, l.poolFilter)
	m.prefixes = sitePrefixes(si, l.poolFilter)
	m.membersNAT = linkEnd{si: si, gateways: m.gateways, hasCand: m.hasCand}.anyBehindNAT(l.poolFilter)
	si.ends[l.filterKey] = m
	return m
}

// candidatesBehindNAT reports whether any of si's candidates for l (every node without any) is behind NAT;
// it needs only selectCandidates.
func (si *siteInfo) candidatesBehindNAT(l *link) bool {
	if v, ok := si.candsNAT[l.filterKey]; ok {
		return v
	}
	v := false
	for _, n := range candidatesOf(si, l.poolFilter) {
		v = v || si.behindNAT(n)
	}
	si.candsNAT[l.filterKey] = v
	return v
}

// anyBehindNAT reports whether any of the Site's nodes is behind NAT.
func (si *siteInfo) anyBehindNAT() bool {
	if si.anyNAT == nil {
		v := false
		for _, n := range si.nodes {
			v = v || si.behindNAT(n)
		}
		si.anyNAT = &v
	}
	return *si.anyNAT
}

// gatewaysOf returns a Site's active gateways in the pools a link may use, and whether it has any
// candidate there at all.
func gatewaysOf(si *siteInfo, filter map[string]bool) ([]string, bool) {
	var active []string
	hasCand := false
	for _, n := range si.nodes {
		if !inFilter(si.candidate[n.Name], filter) {
			continue
		}
		hasCand = true
		if si.active[n.Name] {
			active = append(active, n.Name)
		}
	}
	return active, hasCand
}

// candidatesOf returns a Site's gateway candidates in the pools a link may use, or every node of the Site
// when it has none there (each node is then its own gateway).
func candidatesOf(si *siteInfo, filter map[string]bool) []*Node {
	var out []*Node
	for _, n := range si.nodes {
		if inFilter(si.candidate[n.Name], filter) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return si.nodes
	}
	return out
}

func inFilter(pools []string, filter map[string]bool) bool {
	for _, p := range pools {
		if filter == nil || filter[p] {
			return true
		}
	}
	return false
}

// remoteEndpointType is the endpoint type of the remote Site's gateway pools used by the link: Internal
// only when every such pool is Internal.
func remoteEndpointType(si *siteInfo, filter map[string]bool, def netv1.EndpointType) netv1.EndpointType {
	used, allInternal := false, true
	for _, p := range si.pools {
		if filter != nil && !filter[p.Name] {
			continue
		}
		used = true
		if p.Spec.Type != netv1.EndpointInternal {
			allInternal = false
		}
	}
	if !used {
		return def
	}
	if allInternal {
		return netv1.EndpointInternal
	}
	return netv1.EndpointExternal
}
