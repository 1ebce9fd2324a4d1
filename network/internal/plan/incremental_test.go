package plan

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// publishedStore stands in for the apiserver: it applies the writes a plan needs and gives each written
// object a new resourceVersion, so the Planner sees Previous slices as the controller does.
type publishedStore struct {
	slices map[string]netv1.PeerSlice
	rv     int
}

func (s *publishedStore) apply(out *Output) []netv1.PeerSlice {
	var existing []netv1.PeerSlice
	for _, ps := range s.slices {
		existing = append(existing, ps)
	}
	c := DiffSlices(out.Slices, existing)
	for _, l := range [][]netv1.PeerSlice{c.Create, c.Update} {
		for _, ps := range l {
			s.rv++
			ps = *ps.DeepCopy()
			ps.ResourceVersion = strconv.Itoa(s.rv)
			s.slices[ps.Name] = ps
		}
	}
	for _, ps := range c.Delete {
		delete(s.slices, ps.Name)
	}
	var list []netv1.PeerSlice
	for _, ps := range s.slices {
		list = append(list, ps)
	}
	return list
}

// mutateNode applies one random change to a Node the way an informer delivers one: a new object, its
// maps and publication replaced, never mutated in place.
func mutateNode(r *rand.Rand, in *Input, step int) string {
	i := r.IntN(len(in.Nodes))
	n := &in.Nodes[i]
	net := func() *netv1.NodeNetworkSpec {
		if n.Network == nil {
			return &netv1.NodeNetworkSpec{PublicKey: key(n.Name)}
		}
		return n.Network.DeepCopy()
	}
	switch k := r.IntN(12); k {
	case 0:
		spec := net()
		spec.Endpoints = []netv1.Endpoint{{Address: fmt.Sprintf("192.0.2.%d", step%250+1), Type: netv1.EndpointInternal}}
		n.Network = spec
		return "endpoint " + n.Name
	case 1:
		spec := net()
		spec.PublicKey = key(fmt.Sprint(n.Name, step))
		n.Network = spec
		return "key " + n.Name
	case 2:
		n.Ready = !n.Ready
		return "ready " + n.Name
	case 3:
		n.DataplaneReady = !n.DataplaneReady
		return "dataplane " + n.Name
	case 4:
		l := maps.Clone(n.Labels)
		if l["gateway"] == "true" {
			delete(l, "gateway")
		} else {
			l["gateway"] = "true"
		}
		n.Labels = l
		return "gateway label " + n.Name
	case 5:
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("j%03d", step), in.Sites[r.IntN(len(in.Sites))].Name, fmt.Sprintf("10.%d.%d.0/24", r.IntN(len(in.Sites)), 100+step%150)))
		return "join"
	case 6:
		name := n.Name
		in.Nodes = append(in.Nodes[:i:i], in.Nodes[i+1:]...)
		return "leave " + name
	case 7:
		n.Site = in.Sites[r.IntN(len(in.Sites))].Name
		if r.IntN(4) == 0 {
			n.Site = ""
		}
		return "site " + n.Name
	case 8:
		n.PodCIDRs = []string{fmt.Sprintf("10.%d.%d.0/24", r.IntN(len(in.Sites)+1), r.IntN(250))}
		return "pod CIDR " + n.Name
	case 9:
		spec := net()
		if spec.Reachability == nil || spec.Reachability.Inbound == netv1.ReachabilityReachable {
			spec.Reachability = &netv1.NodeReachability{Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: "203.0.113.9"}
		} else {
			spec.Reachability = &netv1.NodeReachability{Inbound: netv1.ReachabilityReachable, ObservedAddress: "198.51.100.1"}
		}
		n.Network = spec
		return "reachability " + n.Name
	case 10:
		ok := r.IntN(2) == 0
		n.GatewayReady = &ok
		return "gateway ready " + n.Name
	default:
		// Sometimes the configuration changes too: the Planner must notice and compute everything.
		s := &in.Sites[r.IntN(len(in.Sites))]
		s.Spec.MTU = int32(1280 + r.IntN(8000))
		return "site mtu " + s.Name
	}
}

