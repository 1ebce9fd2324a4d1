// Package plan computes the route plan — one RoutePlan per Site and the Sites' PeerSlices — as a pure
// function of the Sites, GatewayPools, SitePeerings, Nodes and the previously published slices. Purity is
// what makes publication diff-based: the same inputs give byte-identical objects, so a restarted
// controller writes nothing, and a change to one node rewrites only the objects that mention it.
package plan

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/gateway"
	"github.com/yonder-dev/yonder/network/internal/ipam"
)

// Defaults the controller applies where a field is unset.
const (
	// DefaultMTU is the underlay MTU of a Site without spec.mtu.
	DefaultMTU = 1500
	// DefaultProbeIntervalMillis: 200 ms × 3 lost probes detects a failure in 600 ms.
	DefaultProbeIntervalMillis = 200
	// DefaultProbeFailureThreshold is the number of lost probes that mark a peer down.
	DefaultProbeFailureThreshold = 3
	// DefaultProbePort is the UDP port of the health probes.
	DefaultProbePort = 51822
	// DefaultSliceSize bounds a PeerSlice: 100 peers is ~30 KiB, far from etcd's 1.5 MiB limit, and a
	// change rewrites at most that much.
	DefaultSliceSize = 100
)

// Overhead is the worst-case (IPv6 underlay) encapsulation overhead of a protocol. Planning with the
// worst case costs a few bytes of MTU and removes a whole class of MTU black holes.
func Overhead(p netv1.Protocol) int32 {
	switch p {
	case netv1.ProtocolWireGuard:
		// IPv6 40 + UDP 8 + WireGuard 32, plus the VXLAN the dataplane carries inside WireGuard (inner IPv4
		// 20 + UDP 8 + VXLAN 8 + Ethernet 14 = 50; see docs/network-dataplane.md): the link's tunnelMTU is
		// what a pod packet may be, end to end.
		return 130
	case netv1.ProtocolVXLAN:
		return 70 // IPv6 40 + UDP 8 + VXLAN 8 + inner Ethernet 14
	case netv1.ProtocolGENEVE:
		return 70 // as VXLAN, without options
	case netv1.ProtocolIPIP:
		return 40 // an IPv6 outer header
	default:
		return 0
	}
}

// ResolveInterSite returns the protocol of a link between two Sites. A peering's explicit protocol wins;
// otherwise the Sites' preferences apply, and when they disagree or either says Auto, encryption wins:
// traffic between sites crosses networks we do not control.
func ResolveInterSite(peering, a, b netv1.Protocol) netv1.Protocol {
	if peering != "" && peering != netv1.ProtocolAuto {
		return peering
	}
	if a == b && a != "" && a != netv1.ProtocolAuto {
		return a
	}
	return netv1.ProtocolWireGuard
}

// ResolveIntraSite returns the protocol inside a Site: Auto means VXLAN (the site's own network is trusted
// and VXLAN works across L3 subnets without underlay routes).
func ResolveIntraSite(p netv1.Protocol) netv1.Protocol {
	if p == "" || p == netv1.ProtocolAuto {
		return netv1.ProtocolVXLAN
	}
	return p
}

// SiteMTU returns a Site's underlay MTU with the default applied.
func SiteMTU(s *netv1.Site) int32 {
	if s.Spec.MTU == 0 {
		return DefaultMTU
	}
	return s.Spec.MTU
}

// HealthProbe returns a Site's probe settings with defaults applied.
func HealthProbe(s *netv1.Site) netv1.HealthProbeSpec {
	h := s.Spec.HealthProbe
	if h.IntervalMilliseconds == 0 {
		h.IntervalMilliseconds = DefaultProbeIntervalMillis
	}
	if h.FailureThreshold == 0 {
		h.FailureThreshold = DefaultProbeFailureThreshold
	}
	if h.Port == 0 {
		h.Port = DefaultProbePort
	}
	return h
}

