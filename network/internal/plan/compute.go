// Package plan computes the route plan — one RoutePlan per Site and the Sites' PeerSlices — as a pure
// function of the Sites, GatewayPools, SitePeerings, Nodes and the previously published slices. Purity is
// what makes publication diff-based: the same inputs give byte-identical objects, so a restarted
// controller writes nothing, and a change to one node rewrites only the objects that mention it.
package plan

import (
	"net/netip"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/gateway"
	"github.com/yonder-dev/yonder/network/internal/ipam"
)

// siteInfo is one Site while the plan is computed.
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

	// Memoized per pass (a Site is the end of up to one link per other Site: at 200 Sites, recomputing
	// these per link end was most of the plan's time).
	poolPfx   []netip.Prefix      // the Site's pod CIDR pools
	outside   map[string]bool     // pod CIDRs of its nodes outside its pools, canonical
	marks     map[string]int      // pod CIDRs (of any node) marked used in alloc, with how many nodes hold each
	podPfx    map[string]bool     // podPrefixes
	ends      map[string]*endMemo // by link filter key; only once gateways are assessed
	candsNAT  map[string]bool     // by link filter key: any of candidatesOf behind NAT
	anyNAT    *bool               // any node behind NAT
	nodeIndex map[string]*Node    // the Site's nodes by name
}

// endMemo is what a Site contributes to every link with the same pool filter.
type endMemo struct {
	gateways   []string // active gateways in the filter's pools, in node order
	hasCand    bool
	prefixes   []string // sitePrefixes
	membersNAT bool     // any of the members (active gateways, else candidates; every node without any) behind NAT
}

// planner computes one plan. Each method is one phase, run in the order run lists them; a phase
// only reads what earlier phases wrote.
type planner struct {
	in         Input
	out        *Output
	sites      map[string]*siteInfo
	siteNames  []string
	nodes      []*Node              // sorted by name
	pools      []*netv1.GatewayPool // sorted by name
	poolByName map[string]*netv1.GatewayPool
	selectors  map[string]labels.Selector // by pool; nil for a selector the webhook would reject
	poolIdx    poolIndex
	links      []*link
	linkByPair map[[2]string]*link
	siteSlices map[string][]netv1.PeerSlice // by Site, as publish computed them
}

// Compute computes the plan. It never fails: inputs the webhook would reject are skipped and show up in
// the reports.
func Compute(in Input) *Output {
	p := newPlanner(in)
	for i := range in.Nodes {
		p.nodes = append(p.nodes, &in.Nodes[i])
	}
	p.run()
	return p.out
}

func newPlanner(in Input) *planner {
	return &planner{in: in, sites: map[string]*siteInfo{}, poolByName: map[string]*netv1.GatewayPool{},
		selectors: map[string]labels.Selector{}, linkByPair: map[[2]string]*link{}, siteSlices: map[string][]netv1.PeerSlice{},
		out: &Output{Sites: map[string]*SiteReport{}, Pools: map[string]*PoolReport{}, Peerings: map[string]*PeeringReport{}}}
}

// run computes the whole plan of p.nodes.
func (p *planner) run() {
	p.indexSites()
	p.indexPools()
	p.assignNodes()
	p.selectCandidates()
	p.resolveLinks()
	p.assessGateways()
	p.reportPools()
	p.connectLinks()
	p.publish()
}

// indexSites creates every Site's state (its report is created by fillSite).
func (p *planner) indexSites() {
	for i := range p.in.Sites {
		s := &p.in.Sites[i]
		alloc := newAllocator(s)
		valid := !alloc.Empty() || len(s.Spec.PodCIDRPools) == 0
		si := &siteInfo{site: s, alloc: alloc, candidate: map[string][]string{}, active: map[string]bool{}, reason: map[string]string{},
			outside: map[string]bool{}, marks: map[string]int{}, ends: map[string]*endMemo{}, candsNAT: map[string]bool{}, nodeIndex: map[string]*Node{}}
		for _, pool := range s.Spec.PodCIDRPools {
			if pfx, err := netip.ParsePrefix(pool.CIDR); err == nil && valid {
				si.poolPfx = append(si.poolPfx, pfx.Masked())
			}
		}
		p.sites[s.Name] = si
		p.siteNames = append(p.siteNames, s.Name)
	}
	sort.Strings(p.siteNames)
}