// The incremental Planner equals a computation from scratch, after every change of random sequences over
// random clusters (seeded, reproducible): the same RoutePlans, PeerSlices and reports. Objects it reports as
// not fresh are the previous pass's, unchanged. Previous slices come either from the Planner's own last
// Output (as the benchmark passes them) or from a store that versions them (as the apiserver does).
func TestPlannerEqualsFullComputation(t *testing.T) {
	incremental := 0
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 21))
		in := randomInput(r)
		if len(in.Nodes) == 0 {
			continue
		}
		store := &publishedStore{slices: map[string]netv1.PeerSlice{}}
		pl := &Planner{}
		var last *Output
		for step := range 30 {
			g := NewWithT(t)
			ctx := fmt.Sprintf("seed %d step %d", seed, step)
			if step > 0 {
				ctx += ": " + mutateNode(r, &in, step)
				if len(in.Nodes) == 0 {
					break
				}
			}
			got := pl.Compute(in)
			want := Compute(in)
			g.Expect(cmp.Diff(want.Plans, got.Plans)).To(BeEmpty(), ctx)
			g.Expect(got.Slices).To(Equal(want.Slices), ctx)
			g.Expect(got.Sites).To(Equal(want.Sites), ctx)
			g.Expect(got.Pools).To(Equal(want.Pools), ctx)
			g.Expect(got.Peerings).To(Equal(want.Peerings), ctx)
			if last != nil {
				for _, p := range got.Plans {
					if !got.IsFresh(PlanKey(p.Name)) {
						g.Expect(p).To(Equal(planNamed(last, p.Name)), ctx)
					}
				}
				for _, s := range got.Slices {
					if !got.IsFresh(SliceKey(s.Name)) {
						g.Expect(s).To(Equal(slicesByName(last)[s.Name]), ctx)
					}
				}
			}
			last = got
			if seed%2 == 0 {
				in.Previous = got.Slices
			} else {
				in.Previous = store.apply(got)
			}
		}
		incremental += pl.Incremental()
	}
	// The test is only worth something if most passes took the incremental path.
	NewWithT(t).Expect(incremental).To(BeNumerically(">", 1000))
}

// One endpoint change at a Site of a large cluster is incremental and recomputes only that node's slice.
func TestPlannerRecomputesOnlyTheChangedSlice(t *testing.T) {
	g := NewWithT(t)
	in := Input{Sites: []netv1.Site{site("a", "10.1.0.0/16"), site("b", "10.2.0.0/16")}, Pools: []netv1.GatewayPool{pool("a-gw", "a"), pool("b-gw", "b")},
		Peerings: []netv1.SitePeering{peering("ab", netv1.TopologyGateway, "a", "b")}, SliceSize: 10}
	for i := range 100 {
		s := []string{"a", "b"}[i%2]
		var mutate []func(*Node)
		if i < 4 {
			mutate = append(mutate, gw)
		}
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("n%03d", i), s, fmt.Sprintf("10.%d.%d.0/24", 1+i%2, i), mutate...))
	}
	pl := &Planner{}
	first := pl.Compute(in)
	in.Previous = first.Slices // as published: nothing to recompute
	steady := pl.Compute(in)
	g.Expect(pl.Incremental()).To(Equal(1))
	g.Expect(steady.Fresh).To(BeEmpty())
	g.Expect(changed(first, steady)).To(BeEmpty())

	spec := in.Nodes[51].Network.DeepCopy()
	spec.Endpoints = []netv1.Endpoint{{Address: "192.0.2.99", Type: netv1.EndpointInternal}}
	in.Nodes[51].Network = spec
	next := pl.Compute(in)
	g.Expect(pl.Incremental()).To(Equal(2))
	g.Expect(changed(steady, next)).To(Equal([]string{"slice/" + sliceOf(next, "n051")}))
	for k := range next.Fresh {
		g.Expect(k).To(HavePrefix(SliceKey("b-")))
	}

	// A gateway failing changes the links: a full pass, and both Sites' plans.
	in.Previous = next.Slices
	in.Nodes[0].Ready = false
	failed := pl.Compute(in)
	g.Expect(pl.Incremental()).To(Equal(2))
	g.Expect(failed.Fresh).To(BeNil())
	g.Expect(changed(next, failed)).To(ConsistOf("plan/a", "plan/b", "slice/"+sliceOf(failed, "n000")))
}

func planNamed(o *Output, name string) netv1.RoutePlan {
	for _, p := range o.Plans {
		if p.Name == name {
			return p
		}
	}
	return netv1.RoutePlan{}
}

func slicesByName(o *Output) map[string]netv1.PeerSlice {
	m := map[string]netv1.PeerSlice{}
	for _, s := range o.Slices {
		m[s.Name] = s
	}
	return m
}
