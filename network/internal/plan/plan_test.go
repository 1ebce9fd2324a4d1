package plan

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sort"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// ---- builders ----

func site(name string, pool string, mutate ...func(*netv1.Site)) netv1.Site {
	s := netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if pool != "" {
		s.Spec.PodCIDRPools = []netv1.PodCIDRPool{{CIDR: pool}}
	}
	for _, m := range mutate {
		m(&s)
	}
	return s
}

func interSite(p netv1.Protocol) func(*netv1.Site) {
	return func(s *netv1.Site) { s.Spec.Tunnel.InterSite = p }
}
func mtu(m int32) func(*netv1.Site) { return func(s *netv1.Site) { s.Spec.MTU = m } }

func key(name string) string {
	// A syntactically valid WireGuard key (32 bytes, base64), distinct per name.
	sum := sha256.Sum256([]byte(name))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func node(name, siteName, podCIDR string, mutate ...func(*Node)) Node {
	n := Node{
		Name: name, Site: siteName, Ready: true, DataplaneReady: true,
		Labels:    map[string]string{},
		Addresses: []netv1.Endpoint{{Address: "192.0.2.1", Type: netv1.EndpointInternal}},
		Network:   &netv1.NodeNetworkSpec{PublicKey: key(name), Ports: netv1.Ports{WireGuard: 51820}},
	}
	if podCIDR != "" {
		n.PodCIDRs = []string{podCIDR}
	}
	for _, m := range mutate {
		m(&n)
	}
	return n
}

func gw(n *Node)       { n.Labels["gateway"] = "true" }
func notReady(n *Node) { n.Ready = false }

func pool(name, siteName string, mutate ...func(*netv1.GatewayPool)) netv1.GatewayPool {
	p := netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.GatewayPoolSpec{
		Site: siteName, NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gateway": "true"}},
	}}
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func peering(name string, topo netv1.Topology, sites ...string) netv1.SitePeering {
	return netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.SitePeeringSpec{Sites: sites, Topology: topo}}
}

func planOf(out *Output, siteName string) netv1.RoutePlanSpec {
	for _, p := range out.Plans {
		if p.Name == siteName {
			return p.Spec
		}
	}
	panic("no plan for " + siteName)
}

func linkOf(out *Output, from, to string) netv1.SiteLink {
	for _, l := range planOf(out, from).Links {
		if l.Site == to {
			return l
		}
	}
	panic(fmt.Sprintf("no link %s→%s", from, to))
}

func sliceOf(out *Output, nodeName string) string {
	for _, s := range out.Slices {
		for _, p := range s.Spec.Peers {
			if p.Node == nodeName {
				return s.Name
			}
		}
	}
	return ""
}

// changed lists the objects a publication of after over before would write ("plan/x", "slice/y").
func changed(before, after *Output) []string {
	var names []string
	pc := DiffPlans(after.Plans, before.Plans)
	for _, l := range [][]netv1.RoutePlan{pc.Create, pc.Update, pc.Delete} {
		for _, o := range l {
			names = append(names, "plan/"+o.Name)
		}
	}
	sc := DiffSlices(after.Slices, before.Slices)
	for _, l := range [][]netv1.PeerSlice{sc.Create, sc.Update, sc.Delete} {
		for _, o := range l {
			names = append(names, "slice/"+o.Name)
		}
	}
	sort.Strings(names)
	return names
}

// compute runs Compute with the previous output's slices, as the controller does.
func compute(in Input, prev *Output) *Output {
	if prev != nil {
		in.Previous = prev.Slices
	}
	return Compute(in)
}

// ---- tests ----

