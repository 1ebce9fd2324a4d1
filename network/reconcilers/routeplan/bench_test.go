package routeplan_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/reconcilers/routeplan"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// synthetic is a cluster of nodes spread over sites, each Site with a pool of 2 gateways, all Sites
// peered through gateways, every daemon published.
func synthetic(nodes, sites int) plan.Input {
	in := plan.Input{Peerings: []netv1.SitePeering{{ObjectMeta: metav1.ObjectMeta{Name: "mesh"}, Spec: netv1.SitePeeringSpec{Topology: netv1.TopologyGateway}}}}
	for s := range sites {
		name := fmt.Sprintf("site-%02d", s)
		in.Sites = append(in.Sites, netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.SiteSpec{
			PodCIDRPools: []netv1.PodCIDRPool{{CIDR: fmt.Sprintf("10.%d.0.0/16", 10+s)}},
			NodeCIDRs:    []string{fmt.Sprintf("172.%d.0.0/16", 16+s)},
		}})
		in.Pools = append(in.Pools, netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: name + "-gw"}, Spec: netv1.GatewayPoolSpec{
			Site: name, NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gateway": "true"}},
		}})
		in.Peerings[0].Spec.Sites = append(in.Peerings[0].Spec.Sites, name)
	}
	for i := range nodes {
		s, j := i%sites, i/sites
		n := plan.Node{
			Name: fmt.Sprintf("site-%02d-node-%04d", s, j), Site: fmt.Sprintf("site-%02d", s), Ready: true, DataplaneReady: true,
			Labels:   map[string]string{},
			PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 10+s, j)},
			Network: &netv1.NodeNetworkSpec{
				PublicKey: key(fmt.Sprint(i)),
				Endpoints: []netv1.Endpoint{{Address: fmt.Sprintf("172.%d.%d.%d", 16+s, j/250, j%250+1), Type: netv1.EndpointInternal}},
				Ports:     netv1.Ports{WireGuard: 51820},
			},
		}
		if j < 2 {
			n.Labels["gateway"] = "true"
		}
		in.Nodes = append(in.Nodes, n)
	}
	return in
}

func listPublished(ctx context.Context, b *testing.B) ([]netv1.RoutePlan, []netv1.PeerSlice) {
	b.Helper()
	plans, slices := &netv1.RoutePlanList{}, &netv1.PeerSliceList{}
	r := env.GetAPIReader()
	if err := r.List(ctx, plans); err != nil {
		b.Fatal(err)
	}
	if err := r.List(ctx, slices); err != nil {
		b.Fatal(err)
	}
	return plans.Items, slices.Items
}

func vmHWM() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "?"
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(s.Text(), "VmHWM:"))
		}
	}
	return "?"
}

func jsonSize(v any) int {
	data, _ := json.Marshal(v)
	return len(data)
}

// BenchmarkRoutePlan5000Nodes20Sites measures the route plan for 5,000 nodes at 20 Sites: computation
// (pure) and publication to the real apiserver, with writes counted, against baselines measured in the
// same run: republishing everything (no diffing) and one plan object per node (no sharding).
func BenchmarkRoutePlan5000Nodes20Sites(b *testing.B) {
	nodes, sites := benchsize.Pick(5000, 200), benchsize.Pick(20, 4) // tiny in the test suite
	in := synthetic(nodes, sites)
	b.Run("compute", func(b *testing.B) { benchCompute(b, in, nodes, sites) })
	b.Run("publish", func(b *testing.B) { benchPublish(b, in, nodes) })
}

// benchCompute measures the pure computation in its steady state (previous slices known).
func benchCompute(b *testing.B, in plan.Input, nodes, sites int) {
	b.Helper()
	first := plan.Compute(in)
	steady := in
	steady.Previous = first.Slices
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	b.ReportAllocs()
	b.ResetTimer()
	var out *plan.Output
	for b.Loop() {
		out = plan.Compute(steady)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(len(out.Slices)), "slices")
	fmt.Printf("compute: %d nodes, %d sites -> %d RoutePlans, %d PeerSlices; retained heap %.1f MiB; process peak RSS %s\n",
		nodes, sites, len(out.Plans), len(out.Slices), float64(ms.HeapAlloc-min(before, ms.HeapAlloc))/(1<<20), vmHWM())
}