// newAllocator is a Site's allocator; an empty one when its pools are invalid (the webhook rejects them).
func newAllocator(s *netv1.Site) *ipam.Allocator {
	alloc, err := ipam.New(s.Spec.PodCIDRPools)
	if err != nil {
		alloc, _ = ipam.New(nil)
	}
	return alloc
}

// assignNodes puts every Node into its Site and counts what the Site reports about its Nodes.
func (p *planner) assignNodes() {
	sort.Slice(p.nodes, func(i, j int) bool { return p.nodes[i].Name < p.nodes[j].Name })
	p.poolIdx = p.poolIndex()
	for _, n := range p.nodes {
		// Every pod CIDR counts against every Site's pools, wherever its node is now.
		for _, c := range n.PodCIDRs {
			for _, holder := range p.holders(c) {
				holder.marks[c]++
			}
		}
		if si := p.sites[n.Site]; si != nil {
			si.nodes = append(si.nodes, n)
		}
	}
	for _, name := range p.siteNames {
		p.fillSite(p.sites[name])
	}
}

// holders are the Sites with a pool that contains the pod CIDR c (one map access per distinct pool
// length, rather than asking each Site's allocator: at 200 Sites that was 10 million parses).
func (p *planner) holders(c string) []*siteInfo {
	pfx, err := netip.ParsePrefix(c)
	if err != nil {
		return nil
	}
	return p.poolIdx.containing(pfx)
}

// fillSite derives a Site's node state from si.nodes (sorted) and si.marks: its allocator, its nodes' pod
// CIDRs outside its pools, and the node counts of its report.
func (p *planner) fillSite(si *siteInfo) {
	r := &SiteReport{}
	p.out.Sites[si.site.Name] = r
	for c, k := range si.marks {
		if k > 0 {
			si.alloc.MarkUsed(c)
		}
	}
	for _, n := range si.nodes {
		si.nodeIndex[n.Name] = n
		for _, c := range n.PodCIDRs {
			if pfx, err := netip.ParsePrefix(c); err == nil && !containsSite(p.poolIdx.containing(pfx), si) {
				si.outside[pfx.Masked().String()] = true
			}
		}
		p.countNode(si, n, r)
	}
	r.Allocated, r.Capacity = si.alloc.Usage()
}

// poolIndex indexes the Sites' pools by prefix length, then prefix.
type poolIndex map[int]map[netip.Prefix][]*siteInfo

func (p *planner) poolIndex() poolIndex {
	idx := poolIndex{}
	for _, name := range p.siteNames {
		si := p.sites[name]
		for _, pfx := range si.poolPfx {
			if idx[pfx.Bits()] == nil {
				idx[pfx.Bits()] = map[netip.Prefix][]*siteInfo{}
			}
			if l := idx[pfx.Bits()][pfx]; len(l) == 0 || l[len(l)-1] != si {
				idx[pfx.Bits()][pfx] = append(l, si)
			}
		}
	}
	return idx
}

// containing are the Sites with a pool that contains pfx, in Site name order per pool length.
func (idx poolIndex) containing(pfx netip.Prefix) []*siteInfo {
	var out []*siteInfo
	for bits, byPfx := range idx {
		if bits > pfx.Bits() {
			continue
		}
		outer, err := pfx.Addr().Prefix(bits)
		if err != nil {
			continue
		}
		for _, si := range byPfx[outer] {
			if !containsSite(out, si) {
				out = append(out, si)
			}
		}
	}
	return out
}

func containsSite(l []*siteInfo, si *siteInfo) bool {
	for _, x := range l {
		if x == si {
			return true
		}
	}
	return false
}

func (p *planner) countNode(si *siteInfo, n *Node, r *SiteReport) {
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
	if si.behindNAT(n) {
		r.NodesBehindNAT++
	}
}

// indexPools sorts the GatewayPools, attaches them to their Sites and parses their selectors.
func (p *planner) indexPools() {
	for i := range p.in.Pools {
		p.pools = append(p.pools, &p.in.Pools[i])
	}
	sort.Slice(p.pools, func(i, j int) bool { return p.pools[i].Name < p.pools[j].Name })
	for _, gp := range p.pools {
		p.poolByName[gp.Name] = gp
		si := p.sites[gp.Spec.Site]
		if si == nil {
			continue
		}
		si.pools = append(si.pools, gp)
		if sel, err := metav1.LabelSelectorAsSelector(&gp.Spec.NodeSelector); err == nil {
			p.selectors[gp.Name] = sel
		}
	}
}