func TestResolveInterSite(t *testing.T) {
	const (
		wg, vx, gn, ip, none, auto = netv1.ProtocolWireGuard, netv1.ProtocolVXLAN, netv1.ProtocolGENEVE, netv1.ProtocolIPIP, netv1.ProtocolNone, netv1.ProtocolAuto
	)
	cases := []struct{ peering, a, b, want netv1.Protocol }{
		{"", auto, auto, wg},
		{"", "", "", wg},
		{"", vx, vx, vx},
		{"", vx, auto, wg}, // encryption wins over Auto
		{"", vx, gn, wg},   // disagreement: encryption wins
		{"", none, none, none},
		{"", wg, vx, wg},
		{ip, wg, wg, ip}, // an explicit peering protocol overrides
		{auto, vx, vx, vx},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(ResolveInterSite(tc.peering, tc.a, tc.b)).To(Equal(tc.want), "%+v", tc)
	}
	NewWithT(t).Expect(ResolveIntraSite(auto)).To(Equal(vx))
	NewWithT(t).Expect(ResolveIntraSite(none)).To(Equal(none))
}

// The scenarios of the issue: each step is a change to the inputs; the test checks the resulting plan and
// that exactly the objects that mention what changed are rewritten.
// planStep is one step of a scenario: a change to the input and what the plan must then be.
type planStep struct {
	name    string
	in      func(*Input)
	check   func(g Gomega, out *Output)
	changed []string // exact set of objects rewritten relative to the previous step (nil: no writes)
}

// planScenario is a base input and its steps, each computed from the previous step's publication.
type planScenario struct {
	name  string
	base  Input
	steps []planStep
}

func TestRoutePlanScenarios(t *testing.T) {
	cases := []planScenario{fullMeshScenario(), gatewaysAppearingScenario(), nodeMovesScenario(), poolExhaustionScenario(), fiveSitesScenario()}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.base
			prev := &Output{}
			for _, st := range tc.steps {
				g := NewWithT(t)
				if st.in != nil {
					st.in(&in)
				}
				out := compute(in, prev)
				if st.check != nil {
					st.check(g, out)
				}
				g.Expect(changed(prev, out)).To(Equal(st.changed), "step %q", st.name)
				// Idempotence: computing again from what was just published writes nothing (a restart).
				g.Expect(changed(out, compute(in, out))).To(BeEmpty(), "step %q: recompute", st.name)
				prev = out
			}
		})
	}
}

func fullMeshScenario() planScenario {
	return planScenario{
		name: "two sites full mesh, mixed protocols: encryption wins",
		base: Input{
			Sites:    []netv1.Site{site("a", "10.1.0.0/16", interSite(netv1.ProtocolVXLAN), mtu(9000)), site("b", "10.2.0.0/16", interSite(netv1.ProtocolAuto))},
			Nodes:    []Node{node("a1", "a", "10.1.0.0/24"), node("a2", "a", "10.1.1.0/24"), node("b1", "b", "10.2.0.0/24")},
			Peerings: []netv1.SitePeering{peering("ab", netv1.TopologyFullMesh, "a", "b")},
		},
		steps: []planStep{{
			name: "initial",
			check: func(g Gomega, out *Output) {
				l := linkOf(out, "a", "b")
				g.Expect(l.Protocol).To(Equal(netv1.ProtocolWireGuard))
				g.Expect(l.Mode).To(Equal(netv1.LinkModeDirect))
				g.Expect(l.TunnelMTU).To(Equal(int32(1500 - 130))) // the smaller end, minus WireGuard over IPv6 with VXLAN inside
				g.Expect(l.Prefixes).To(Equal([]string{"10.2.0.0/16"}))
				g.Expect(l.EndpointType).To(Equal(netv1.EndpointExternal))
				g.Expect(planOf(out, "a").IntraSite).To(Equal(netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 9000 - 70}))
				g.Expect(planOf(out, "a").NonMasqueradeCIDRs).To(Equal([]string{"10.1.0.0/16", "10.2.0.0/16"}))
				g.Expect(planOf(out, "a").HealthProbe).To(Equal(netv1.HealthProbeSpec{IntervalMilliseconds: 200, FailureThreshold: 3, Port: 51822}))
				g.Expect(out.Slices).To(HaveLen(2)) // a-nodes-0, b-nodes-0: no gateways anywhere
				g.Expect(sliceOf(out, "a2")).To(Equal("a-nodes-0"))
			},
			changed: []string{"plan/a", "plan/b", "slice/a-nodes-0", "slice/b-nodes-0"},
		}, {
			name:    "both prefer VXLAN: the link uses VXLAN and only the two plans change",
			in:      func(in *Input) { in.Sites[1].Spec.Tunnel.InterSite = netv1.ProtocolVXLAN },
			check:   func(g Gomega, out *Output) { g.Expect(linkOf(out, "b", "a").Protocol).To(Equal(netv1.ProtocolVXLAN)) },
			changed: []string{"plan/a", "plan/b"},
		}, {
			name:    "one node's key changes: exactly its slice",
			in:      func(in *Input) { in.Nodes[1].Network.PublicKey = key("a2-rotated") },
			changed: []string{"slice/a-nodes-0"},
		}, {
			name: "a node starts a key rotation: its slice carries the next key and slot",
			in: func(in *Input) {
				in.Nodes[1].Network.NextPublicKey = key("a2-next")
			},
			check: func(g Gomega, out *Output) {
				for _, sl := range out.Slices {
					for _, p := range sl.Spec.Peers {
						if p.Node == "a2" {
							g.Expect(p.NextPublicKey).To(Equal(key("a2-next")))
							g.Expect(p.WireGuardSlot).To(BeZero())
						}
					}
				}
			},
			changed: []string{"slice/a-nodes-0"},
		}, {
			name: "the rotation switches: new key in slot 1, no next key",
			in: func(in *Input) {
				in.Nodes[1].Network.PublicKey, in.Nodes[1].Network.NextPublicKey, in.Nodes[1].Network.WireGuardSlot = key("a2-next"), "", 1
			},
			check: func(g Gomega, out *Output) {
				for _, sl := range out.Slices {
					for _, p := range sl.Spec.Peers {
						if p.Node == "a2" {
							g.Expect(p.PublicKey).To(Equal(key("a2-next")))
							g.Expect(p.NextPublicKey).To(BeEmpty())
							g.Expect(p.WireGuardSlot).To(Equal(int32(1)))
						}
					}
				}
			},
			changed: []string{"slice/a-nodes-0"},
		}},
	}
}

