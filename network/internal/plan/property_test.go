package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// randomInput builds a cluster from a seed: 2-5 Sites with random protocols and MTUs, random gateway pools,
// peerings and node health, and nodes without Site.
func randomInput(r *rand.Rand) Input {
	protos := []netv1.Protocol{netv1.ProtocolAuto, netv1.ProtocolWireGuard, netv1.ProtocolVXLAN, netv1.ProtocolGENEVE, netv1.ProtocolIPIP, netv1.ProtocolNone, ""}
	in := Input{SliceSize: 1 + r.IntN(5)}
	nSites := 2 + r.IntN(4)
	var names []string
	for s := range nSites {
		name := fmt.Sprintf("s%d", s)
		names = append(names, name)
		in.Sites = append(in.Sites, site(name, fmt.Sprintf("10.%d.0.0/16", s), interSite(protos[r.IntN(len(protos))]), mtu(int32(1280+r.IntN(8000)))))
		if r.IntN(3) > 0 {
			in.Pools = append(in.Pools, pool(name+"-gw", name))
		}
	}
	for p := range 1 + r.IntN(3) {
		var members []string
		for _, n := range names {
			if r.IntN(2) == 0 {
				members = append(members, n)
			}
		}
		if len(members) < 2 {
			members = names[:2]
		}
		topo := netv1.TopologyGateway
		if r.IntN(3) == 0 {
			topo = netv1.TopologyFullMesh
		}
		pr := peering(fmt.Sprintf("p%d", p), topo, members...)
		pr.Spec.Protocol = protos[r.IntN(len(protos))]
		in.Peerings = append(in.Peerings, pr)
	}
	for i := range r.IntN(40) {
		siteName := ""
		if r.IntN(8) > 0 {
			siteName = names[r.IntN(nSites)]
		}
		n := node(fmt.Sprintf("n%03d", i), siteName, fmt.Sprintf("10.%d.%d.0/24", r.IntN(nSites), i))
		if r.IntN(3) == 0 {
			n.Labels["gateway"] = "true"
		}
		n.Ready, n.DataplaneReady, n.Unschedulable = r.IntN(4) > 0, r.IntN(4) > 0, r.IntN(10) == 0
		if r.IntN(5) == 0 {
			n.Network = nil
		}
		in.Nodes = append(in.Nodes, n)
	}
	return in
}

// Invariants over many random clusters and random changes between passes: every assigned node is in
// exactly one slice of its Site and role, slices respect the size, links agree in both directions, no Auto
// is ever published, listed gateways are active candidates, and recomputing from what was published
// writes nothing.
func TestPlanInvariants(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 42))
		in := randomInput(r)
		var prev *Output
		for step := range 3 {
			g := NewWithT(t)
			out := compute(in, prev)
			ctx := fmt.Sprintf("seed %d step %d", seed, step)

			where := map[string]string{}
			for _, s := range out.Slices {
				g.Expect(len(s.Spec.Peers)).To(And(BeNumerically(">", 0), BeNumerically("<=", in.SliceSize)), ctx)
				for _, p := range s.Spec.Peers {
					g.Expect(where).NotTo(HaveKey(p.Node), ctx)
					where[p.Node] = s.Spec.Site
					g.Expect(p.Gateway != nil).To(Equal(s.Spec.Role == netv1.SliceRoleGateways), ctx)
				}
			}
			active := map[string]bool{}
			for _, s := range out.Slices {
				for _, p := range s.Spec.Peers {
					if p.Gateway != nil && p.Gateway.Active {
						active[p.Node] = true
					}
				}
			}
			for _, n := range in.Nodes {
				if n.Site == "" {
					g.Expect(where).NotTo(HaveKey(n.Name), ctx)
				} else {
					g.Expect(where[n.Name]).To(Equal(n.Site), ctx)
				}
			}
			for _, p := range out.Plans {
				g.Expect(p.Spec.IntraSite.Protocol).NotTo(Equal(netv1.ProtocolAuto), ctx)
				for _, l := range p.Spec.Links {
					g.Expect(l.Protocol).NotTo(Equal(netv1.ProtocolAuto), ctx)
					back := linkOf(out, l.Site, p.Name)
					g.Expect(back.Protocol).To(Equal(l.Protocol), ctx)
					g.Expect(back.TunnelMTU).To(Equal(l.TunnelMTU), ctx)
					g.Expect(back.Mode).To(Equal(l.Mode), ctx)
					g.Expect(back.LocalGateways).To(Equal(l.RemoteGateways), ctx)
					g.Expect(back.SelfGateway).To(Equal(l.RemoteSelfGateway), ctx)
					for _, gw := range append(append([]string(nil), l.LocalGateways...), l.RemoteGateways...) {
						g.Expect(active).To(HaveKey(gw), ctx)
					}
				}
			}
			g.Expect(changed(out, compute(in, out))).To(BeEmpty(), ctx)

			// A random change for the next step: a node's health, site or key flips.
			if len(in.Nodes) > 0 {
				n := &in.Nodes[r.IntN(len(in.Nodes))]
				switch r.IntN(3) {
				case 0:
					n.Ready = !n.Ready
				case 1:
					n.Site = in.Sites[r.IntN(len(in.Sites))].Name
				case 2:
					if n.Network != nil {
						n.Network = &netv1.NodeNetworkSpec{PublicKey: key(ctx)}
					}
				}
			}
			prev = out
		}
	}
}