// selectCandidates records which Nodes each GatewayPool selects.
func (p *planner) selectCandidates() {
	for _, name := range p.siteNames {
		p.selectSite(p.sites[name])
	}
}

func (p *planner) selectSite(si *siteInfo) {
	for _, gp := range si.pools {
		sel := p.selectors[gp.Name]
		if sel == nil {
			continue
		}
		for _, n := range si.nodes {
			if sel.Matches(labels.Set(n.Labels)) {
				si.candidate[n.Name] = append(si.candidate[n.Name], gp.Name)
			}
		}
	}
}

// assessGateways decides which candidates are active (a WireGuard Gateway link needs their public key).
func (p *planner) assessGateways() {
	for _, l := range p.links {
		if l.protocol == netv1.ProtocolWireGuard && l.topology == netv1.TopologyGateway {
			p.sites[l.a].needsKey, p.sites[l.b].needsKey = true, true
		}
	}
	for _, name := range p.siteNames {
		p.assessSite(p.sites[name])
	}
}

func (p *planner) assessSite(si *siteInfo) {
	r := p.out.Sites[si.site.Name]
	for node := range si.candidate {
		n := si.nodeIndex[node]
		ok, reason := gateway.Health(gateway.Candidate{
			NodeReady: n.Ready, Unschedulable: n.Unschedulable, Deleting: n.Deleting,
			DataplaneReady: n.DataplaneReady, GatewayReady: n.GatewayReady,
			HasPublicKey: n.Network != nil && n.Network.PublicKey != "", NeedsPublicKey: si.needsKey,
		})
		si.active[node], si.reason[node] = ok, reason
		r.Gateways++
		if ok {
			r.Active++
		}
	}
}

// reportPools lists each pool's candidates with their state.
func (p *planner) reportPools() {
	for _, gp := range p.pools {
		p.reportPool(gp)
	}
}

func (p *planner) reportPool(gp *netv1.GatewayPool) {
	pr := &PoolReport{}
	p.out.Pools[gp.Name] = pr
	si := p.sites[gp.Spec.Site]
	if si == nil {
		return
	}
	pr.SiteFound = true
	for _, n := range si.nodes {
		if !contains(si.candidate[n.Name], gp.Name) {
			continue
		}
		gs := netv1.GatewayStatus{Node: n.Name, Active: si.active[n.Name], Reason: si.reason[n.Name]}
		pr.Gateways = append(pr.Gateways, gs)
		if gs.Active {
			pr.Active++
		}
	}
}

// publish writes one RoutePlan per Site and the Sites' PeerSlices.
func (p *planner) publish() {
	prev := p.previous()
	for _, name := range p.siteNames {
		si := p.sites[name]
		sort.Slice(si.links, func(i, j int) bool { return si.links[i].Site < si.links[j].Site })
		intra := ResolveIntraSite(si.site.Spec.Tunnel.IntraSite)
		p.out.Plans = append(p.out.Plans, netv1.RoutePlan{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedLabels(name, "")},
			Spec: netv1.RoutePlanSpec{
				Site:               name,
				IntraSite:          netv1.IntraSitePlan{Protocol: intra, TunnelMTU: SiteMTU(si.site) - Overhead(intra)},
				Links:              si.links,
				NonMasqueradeCIDRs: nonMasquerade(si),
				HealthProbe:        HealthProbe(si.site),
			},
		})
		p.siteSlices[name] = slices(si, p.in.SliceSize, prev[name], p.poolByName)
	}
	p.out.Slices = p.allSlices()
}

// allSlices are every Site's slices, sorted by name.
func (p *planner) allSlices() []netv1.PeerSlice {
	var out []netv1.PeerSlice
	for _, name := range p.siteNames {
		out = append(out, p.siteSlices[name]...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// previous indexes the published slices by Site.
func (p *planner) previous() map[string][]*netv1.PeerSlice {
	out := map[string][]*netv1.PeerSlice{}
	for i := range p.in.Previous {
		ps := &p.in.Previous[i]
		out[ps.Spec.Site] = append(out[ps.Spec.Site], ps)
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