// internalPool is a pool for a private interconnect, with a routed LAN and its own WireGuard port.
func internalPool(p *netv1.GatewayPool) {
	p.Spec.Type = netv1.EndpointInternal
	p.Spec.RoutedCIDRs = []string{"172.16.0.0/12"}
	p.Spec.ListenPorts.WireGuard = 443
}

func gatewaysAppearingScenario() planScenario {
	return planScenario{
		name: "three sites via gateways: gateways appearing and disappearing",
		base: Input{
			Sites: []netv1.Site{site("a", "10.1.0.0/16"), site("b", "10.2.0.0/16"), site("c", "10.3.0.0/16")},
			Pools: []netv1.GatewayPool{pool("a-gw", "a"), pool("b-gw", "b", internalPool)},
			Nodes: []Node{
				node("a1", "a", "10.1.0.0/24"), node("a-gw1", "a", "10.1.1.0/24", gw, notReady),
				node("b1", "b", "10.2.0.0/24"), node("b-gw1", "b", "10.2.1.0/24", gw), node("b-gw2", "b", "10.2.2.0/24", gw),
				node("c1", "c", "10.3.0.0/24"),
			},
			Peerings: []netv1.SitePeering{peering("all", netv1.TopologyGateway, "a", "b", "c")},
		},
		steps: []planStep{{
			name: "a's only gateway is not ready: a↔b down, c has no pool so its nodes are their own gateways",
			check: func(g Gomega, out *Output) {
				ab := linkOf(out, "a", "b")
				g.Expect(ab.Up).To(BeFalse())
				g.Expect(ab.LocalGateways).To(BeEmpty())
				g.Expect(ab.SelfGateway).To(BeFalse())
				g.Expect(ab.RemoteGateways).To(Equal([]string{"b-gw1", "b-gw2"}))
				g.Expect(ab.EndpointType).To(Equal(netv1.EndpointInternal)) // b's pool is Internal
				g.Expect(ab.Prefixes).To(Equal([]string{"10.2.0.0/16", "172.16.0.0/12"}))
				cb := linkOf(out, "c", "b")
				g.Expect(cb.Up).To(BeTrue())
				g.Expect(cb.SelfGateway).To(BeTrue())
				g.Expect(linkOf(out, "b", "c").RemoteSelfGateway).To(BeTrue())
				g.Expect(out.Sites["a"].GatewayLinksWithoutGate).To(Equal([]string{"b", "c"}))
				g.Expect(out.Pools["a-gw"].Gateways).To(Equal([]netv1.GatewayStatus{{Node: "a-gw1", Active: false, Reason: netv1.GatewayNodeNotReady}}))
				g.Expect(out.Pools["b-gw"].Active).To(Equal(int32(2)))
				g.Expect(sliceOf(out, "b-gw1")).To(Equal("b-gateways-0"))
				for _, s := range out.Slices {
					for _, p := range s.Spec.Peers {
						if p.Node == "b-gw1" {
							g.Expect(p.Ports.WireGuard).To(Equal(int32(443))) // the pool's port wins
							g.Expect(p.Gateway.RoutedCIDRs).To(Equal([]string{"172.16.0.0/12"}))
						}
					}
				}
			},
			changed: []string{"plan/a", "plan/b", "plan/c", "slice/a-gateways-0", "slice/a-nodes-0", "slice/b-gateways-0", "slice/b-nodes-0", "slice/c-nodes-0"},
		}, {
			name: "a's gateway becomes ready: links up; a's gateway slice and the plans naming it change",
			in:   func(in *Input) { in.Nodes[1].Ready = true },
			check: func(g Gomega, out *Output) {
				g.Expect(linkOf(out, "a", "b").Up).To(BeTrue())
				g.Expect(linkOf(out, "a", "b").LocalGateways).To(Equal([]string{"a-gw1"}))
				g.Expect(linkOf(out, "b", "a").RemoteGateways).To(Equal([]string{"a-gw1"}))
				g.Expect(out.Sites["a"].GatewayLinksWithoutGate).To(BeEmpty())
			},
			changed: []string{"plan/a", "plan/b", "plan/c", "slice/a-gateways-0"},
		}, {
			name: "one of b's two gateways fails: flows move to the other; a's and c's plans and b's gateway slice change",
			in:   func(in *Input) { in.Nodes[3].DataplaneReady = false },
			check: func(g Gomega, out *Output) {
				g.Expect(linkOf(out, "a", "b").RemoteGateways).To(Equal([]string{"b-gw2"}))
				g.Expect(linkOf(out, "a", "b").Up).To(BeTrue())
			},
			changed: []string{"plan/a", "plan/b", "plan/c", "slice/b-gateways-0"},
		}, {
			name: "a new gateway appears in b (joins the pool): it is active at once",
			in: func(in *Input) {
				in.Nodes = append(in.Nodes, node("b-gw3", "b", "10.2.3.0/24", gw))
			},
			check: func(g Gomega, out *Output) {
				g.Expect(linkOf(out, "c", "b").RemoteGateways).To(Equal([]string{"b-gw2", "b-gw3"}))
			},
			changed: []string{"plan/a", "plan/b", "plan/c", "slice/b-gateways-0"},
		}, {
			name: "an ordinary node changes anything: only its slice, no plan",
			in: func(in *Input) {
				in.Nodes[2].Network.Endpoints = []netv1.Endpoint{{Address: "198.51.100.7", Type: netv1.EndpointExternal}}
			},
			changed: []string{"slice/b-nodes-0"},
		}},
	}
}