// Node is what the plan needs of one Node and its NodeNetwork.
type Node struct {
	// Name of the Node.
	Name string
	// Site the Node is assigned to ("" for none: not in any plan).
	Site string
	// Labels of the Node (gateway pool selectors).
	Labels map[string]string
	// PodCIDRs from Node.spec.podCIDRs.
	PodCIDRs []string
	// Addresses from Node.status.addresses (used when the daemon publishes no endpoints).
	Addresses []netv1.Endpoint
	// Ready is the Node's Ready condition.
	Ready bool
	// Unschedulable is Node.spec.unschedulable.
	Unschedulable bool
	// Deleting is true when the Node has a deletion timestamp.
	Deleting bool
	// Network is the daemon's publication; nil until the daemon runs.
	Network *netv1.NodeNetworkSpec
	// DataplaneReady is the NodeNetwork's Ready condition.
	DataplaneReady bool
	// GatewayReady is the NodeNetwork's GatewayReady condition (nil: not reported).
	GatewayReady *bool
	// Conflicts are the Sites the Node matched besides its own.
	Conflicts []string
}

// Input is everything the plan depends on.
type Input struct {
	// Sites are all Sites.
	Sites []netv1.Site
	// Pools are all GatewayPools.
	Pools []netv1.GatewayPool
	// Peerings are all SitePeerings.
	Peerings []netv1.SitePeering
	// Nodes are all Nodes (those without a Site are only counted against pools).
	Nodes []Node
	// Previous are the PeerSlices currently published; they keep nodes in the slice they are in.
	Previous []netv1.PeerSlice
	// SliceSize is the maximum number of peers per slice (DefaultSliceSize when 0).
	SliceSize int
}

// Output is the desired state: objects to publish and status to report.
type Output struct {
	// Plans are the RoutePlans, sorted by name.
	Plans []netv1.RoutePlan
	// Slices are the PeerSlices, sorted by name.
	Slices []netv1.PeerSlice
	// Sites reports per Site.
	Sites map[string]*SiteReport
	// Pools reports per GatewayPool.
	Pools map[string]*PoolReport
	// Peerings reports per SitePeering.
	Peerings map[string]*PeeringReport
}

// SiteReport is a Site's observed state.
type SiteReport struct {
	// Nodes and ReadyNodes count the Site's Nodes (ready: Node Ready and dataplane Ready).
	Nodes, ReadyNodes int32
	// Gateways and Active count gateway candidates and active gateways.
	Gateways, Active int32
	// Allocated and Capacity are the pod CIDR blocks of the binding family.
	Allocated, Capacity int64
	// WaitingForPodCIDR counts Nodes without a pod CIDR although the Site has pools.
	WaitingForPodCIDR int32
	// MTUMismatches are Nodes whose underlay MTU is below the Site's.
	MTUMismatches []string
	// Conflicts are Nodes that match several Sites.
	Conflicts []string
	// GatewayLinksWithoutGate are remote Sites of Gateway links for which this Site has candidates but
	// none active.
	GatewayLinksWithoutGate []string
}

// PoolReport is a GatewayPool's observed state.
type PoolReport struct {
	// SiteFound is false when spec.site names no Site.
	SiteFound bool
	// Gateways are the candidates, sorted by name.
	Gateways []netv1.GatewayStatus
	// Active counts the active candidates.
	Active int32
}

// PeeringReport is a SitePeering's observed state.
type PeeringReport struct {
	// MissingSites are named Sites that do not exist.
	MissingSites []string
	// Links are the links this peering owns.
	Links []netv1.LinkStatus
}

type siteInfo struct {
	site      *netv1.Site
	nodes     []*Node
	alloc     *ipam.Allocator
	pools     []*netv1.GatewayPool
	candidate map[string][]string // node → pools selecting it
	active    map[string]bool     // node → active gateway
	reason    map[string]string
	links     []netv1.SiteLink
	needsKey  bool
}

type link struct {
	peering      *netv1.SitePeering
	a, b         string
	protocol     netv1.Protocol
	topology     netv1.Topology
	poolFilter   map[string]bool
	endpointType netv1.EndpointType
	tunnelMTU    int32
}