// benchPublish measures publication against the apiserver: the initial one, a restarted controller, one
// gateway failing (diffed), and the baseline that republishes everything.
func benchPublish(b *testing.B, in plan.Input, nodes int) {
	b.Helper()
	ctx := context.Background()
	defer func() { _ = testenv.Cleanup(ctx, env.Client) }()
	var initial, restart, diffed, naive time.Duration
	var wInitial, wRestart, wDiffed, wNaive int
	var biggest, total, perNodeTotal int
	for i := 0; i < b.N; i++ {
		if err := testenv.Cleanup(ctx, env.Client); err != nil {
			b.Fatal(err)
		}
		c := &testenv.CountingClient{Client: env.Client}
		cur := in
		cur.Nodes = append([]plan.Node(nil), in.Nodes...)

		// Initial publication.
		start := time.Now()
		if _, err := routeplan.Publish(ctx, c, plan.Compute(cur), nil, nil); err != nil {
			b.Fatal(err)
		}
		initial += time.Since(start)
		wInitial += int(c.Writes())

		// A restarted controller: compute from what is published, write nothing.
		d, w, _ := republish(ctx, b, c, cur, false)
		restart, wRestart = restart+d, wRestart+w
		// One gateway fails: diff-based publication.
		cur.Nodes[3].DataplaneReady = false // site-03-node-0000, a gateway
		d, w, _ = republish(ctx, b, c, cur, false)
		diffed, wDiffed = diffed+d, wDiffed+w
		// Baseline: the gateway recovers, and a controller without diffing republishes every object.
		cur.Nodes[3].DataplaneReady = true
		d, w, out := republish(ctx, b, c, cur, true)
		naive, wNaive = naive+d, wNaive+w
		biggest, total, perNodeTotal = sizes(out, nodes)
	}
	n := float64(b.N)
	b.ReportMetric(float64(wDiffed)/n, "writes/gateway-change")
	b.ReportMetric(float64(wNaive)/n, "writes/naive-republish")
	fmt.Printf("publish: initial %d writes in %v; restart %d writes in %v; one gateway change %d writes in %v\n",
		wInitial/b.N, initial/time.Duration(b.N), wRestart/b.N, restart/time.Duration(b.N), wDiffed/b.N, diffed/time.Duration(b.N))
	fmt.Printf("publish: baseline republish-everything %d write requests in %v -> diffing needs %.3fx the writes and %.2fx the time\n",
		wNaive/b.N, naive/time.Duration(b.N), float64(wDiffed)/float64(wNaive), float64(diffed)/float64(naive))
	fmt.Printf("publish: one gateway change, baseline one-plan-per-node (model): %d objects rewritten -> sharding needs %.4fx the writes\n",
		nodes, float64(wDiffed/b.N)/float64(nodes))
	fmt.Printf("size: largest object %d B, all objects %.2f MiB; baseline one-plan-per-node (model) %.1f GiB -> %.5fx; peak RSS %s\n",
		biggest, float64(total)/(1<<20), float64(perNodeTotal)/(1<<30), float64(total)/float64(perNodeTotal), vmHWM())
}

// republish computes the plan from what is published and writes it: with diffs (Publish), or everything
// (naive, the baseline). It returns the time, the writes and the output.
func republish(ctx context.Context, b *testing.B, c *testenv.CountingClient, cur plan.Input, naive bool) (time.Duration, int, *plan.Output) {
	b.Helper()
	n0 := c.Writes()
	start := time.Now()
	plans, slices := listPublished(ctx, b)
	cur.Previous = slices
	out := plan.Compute(cur)
	if !naive {
		if _, err := routeplan.Publish(ctx, c, out, plans, slices); err != nil {
			b.Fatal(err)
		}
		return time.Since(start), int(c.Writes() - n0), out
	}
	rv := map[string]string{}
	for _, p := range plans {
		rv["p/"+p.Name] = p.ResourceVersion
	}
	for _, s := range slices {
		rv["s/"+s.Name] = s.ResourceVersion
	}
	for j := range out.Plans {
		o := out.Plans[j].DeepCopy()
		o.ResourceVersion = rv["p/"+o.Name]
		if err := c.Update(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	for j := range out.Slices {
		o := out.Slices[j].DeepCopy()
		o.ResourceVersion = rv["s/"+o.Name]
		if err := c.Update(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start), int(c.Writes() - n0), out
}

// sizes are the largest published object, all of them, and the model of a per-node plan with every peer in
// it (each of the nodes' objects holds the whole peer list).
func sizes(out *plan.Output, nodes int) (biggest, total, perNodeTotal int) {
	var peers []netv1.Peer
	for _, s := range out.Slices {
		sz := jsonSize(s)
		biggest, total = max(biggest, sz), total+sz
		peers = append(peers, s.Spec.Peers...)
	}
	for _, p := range out.Plans {
		sz := jsonSize(p)
		biggest, total = max(biggest, sz), total+sz
	}
	return biggest, total, nodes * jsonSize(peers)
}