func nodeMovesScenario() planScenario {
	return planScenario{
		name: "a node changes site: it moves slices and takes its pod CIDR along",
		base: Input{
			Sites:    []netv1.Site{site("a", "10.1.0.0/16"), site("b", "10.2.0.0/16")},
			Nodes:    []Node{node("a1", "a", "10.1.0.0/24"), node("a2", "a", "10.1.1.0/24"), node("b1", "b", "10.2.0.0/24")},
			Peerings: []netv1.SitePeering{peering("ab", netv1.TopologyGateway, "a", "b")},
		},
		steps: []planStep{{
			name:    "initial",
			changed: []string{"plan/a", "plan/b", "slice/a-nodes-0", "slice/b-nodes-0"},
		}, {
			name: "a2 moves to b",
			in:   func(in *Input) { in.Nodes[1].Site = "b" },
			check: func(g Gomega, out *Output) {
				g.Expect(sliceOf(out, "a2")).To(Equal("b-nodes-0"))
				g.Expect(linkOf(out, "a", "b").Prefixes).To(Equal([]string{"10.1.1.0/24", "10.2.0.0/16"}))
				g.Expect(out.Sites["a"].Nodes).To(Equal(int32(1)))
				// The block stays allocated in a's pool while a2 holds it.
				g.Expect(out.Sites["a"].Allocated).To(Equal(int64(2)))
			},
			changed: []string{"plan/a", "plan/b", "slice/a-nodes-0", "slice/b-nodes-0"},
		}},
	}
}