// Compute computes the plan. It never fails: inputs the webhook would reject are skipped and show up in
// the reports.
func Compute(in Input) *Output {
	out := &Output{Sites: map[string]*SiteReport{}, Pools: map[string]*PoolReport{}, Peerings: map[string]*PeeringReport{}}
	sites := map[string]*siteInfo{}
	var siteNames []string
	for i := range in.Sites {
		s := &in.Sites[i]
		alloc, err := ipam.New(s.Spec.PodCIDRPools)
		if err != nil {
			alloc, _ = ipam.New(nil)
		}
		sites[s.Name] = &siteInfo{site: s, alloc: alloc, candidate: map[string][]string{}, active: map[string]bool{}, reason: map[string]string{}}
		out.Sites[s.Name] = &SiteReport{}
		siteNames = append(siteNames, s.Name)
	}
	sort.Strings(siteNames)

	nodes := make([]*Node, 0, len(in.Nodes))
	for i := range in.Nodes {
		nodes = append(nodes, &in.Nodes[i])
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, n := range nodes {
		// Every pod CIDR counts against every Site's pools, wherever its node is now.
		for _, si := range sites {
			for _, c := range n.PodCIDRs {
				si.alloc.MarkUsed(c)
			}
		}
		si := sites[n.Site]
		if si == nil {
			continue
		}
		si.nodes = append(si.nodes, n)
		r := out.Sites[n.Site]
		r.Nodes++
		if n.Ready && n.DataplaneReady {
			r.ReadyNodes++
		}
		if len(n.PodCIDRs) == 0 && !si.alloc.Empty() {
			r.WaitingForPodCIDR++
		}
		if n.Network != nil && n.Network.UnderlayMTU > 0 && n.Network.UnderlayMTU < SiteMTU(si.site) {
			r.MTUMismatches = append(r.MTUMismatches, n.Name)
		}
		if len(n.Conflicts) > 0 {
			r.Conflicts = append(r.Conflicts, n.Name)
		}
	}
	for name, si := range sites {
		out.Sites[name].Allocated, out.Sites[name].Capacity = si.alloc.Usage()
	}

	// Gateway candidates per pool.
	pools := make([]*netv1.GatewayPool, 0, len(in.Pools))
	for i := range in.Pools {
		pools = append(pools, &in.Pools[i])
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	poolByName := map[string]*netv1.GatewayPool{}
	for _, p := range pools {
		poolByName[p.Name] = p
		pr := &PoolReport{}
		out.Pools[p.Name] = pr
		si := sites[p.Spec.Site]
		if si == nil {
			continue
		}
		pr.SiteFound = true
		si.pools = append(si.pools, p)
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.NodeSelector)
		if err != nil {
			continue
		}
		for _, n := range si.nodes {
			if sel.Matches(labels.Set(n.Labels)) {
				si.candidate[n.Name] = append(si.candidate[n.Name], p.Name)
			}
		}
	}

	links := resolveLinks(in.Peerings, sites, out)
	for _, l := range links {
		if l.protocol == netv1.ProtocolWireGuard && l.topology == netv1.TopologyGateway {
			sites[l.a].needsKey, sites[l.b].needsKey = true, true
		}
	}

	// Health of every candidate.
	byName := map[string]*Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for _, name := range siteNames {
		si := sites[name]
		for node := range si.candidate {
			n := byName[node]
			ok, reason := gateway.Health(gateway.Candidate{
				NodeReady: n.Ready, Unschedulable: n.Unschedulable, Deleting: n.Deleting,
				DataplaneReady: n.DataplaneReady, GatewayReady: n.GatewayReady,
				HasPublicKey: n.Network != nil && n.Network.PublicKey != "", NeedsPublicKey: si.needsKey,
			})
			si.active[node], si.reason[node] = ok, reason
			out.Sites[name].Gateways++
			if ok {
				out.Sites[name].Active++
			}
		}
	}
	for _, p := range pools {
		si := sites[p.Spec.Site]
		if si == nil {
			continue
		}
		pr := out.Pools[p.Name]
		for _, n := range si.nodes {
			if !contains(si.candidate[n.Name], p.Name) {
				continue
			}
			gs := netv1.GatewayStatus{Node: n.Name, Active: si.active[n.Name], Reason: si.reason[n.Name]}
			pr.Gateways = append(pr.Gateways, gs)
			if gs.Active {
				pr.Active++
			}
		}
	}

	// Links per site.
	for _, l := range links {
		for _, dir := range [][2]string{{l.a, l.b}, {l.b, l.a}} {
			local, remote := sites[dir[0]], sites[dir[1]]
			sl := netv1.SiteLink{
				Site: dir[1], Protocol: l.protocol, TunnelMTU: l.tunnelMTU, EndpointType: l.endpointType,
				Prefixes: sitePrefixes(remote, l.poolFilter),
			}
			if l.topology == netv1.TopologyFullMesh {
				sl.Mode, sl.Up = netv1.LinkModeDirect, true
			} else {
				sl.Mode = netv1.LinkModeGateway
				var localHasCand, remoteHasCand bool
				sl.LocalGateways, localHasCand = gatewaysOf(local, l.poolFilter)
				sl.RemoteGateways, remoteHasCand = gatewaysOf(remote, l.poolFilter)
				sl.SelfGateway, sl.RemoteSelfGateway = !localHasCand, !remoteHasCand
				sl.EndpointType = remoteEndpointType(remote, l.poolFilter, l.endpointType)
				sl.Up = (len(sl.LocalGateways) > 0 || sl.SelfGateway) && (len(sl.RemoteGateways) > 0 || sl.RemoteSelfGateway)
				if localHasCand && len(sl.LocalGateways) == 0 {
					out.Sites[dir[0]].GatewayLinksWithoutGate = append(out.Sites[dir[0]].GatewayLinksWithoutGate, dir[1])
				}
			}
			local.links = append(local.links, sl)
		}
		pr := out.Peerings[l.peering.Name]
		up := true
		for _, sl := range sites[l.a].links {
			if sl.Site == l.b {
				up = sl.Up
			}
		}
		for _, sl := range sites[l.b].links {
			if sl.Site == l.a {
				up = up && sl.Up
			}
		}
		pr.Links = append(pr.Links, netv1.LinkStatus{Sites: []string{l.a, l.b}, Protocol: l.protocol, TunnelMTU: l.tunnelMTU, Up: up})
	}

	for _, name := range siteNames {
		si := sites[name]
		sort.Slice(si.links, func(i, j int) bool { return si.links[i].Site < si.links[j].Site })
		intra := ResolveIntraSite(si.site.Spec.Tunnel.IntraSite)
		rp := netv1.RoutePlan{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedLabels(name, "")},
			Spec: netv1.RoutePlanSpec{
				Site:               name,
				IntraSite:          netv1.IntraSitePlan{Protocol: intra, TunnelMTU: SiteMTU(si.site) - Overhead(intra)},
				Links:              si.links,
				NonMasqueradeCIDRs: nonMasquerade(si),
				HealthProbe:        HealthProbe(si.site),
			},
		}
		out.Plans = append(out.Plans, rp)
		out.Slices = append(out.Slices, slices(si, in, poolByName)...)
	}
	sort.Slice(out.Slices, func(i, j int) bool { return out.Slices[i].Name < out.Slices[j].Name })
	return out
}

