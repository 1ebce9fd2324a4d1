package plan

import (
	"net/netip"
	"sort"
)

// sitePrefixes are the destinations of a Site: its pools, pod CIDRs of its nodes outside them (nodes that
// moved in keep their CIDR), its node CIDRs and the routed CIDRs of the pools the link uses.
func sitePrefixes(si *siteInfo, filter map[string]bool) []string {
	set := copySet(podPrefixes(si))
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

// podPrefixes are a Site's pod destinations: its pools and the pod CIDRs of its nodes outside them. Only
// CIDRs outside the pools: the pools cover the rest, and listing every node's block would rewrite the plan
// whenever a node joins. Computed once per pass (assignNodes found the CIDRs outside); callers copy it.
func podPrefixes(si *siteInfo) map[string]bool {
	if si.podPfx != nil {
		return si.podPfx
	}
	set := map[string]bool{}
	for _, p := range si.site.Spec.PodCIDRPools {
		add(set, p.CIDR)
	}
	for c := range si.outside {
		set[c] = true
	}
	si.podPfx = set
	return set
}

func copySet(s map[string]bool) map[string]bool {
	out := make(map[string]bool, len(s))
	for k := range s {
		out[k] = true
	}
	return out
}

// nonMasquerade are the destinations a Site's pods reach without SNAT: its own pod destinations, its
// spec.nonMasqueradeCIDRs and every link's prefixes.
func nonMasquerade(si *siteInfo) []string {
	set := copySet(podPrefixes(si))
	for _, c := range si.site.Spec.NonMasqueradeCIDRs {
		add(set, c)
	}
	for _, l := range si.links {
		// Link prefixes are canonical already (sortedPrefixes wrote them).
		for _, c := range l.Prefixes {
			set[c] = true
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