func poolExhaustionScenario() planScenario {
	return planScenario{
		name: "pod CIDR pool exhaustion is reported",
		base: Input{
			Sites: []netv1.Site{site("a", "", func(s *netv1.Site) { s.Spec.PodCIDRPools = []netv1.PodCIDRPool{{CIDR: "10.1.0.0/23"}} })},
			Nodes: []Node{node("a1", "a", "10.1.0.0/24"), node("a2", "a", "10.1.1.0/24"), node("a3", "a", "")},
		},
		steps: []planStep{{
			name: "third node waits",
			check: func(g Gomega, out *Output) {
				r := out.Sites["a"]
				g.Expect(r.WaitingForPodCIDR).To(Equal(int32(1)))
				g.Expect(r.Allocated).To(Equal(r.Capacity))
				g.Expect(planOf(out, "a").Links).To(BeEmpty())
			},
			changed: []string{"plan/a", "slice/a-nodes-0"},
		}},
	}
}

func fiveSitesScenario() planScenario {
	return planScenario{
		name: "five sites, mixed protocols and topologies",
		base: func() Input {
			in := Input{Peerings: []netv1.SitePeering{peering("core", netv1.TopologyGateway, "s0", "s1", "s2", "s3", "s4")}}
			protos := []netv1.Protocol{netv1.ProtocolWireGuard, netv1.ProtocolVXLAN, netv1.ProtocolVXLAN, netv1.ProtocolGENEVE, netv1.ProtocolAuto}
			for i := range 5 {
				name := fmt.Sprintf("s%d", i)
				in.Sites = append(in.Sites, site(name, fmt.Sprintf("10.%d.0.0/16", i+10), interSite(protos[i]), mtu(int32(1400+i*100))))
				in.Pools = append(in.Pools, pool(name+"-gw", name))
				in.Nodes = append(in.Nodes, node(name+"-gw", name, fmt.Sprintf("10.%d.0.0/24", i+10), gw), node(name+"-n", name, fmt.Sprintf("10.%d.1.0/24", i+10)))
			}
			fm := peering("fast", netv1.TopologyFullMesh, "s1", "s2")
			fm.Name = "a-fast" // sorts first: owns the s1↔s2 pair
			fm.Spec.Protocol = netv1.ProtocolNone
			in.Peerings = append(in.Peerings, fm)
			return in
		}(),
		steps: []planStep{{
			name: "ten links, each resolved",
			check: func(g Gomega, out *Output) {
				total := 0
				for _, p := range out.Plans {
					total += len(p.Spec.Links)
					g.Expect(p.Spec.Links).To(HaveLen(4))
				}
				g.Expect(total).To(Equal(20)) // 10 pairs, both directions
				g.Expect(linkOf(out, "s1", "s2").Protocol).To(Equal(netv1.ProtocolNone))
				g.Expect(linkOf(out, "s1", "s2").Mode).To(Equal(netv1.LinkModeDirect))
				g.Expect(linkOf(out, "s1", "s3").Protocol).To(Equal(netv1.ProtocolWireGuard)) // VXLAN vs GENEVE
				g.Expect(linkOf(out, "s1", "s3").TunnelMTU).To(Equal(int32(1500 - 130)))
				g.Expect(linkOf(out, "s0", "s4").TunnelMTU).To(Equal(int32(1400 - 130)))
				g.Expect(out.Peerings["core"].Links).To(HaveLen(9))
				g.Expect(out.Peerings["a-fast"].Links).To(HaveLen(1))
			},
			changed: []string{
				"plan/s0", "plan/s1", "plan/s2", "plan/s3", "plan/s4",
				"slice/s0-gateways-0", "slice/s0-nodes-0", "slice/s1-gateways-0", "slice/s1-nodes-0", "slice/s2-gateways-0",
				"slice/s2-nodes-0", "slice/s3-gateways-0", "slice/s3-nodes-0", "slice/s4-gateways-0", "slice/s4-nodes-0",
			},
		}, {
			name: "a Site leaves the peering: its plan loses all links, the others lose one",
			in:   func(in *Input) { in.Peerings[0].Spec.Sites = []string{"s0", "s1", "s2", "s3"} },
			check: func(g Gomega, out *Output) {
				g.Expect(planOf(out, "s4").Links).To(BeEmpty())
				g.Expect(planOf(out, "s0").Links).To(HaveLen(3))
			},
			changed: []string{"plan/s0", "plan/s1", "plan/s2", "plan/s3", "plan/s4"},
		}},
	}
}

