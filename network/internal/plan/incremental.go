package plan

import (
	"fmt"
	"maps"
	"reflect"
	stdslices "slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Planner computes the plan pass after pass, incrementally: it remembers the last pass and, when only
// Nodes changed and none of the changes reaches beyond its Site (a gateway's health, a node behind NAT,
// a pod CIDR outside the pools do), it recomputes only the Sites the changed Nodes are (or were) in and
// the Sites whose pools hold their pod CIDRs, and reuses every other Site's slices, the RoutePlans, the
// links and the reports. Anything else (a Site, pool or peering changed, a change that moves a link) is a
// full computation, the same Compute runs. The result is always what Compute returns for the same Input;
// the tests check it after random sequences of changes.
//
// The Planner keeps references to the maps and slices inside the Nodes it is given (not to the Input's
// Nodes slice itself): callers replace a Node's Labels, PodCIDRs or Network rather than mutate them, as
// objects from an informer cache are replaced rather than mutated. A Planner is not safe for concurrent use.
type Planner struct {
	last *planner
	// nodes are the planner's own copies of the last Input's Nodes, by name; the last planner points at them.
	nodes map[string]*Node
	// prev identifies the last Input's Previous slices, and mine the last Output's, by Site: a Site's
	// slices need no recomputation while its Previous is either (slices are a fixpoint of their own
	// publication).
	prev, mine map[string][]sliceRef
	// sig is each Site's link signature: what of its state other Sites' plans depend on.
	sig map[string]string
	// incremental counts the passes that were incremental (tests and benchmarks read it).
	incremental int
}

// sliceRef identifies a published slice without comparing its peers: by resourceVersion when it has one
// (an object from the apiserver), else by the identity of its peers' backing array (an Output of ours).
type sliceRef struct {
	name, resourceVersion string
	peers                 *netv1.Peer
	n                     int
}

// Incremental is the number of passes the Planner computed incrementally.
func (pl *Planner) Incremental() int { return pl.incremental }

// Compute returns the plan of in. Objects in the Output that did not change since the last pass are the
// same objects as in the last Output (Output.Fresh says which were computed anew).
func (pl *Planner) Compute(in Input) *Output {
	if pl.last != nil && sameConfig(pl.last.in, in) {
		if out := pl.incrementalPass(in); out != nil {
			pl.incremental++
			return out
		}
	}
	return pl.full(in)
}

// full computes the whole plan and remembers it.
func (pl *Planner) full(in Input) *Output {
	// The configuration is copied: the next pass compares its own with it, and a caller may reuse (and
	// change) the objects it passed.
	in.Sites, in.Pools, in.Peerings = deepCopies(in.Sites), deepCopies(in.Pools), deepCopies(in.Peerings)
	pl.nodes = make(map[string]*Node, len(in.Nodes))
	p := newPlanner(in)
	p.nodes = make([]*Node, 0, len(in.Nodes))
	for i := range in.Nodes {
		n := in.Nodes[i]
		pl.nodes[n.Name] = &n
		p.nodes = append(p.nodes, &n)
	}
	p.run()
	pl.last = p
	pl.prev, pl.mine = previousRefs(in.Previous), previousRefs(p.out.Slices)
	pl.sig = map[string]string{}
	for name, si := range p.sites {
		pl.sig[name] = linkSignature(si)
	}
	return p.out
}

// incrementalPass recomputes the Sites that changed; nil when the change reaches other Sites' plans (the
// caller then computes everything).
func (pl *Planner) incrementalPass(in Input) *Output {
	p := pl.last
	// old is the planner's copy (nil for a new Node), cur the new view (nil for a Node gone), wasIn the
	// Site old was in before the copy was updated.
	type change struct {
		old, cur *Node
		wasIn    string
	}
	var changes []change
	seen := 0
	for i := range in.Nodes {
		n := &in.Nodes[i]
		old := pl.nodes[n.Name]
		if old != nil {
			seen++
		}
		if old == nil || !sameNode(old, n) {
			changes = append(changes, change{old: old, cur: n})
		}
	}
	if seen != len(pl.nodes) {
		present := make(map[string]bool, len(in.Nodes))
		for i := range in.Nodes {
			present[in.Nodes[i].Name] = true
		}
		for name, old := range pl.nodes {
			if !present[name] {
				changes = append(changes, change{old: old})
			}
		}
	}
	prev := previousRefs(in.Previous)
	dirty := map[string]bool{}
	for name := range p.sites {
		if !stdslices.Equal(prev[name], pl.prev[name]) && !stdslices.Equal(prev[name], pl.mine[name]) {
			dirty[name] = true
		}
	}
	if len(changes) == 0 && len(dirty) == 0 {
		return pl.reuse(in, nil, nil)
	}

	// Apply the changes to the planner's own Nodes, moving pod CIDR marks and remembering which Sites
	// they touch. Once this starts, the last pass is being rewritten: a fallback recomputes everything.
	for i := range changes {
		c := &changes[i]
		if c.old != nil {
			c.wasIn = c.old.Site
			dirty[c.old.Site] = true
			for _, cidr := range c.old.PodCIDRs {
				for _, h := range p.holders(cidr) {
					h.marks[cidr]--
					if h.marks[cidr] <= 0 {
						delete(h.marks, cidr)
					}
					dirty[h.site.Name] = true
				}
			}
		}
		if c.cur == nil {
			delete(pl.nodes, c.old.Name)
			continue
		}
		dirty[c.cur.Site] = true
		for _, cidr := range c.cur.PodCIDRs {
			for _, h := range p.holders(cidr) {
				h.marks[cidr]++
				dirty[h.site.Name] = true
			}
		}
		if c.old != nil {
			*c.old = *c.cur
		} else {
			n := *c.cur
			pl.nodes[n.Name] = &n
		}
	}
	delete(dirty, "")
	for name := range dirty {
		if p.sites[name] == nil {
			delete(dirty, name)
		}
	}

	// Rebuild the dirty Sites from the Nodes now in them: those they had that are still there, and the
	// changed ones that arrived.
	members := map[string][]*Node{}
	for name := range dirty {
		for _, n := range p.sites[name].nodes {
			if n.Site == name && pl.nodes[n.Name] == n {
				members[name] = append(members[name], n)
			}
		}
	}
	for _, c := range changes {
		if c.cur == nil || c.old != nil && c.wasIn == c.cur.Site {
			continue // gone, or still in the Site it was in (and so already listed)
		}
		if n := pl.nodes[c.cur.Name]; dirty[n.Site] {
			members[n.Site] = append(members[n.Site], n)
		}
	}
	// The configuration stays the planner's copy (the same as in's: sameConfig said so).
	in.Sites, in.Pools, in.Peerings = p.in.Sites, p.in.Pools, p.in.Peerings
	p.in = in
	// The new Output's report maps are copies: the last Output stays what it was.
	p.out = &Output{Plans: p.out.Plans, Slices: p.out.Slices, Peerings: p.out.Peerings,
		Sites: maps.Clone(p.out.Sites), Pools: maps.Clone(p.out.Pools)}
	linksWithoutGate := map[string][]string{}
	for name := range dirty {
		si := p.sites[name]
		linksWithoutGate[name] = p.out.Sites[name].GatewayLinksWithoutGate
		nodes := members[name]
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
		si.resetNodes(nodes)
		p.fillSite(si)
		p.selectSite(si)
		p.assessSite(si)
		if linkSignature(si) != pl.sig[name] {
			// The change reaches the links (and so other Sites' plans): recompute everything.
			return nil
		}
	}
	for _, gp := range p.pools {
		if dirty[gp.Spec.Site] {
			p.reportPool(gp)
		}
	}
	pl.prev = prev
	return pl.reuse(in, dirty, linksWithoutGate)
}

// reuse returns the last pass's plan with the dirty Sites' slices recomputed. Their reports were rebuilt
// but for the part connectLinks wrote, which is unchanged (their link signatures are).
func (pl *Planner) reuse(in Input, dirty map[string]bool, linksWithoutGate map[string][]string) *Output {
	p := pl.last
	prevBySite := p.previous()
	fresh := map[string]bool{}
	for name := range dirty {
		p.out.Sites[name].GatewayLinksWithoutGate = linksWithoutGate[name]
		p.siteSlices[name] = slices(p.sites[name], in.SliceSize, prevBySite[name], p.poolByName)
		pl.mine[name] = previousRefs(p.siteSlices[name])[name]
		for _, s := range p.siteSlices[name] {
			fresh[SliceKey(s.Name)] = true
		}
	}
	out := &Output{Plans: p.out.Plans, Slices: p.out.Slices, Sites: p.out.Sites, Pools: p.out.Pools, Peerings: p.out.Peerings, Fresh: fresh}
	if len(dirty) > 0 {
		out.Slices = p.allSlices()
	}
	p.out = out
	return out
}

// resetNodes replaces the Site's nodes and drops everything derived from them.
func (si *siteInfo) resetNodes(nodes []*Node) {
	si.nodes = nodes
	si.nodeIndex = map[string]*Node{}
	si.alloc = newAllocator(si.site)
	si.outside, si.podPfx, si.anyNAT = map[string]bool{}, nil, nil
	si.candidate, si.active, si.reason = map[string][]string{}, map[string]bool{}, map[string]string{}
	si.ends, si.candsNAT = map[string]*endMemo{}, map[string]bool{}
}

// linkSignature is everything of a Site the links (and so every peered Site's plan) depend on, beyond
// the configuration: its gateway candidates with their pools, health and reachability, whether any node
// is behind NAT, and the pod CIDRs of its nodes outside its pools.
func linkSignature(si *siteInfo) string {
	var b strings.Builder
	for _, n := range si.nodes {
		if pools := si.candidate[n.Name]; len(pools) > 0 {
			fmt.Fprintf(&b, "%s%v%t%t;", n.Name, pools, si.active[n.Name], si.behindNAT(n))
		}
	}
	fmt.Fprintf(&b, "|%t|", si.anyBehindNAT())
	outside := make([]string, 0, len(si.outside))
	for c := range si.outside {
		outside = append(outside, c)
	}
	sort.Strings(outside)
	b.WriteString(strings.Join(outside, ","))
	return b.String()
}

func deepCopies[T any, P interface {
	*T
	DeepCopyInto(*T)
}](l []T) []T {
	out := make([]T, len(l))
	for i := range l {
		P(&l[i]).DeepCopyInto(&out[i])
	}
	return out
}

func previousRefs(previous []netv1.PeerSlice) map[string][]sliceRef {
	out := map[string][]sliceRef{}
	for i := range previous {
		ps := &previous[i]
		ref := sliceRef{name: ps.Name, resourceVersion: ps.ResourceVersion, n: len(ps.Spec.Peers)}
		if ref.resourceVersion == "" && ref.n > 0 {
			ref.peers = &ps.Spec.Peers[0]
		}
		out[ps.Spec.Site] = append(out[ps.Spec.Site], ref)
	}
	for _, refs := range out {
		sort.Slice(refs, func(i, j int) bool { return refs[i].name < refs[j].name })
	}
	return out
}

// sameConfig reports whether two Inputs have the same Sites, GatewayPools, SitePeerings and slice size
// (in any order: the controller lists them from a cache).
func sameConfig(a, b Input) bool {
	if a.SliceSize != b.SliceSize || len(a.Sites) != len(b.Sites) || len(a.Pools) != len(b.Pools) || len(a.Peerings) != len(b.Peerings) {
		return false
	}
	sites := make(map[string]*netv1.Site, len(a.Sites))
	for i := range a.Sites {
		sites[a.Sites[i].Name] = &a.Sites[i]
	}
	for i := range b.Sites {
		if o := sites[b.Sites[i].Name]; o == nil || !equality.Semantic.DeepEqual(o.Spec, b.Sites[i].Spec) {
			return false
		}
	}
	pools := make(map[string]*netv1.GatewayPool, len(a.Pools))
	for i := range a.Pools {
		pools[a.Pools[i].Name] = &a.Pools[i]
	}
	for i := range b.Pools {
		if o := pools[b.Pools[i].Name]; o == nil || !equality.Semantic.DeepEqual(o.Spec, b.Pools[i].Spec) {
			return false
		}
	}
	peerings := make(map[string]*netv1.SitePeering, len(a.Peerings))
	for i := range a.Peerings {
		peerings[a.Peerings[i].Name] = &a.Peerings[i]
	}
	for i := range b.Peerings {
		if o := peerings[b.Peerings[i].Name]; o == nil || !equality.Semantic.DeepEqual(o.Spec, b.Peerings[i].Spec) {
			return false
		}
	}
	return true
}

// sameNode reports whether two views of a Node plan the same. Most Nodes are unchanged between passes,
// so the cheap comparisons come first and reflection only looks at a daemon publication that is a
// different object.
func sameNode(a, b *Node) bool {
	if a.Version != "" && a.Version == b.Version {
		return a.Site == b.Site && stdslices.Equal(a.Conflicts, b.Conflicts)
	}
	if a.Name != b.Name || a.Site != b.Site || a.Ready != b.Ready || a.Unschedulable != b.Unschedulable ||
		a.Deleting != b.Deleting || a.DataplaneReady != b.DataplaneReady ||
		!stdslices.Equal(a.PodCIDRs, b.PodCIDRs) || !stdslices.Equal(a.Addresses, b.Addresses) || !stdslices.Equal(a.Conflicts, b.Conflicts) {
		return false
	}
	if (a.GatewayReady == nil) != (b.GatewayReady == nil) || a.GatewayReady != nil && *a.GatewayReady != *b.GatewayReady {
		return false
	}
	if len(a.Labels) != len(b.Labels) {
		return false
	}
	for k, v := range a.Labels {
		if w, ok := b.Labels[k]; !ok || w != v {
			return false
		}
	}
	if a.Network == b.Network {
		return true
	}
	return a.Network != nil && b.Network != nil && reflect.DeepEqual(*a.Network, *b.Network)
}