func resolveLinks(peerings []netv1.SitePeering, sites map[string]*siteInfo, out *Output) []*link {
	ps := make([]*netv1.SitePeering, 0, len(peerings))
	for i := range peerings {
		ps = append(ps, &peerings[i])
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	seen := map[[2]string]bool{}
	var links []*link
	for _, p := range ps {
		pr := &PeeringReport{}
		out.Peerings[p.Name] = pr
		names := append([]string(nil), p.Spec.Sites...)
		sort.Strings(names)
		for _, s := range names {
			if sites[s] == nil {
				pr.MissingSites = append(pr.MissingSites, s)
			}
		}
		topo := p.Spec.Topology
		if topo == "" {
			topo = netv1.TopologyGateway
		}
		ep := p.Spec.EndpointType
		if ep == "" {
			ep = netv1.EndpointExternal
		}
		var filter map[string]bool
		if len(p.Spec.GatewayPools) > 0 {
			filter = map[string]bool{}
			for _, gp := range p.Spec.GatewayPools {
				filter[gp] = true
			}
		}
		for i, a := range names {
			for _, b := range names[i+1:] {
				if a == b || sites[a] == nil || sites[b] == nil || seen[[2]string{a, b}] {
					continue
				}
				// The first peering by name owns a pair; later ones naming it again add nothing.
				seen[[2]string{a, b}] = true
				sa, sb := sites[a].site, sites[b].site
				proto := ResolveInterSite(p.Spec.Protocol, sa.Spec.Tunnel.InterSite, sb.Spec.Tunnel.InterSite)
				links = append(links, &link{
					peering: p, a: a, b: b, protocol: proto, topology: topo, poolFilter: filter, endpointType: ep,
					tunnelMTU: min(SiteMTU(sa), SiteMTU(sb)) - Overhead(proto),
				})
			}
		}
	}
	return links
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

// sitePrefixes are the destinations of a Site: its pools, pod CIDRs of its nodes outside them (nodes that
// moved in keep their CIDR), its node CIDRs and the routed CIDRs of the pools the link uses.
func sitePrefixes(si *siteInfo, filter map[string]bool) []string {
	set := map[string]bool{}
	for _, p := range si.site.Spec.PodCIDRPools {
		add(set, p.CIDR)
	}
	for _, n := range si.nodes {
		for _, c := range n.PodCIDRs {
			if !si.alloc.Contains(c) {
				add(set, c)
			}
		}
	}
	for _, c := range si.site.Spec.NodeCIDRs {
		add(set, c)
	}
	for _, p := range si.pools {
		if filter == nil || filter[p.Name] {
			for _, c := range p.Spec.RoutedCIDRs {
				add(set, c)
			}
		}
	}
	return sortedPrefixes(set)
}

func nonMasquerade(si *siteInfo) []string {
	set := map[string]bool{}
	for _, p := range si.site.Spec.PodCIDRPools {
		add(set, p.CIDR)
	}
	// Only CIDRs outside the pools: the pools cover the rest, and listing every node's block would rewrite
	// the plan whenever a node joins.
	for _, n := range si.nodes {
		for _, c := range n.PodCIDRs {
			if !si.alloc.Contains(c) {
				add(set, c)
			}
		}
	}
	for _, c := range si.site.Spec.NonMasqueradeCIDRs {
		add(set, c)
	}
	for _, l := range si.links {
		for _, c := range l.Prefixes {
			add(set, c)
		}
	}
	return sortedPrefixes(set)
}

// add inserts a canonical (masked) prefix; unparsable ones are dropped (the webhook rejects them).
func add(set map[string]bool, c string) {
	p, err := netip.ParsePrefix(c)
	if err != nil {
		return
	}
	set[p.Masked().String()] = true
}

// sortedPrefixes sorts IPv4 before IPv6, then by address and length, so the order is stable and readable.
func sortedPrefixes(set map[string]bool) []string {
	ps := make([]netip.Prefix, 0, len(set))
	for c := range set {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	sort.Slice(ps, func(i, j int) bool {
		if c := ps[i].Addr().Compare(ps[j].Addr()); c != 0 {
			return c < 0
		}
		return ps[i].Bits() < ps[j].Bits()
	})
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func managedLabels(site string, role netv1.SliceRole) map[string]string {
	l := map[string]string{netv1.SiteLabel: site, netv1.ManagedByLabel: netv1.ControllerName}
	if role != "" {
		l[netv1.SliceRoleLabel] = strings.ToLower(string(role))
	}
	return l
}

// SliceName is the name of a Site's n-th slice of a role.
func SliceName(site string, role netv1.SliceRole, n int) string {
	return fmt.Sprintf("%s-%s-%d", site, strings.ToLower(string(role)), n)
}

// slices shards a Site's peers. A node stays in the slice that held it (so one node's change rewrites one
// slice and a new node never shifts the others); new nodes fill the lowest-numbered slice with room.
func slices(si *siteInfo, in Input, pools map[string]*netv1.GatewayPool) []netv1.PeerSlice {
	size := in.SliceSize
	if size <= 0 {
		size = DefaultSliceSize
	}
	var out []netv1.PeerSlice
	for _, role := range []netv1.SliceRole{netv1.SliceRoleGateways, netv1.SliceRoleNodes} {
		prefix := SliceName(si.site.Name, role, 0)
		prefix = prefix[:len(prefix)-1]
		members := map[int][]netv1.Peer{}
		prevSlice := map[string]int{}
		for i := range in.Previous {
			ps := &in.Previous[i]
			if ps.Spec.Site != si.site.Name || ps.Spec.Role != role || !strings.HasPrefix(ps.Name, prefix) {
				continue
			}
			idx, err := strconv.Atoi(strings.TrimPrefix(ps.Name, prefix))
			if err != nil || idx < 0 {
				continue
			}
			for _, p := range ps.Spec.Peers {
				prevSlice[p.Node] = idx
			}
		}
		var unplaced []netv1.Peer
		for _, n := range si.nodes {
			isGw := len(si.candidate[n.Name]) > 0
			if isGw != (role == netv1.SliceRoleGateways) {
				continue
			}
			p := peer(si, n, pools)
			if idx, ok := prevSlice[n.Name]; ok && len(members[idx]) < size {
				members[idx] = append(members[idx], p)
				continue
			}
			unplaced = append(unplaced, p)
		}
		for _, p := range unplaced {
			idx := 0
			for len(members[idx]) >= size {
				idx++
			}
			members[idx] = append(members[idx], p)
		}
		idxs := make([]int, 0, len(members))
		for idx := range members {
			idxs = append(idxs, idx)
		}
		sort.Ints(idxs)
		for _, idx := range idxs {
			peers := members[idx]
			sort.Slice(peers, func(i, j int) bool { return peers[i].Node < peers[j].Node })
			out = append(out, netv1.PeerSlice{
				ObjectMeta: metav1.ObjectMeta{Name: SliceName(si.site.Name, role, idx), Labels: managedLabels(si.site.Name, role)},
				Spec:       netv1.PeerSliceSpec{Site: si.site.Name, Role: role, Peers: peers},
			})
		}
	}
	return out
}

func peer(si *siteInfo, n *Node, pools map[string]*netv1.GatewayPool) netv1.Peer {
	p := netv1.Peer{Node: n.Name, PodCIDRs: canonical(n.PodCIDRs), Endpoints: n.Addresses}
	if n.Network != nil {
		p.PublicKey = n.Network.PublicKey
		// A key rotation in progress: peers configure the next key beside the current one.
		p.WireGuardSlot, p.NextPublicKey = n.Network.WireGuardSlot, n.Network.NextPublicKey
		p.Ports = n.Network.Ports
		if len(n.Network.Endpoints) > 0 {
			p.Endpoints = n.Network.Endpoints
		}
		if len(n.Network.Protocols) > 0 {
			p.Protocols = append([]netv1.Protocol(nil), n.Network.Protocols...)
			sort.Slice(p.Protocols, func(i, j int) bool { return p.Protocols[i] < p.Protocols[j] })
		}
	}
	if len(p.Endpoints) == 0 {
		p.Endpoints = nil
	}
	if cands := si.candidate[n.Name]; len(cands) > 0 {
		gw := &netv1.PeerGateway{Pools: append([]string(nil), cands...), Active: si.active[n.Name]}
		set := map[string]bool{}
		var poolPorts netv1.Ports
		for _, name := range cands {
			gp := pools[name]
			for _, c := range gp.Spec.RoutedCIDRs {
				add(set, c)
			}
			// The first pool (by name) that sets a port decides it.
			fillPorts(&poolPorts, gp.Spec.ListenPorts, false)
		}
		// Pool ports win over the daemon's: gateways listen where the firewall is open.
		fillPorts(&p.Ports, poolPorts, true)
		gw.RoutedCIDRs = sortedPrefixes(set)
		p.Gateway = gw
	}
	return p
}

// fillPorts copies src's set ports into dst: all of them when override, else only where dst is unset.
func fillPorts(dst *netv1.Ports, src netv1.Ports, override bool) {
	for _, f := range []struct{ d, s *int32 }{
		{&dst.WireGuard, &src.WireGuard}, {&dst.VXLAN, &src.VXLAN}, {&dst.GENEVE, &src.GENEVE}, {&dst.Probe, &src.Probe},
	} {
		if *f.s != 0 && (override || *f.d == 0) {
			*f.d = *f.s
		}
	}
}

func canonical(cidrs []string) []string {
	if len(cidrs) == 0 {
		return nil
	}
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked().String())
		}
	}
	return out
}