// Slices are sticky: adding and removing nodes never moves the other nodes between slices.
func TestSlicesAreSticky(t *testing.T) {
	g := NewWithT(t)
	in := Input{Sites: []netv1.Site{site("a", "10.0.0.0/8")}, SliceSize: 3}
	for i := range 7 {
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("n%02d", i), "a", fmt.Sprintf("10.0.%d.0/24", i)))
	}
	out := compute(in, nil)
	g.Expect(out.Slices).To(HaveLen(3))
	g.Expect(sliceOf(out, "n06")).To(Equal("a-nodes-2"))

	// n01 leaves, n00a arrives (sorting between n00 and n01): it takes the free seat, nobody else moves.
	in.Nodes = append(in.Nodes[:1], in.Nodes[2:]...)
	in.Nodes = append(in.Nodes, node("n00a", "a", "10.0.100.0/24"))
	next := compute(in, out)
	g.Expect(sliceOf(next, "n00a")).To(Equal("a-nodes-0"))
	for _, n := range []string{"n00", "n02", "n03", "n04", "n05", "n06"} {
		g.Expect(sliceOf(next, n)).To(Equal(sliceOf(out, n)), n)
	}
	g.Expect(changed(out, next)).To(Equal([]string{"slice/a-nodes-0"}))

	// Emptying a slice deletes it.
	in.Nodes = in.Nodes[:len(in.Nodes)-3]
	after := compute(in, next)
	g.Expect(changed(next, after)).To(ContainElement("slice/a-nodes-2"))
	for _, s := range after.Slices {
		g.Expect(s.Spec.Peers).NotTo(BeEmpty())
	}
}

// Input order does not matter: the controller lists from a cache in arbitrary order.
func TestComputeIsOrderIndependent(t *testing.T) {
	g := NewWithT(t)
	in := Input{
		Sites:    []netv1.Site{site("b", "10.2.0.0/16"), site("a", "10.1.0.0/16")},
		Pools:    []netv1.GatewayPool{pool("p2", "a"), pool("p1", "a")},
		Peerings: []netv1.SitePeering{peering("x", netv1.TopologyGateway, "b", "a")},
		Nodes:    []Node{node("z", "a", "10.1.0.0/24", gw), node("y", "b", "10.2.0.0/24"), node("x", "a", "10.1.1.0/24", gw)},
	}
	a := Compute(in)
	in.Sites[0], in.Sites[1] = in.Sites[1], in.Sites[0]
	in.Pools[0], in.Pools[1] = in.Pools[1], in.Pools[0]
	in.Nodes[0], in.Nodes[2] = in.Nodes[2], in.Nodes[0]
	b := Compute(in)
	g.Expect(b.Plans).To(Equal(a.Plans))
	g.Expect(b.Slices).To(Equal(a.Slices))
	g.Expect(linkOf(a, "b", "a").RemoteGateways).To(Equal([]string{"x", "z"}))
}
