package plan

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

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
func slices(si *siteInfo, size int, previous []*netv1.PeerSlice, pools map[string]*netv1.GatewayPool) []netv1.PeerSlice {
	if size <= 0 {
		size = DefaultSliceSize
	}
	var out []netv1.PeerSlice
	for _, role := range []netv1.SliceRole{netv1.SliceRoleGateways, netv1.SliceRoleNodes} {
		prefix := SliceName(si.site.Name, role, 0)
		prefix = prefix[:len(prefix)-1]
		members := map[int][]netv1.Peer{}
		prevSlice := map[string]int{}
		for _, ps := range previous {
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
	p := netv1.Peer{Node: n.Name, PodCIDRs: canonical(n.PodCIDRs), Endpoints: n.Addresses, BehindNAT: si.behindNAT(n)}
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
