// Package plan computes the route plan — one RoutePlan per Site and the Sites' PeerSlices — as a pure
// function of the Sites, GatewayPools, SitePeerings, Nodes and the previously published slices. Purity is
// what makes publication diff-based: the same inputs give byte-identical objects, so a restarted
// controller writes nothing, and a change to one node rewrites only the objects that mention it.
package plan

import (
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
}

// planner computes one plan. Each method is one phase, run in the order Compute lists them; a phase
// only reads what earlier phases wrote.
type planner struct {
	in         Input
	out        *Output
	sites      map[string]*siteInfo
	siteNames  []string
	nodes      []*Node // sorted by name
	byName     map[string]*Node
	pools      []*netv1.GatewayPool // sorted by name
	poolByName map[string]*netv1.GatewayPool
	links      []*link
	linkByPair map[[2]string]*link
}

// Compute computes the plan. It never fails: inputs the webhook would reject are skipped and show up in
// the reports.
func Compute(in Input) *Output {
	p := &planner{in: in, sites: map[string]*siteInfo{}, byName: map[string]*Node{},
		poolByName: map[string]*netv1.GatewayPool{}, linkByPair: map[[2]string]*link{},
		out: &Output{Sites: map[string]*SiteReport{}, Pools: map[string]*PoolReport{}, Peerings: map[string]*PeeringReport{}}}
	p.indexSites()
	p.assignNodes()
	p.selectCandidates()
	p.resolveLinks()
	p.assessGateways()
	p.reportPools()
	p.connectLinks()
	p.publish()
	return p.out
}

// indexSites creates every Site's state and its (empty) report.
func (p *planner) indexSites() {
	for i := range p.in.Sites {
		s := &p.in.Sites[i]
		alloc, err := ipam.New(s.Spec.PodCIDRPools)
		if err != nil {
			alloc, _ = ipam.New(nil)
		}
		p.sites[s.Name] = &siteInfo{site: s, alloc: alloc, candidate: map[string][]string{}, active: map[string]bool{}, reason: map[string]string{}}
		p.out.Sites[s.Name] = &SiteReport{}
		p.siteNames = append(p.siteNames, s.Name)
	}
	sort.Strings(p.siteNames)
}

// assignNodes puts every Node into its Site and counts what the Site reports about its Nodes.
func (p *planner) assignNodes() {
	for i := range p.in.Nodes {
		p.nodes = append(p.nodes, &p.in.Nodes[i])
	}
	sort.Slice(p.nodes, func(i, j int) bool { return p.nodes[i].Name < p.nodes[j].Name })
	for _, n := range p.nodes {
		p.byName[n.Name] = n
		// Every pod CIDR counts against every Site's pools, wherever its node is now.
		for _, si := range p.sites {
			for _, c := range n.PodCIDRs {
				si.alloc.MarkUsed(c)
			}
		}
		si := p.sites[n.Site]
		if si == nil {
			continue
		}
		si.nodes = append(si.nodes, n)
		p.countNode(si, n, p.out.Sites[n.Site])
	}
	for name, si := range p.sites {
		p.out.Sites[name].Allocated, p.out.Sites[name].Capacity = si.alloc.Usage()
	}
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

// selectCandidates records which Nodes each GatewayPool selects.
func (p *planner) selectCandidates() {
	for i := range p.in.Pools {
		p.pools = append(p.pools, &p.in.Pools[i])
	}
	sort.Slice(p.pools, func(i, j int) bool { return p.pools[i].Name < p.pools[j].Name })
	for _, gp := range p.pools {
		p.poolByName[gp.Name] = gp
		pr := &PoolReport{}
		p.out.Pools[gp.Name] = pr
		si := p.sites[gp.Spec.Site]
		if si == nil {
			continue
		}
		pr.SiteFound = true
		si.pools = append(si.pools, gp)
		sel, err := metav1.LabelSelectorAsSelector(&gp.Spec.NodeSelector)
		if err != nil {
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
		si := p.sites[name]
		for node := range si.candidate {
			n := p.byName[node]
			ok, reason := gateway.Health(gateway.Candidate{
				NodeReady: n.Ready, Unschedulable: n.Unschedulable, Deleting: n.Deleting,
				DataplaneReady: n.DataplaneReady, GatewayReady: n.GatewayReady,
				HasPublicKey: n.Network != nil && n.Network.PublicKey != "", NeedsPublicKey: si.needsKey,
			})
			si.active[node], si.reason[node] = ok, reason
			p.out.Sites[name].Gateways++
			if ok {
				p.out.Sites[name].Active++
			}
		}
	}
}

// reportPools lists each pool's candidates with their state.
func (p *planner) reportPools() {
	for _, gp := range p.pools {
		si := p.sites[gp.Spec.Site]
		if si == nil {
			continue
		}
		pr := p.out.Pools[gp.Name]
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
}

// publish writes one RoutePlan per Site and the Sites' PeerSlices.
func (p *planner) publish() {
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
		p.out.Slices = append(p.out.Slices, slices(si, p.in, p.poolByName)...)
	}
	sort.Slice(p.out.Slices, func(i, j int) bool { return p.out.Slices[i].Name < p.out.Slices[j].Name })
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
