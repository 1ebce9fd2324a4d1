package routeplan_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/network/internal/plan/plantest"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/reconcilers/routeplan"
	"github.com/yonder-dev/yonder/test/benchsize"
)

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

// BenchmarkRoutePlan50000Nodes200Sites is the route plan row against the real apiserver: the plan
// of 50,000 nodes at 200 Sites (each with 2 gateways, all peered through them) computed and published,
// then one node change (its endpoint) planned incrementally and published by the controller's Planner and
// Publisher, timed, with the apiserver writes counted. The baseline, in the same run, is how the
// controller handled the same change before: the plan from scratch, every object compared, then written.
// A gateway going unhealthy is measured too: it changes every peered Site's RoutePlan.
func BenchmarkRoutePlan50000Nodes200Sites(b *testing.B) {
	nodes, sites := benchsize.Pick(50000, 200), benchsize.Pick(200, 4) // tiny in the test suite
	in := plantest.Synthetic(nodes, sites)
	ctx := context.Background()
	defer func() { _ = testenv.Cleanup(ctx, env.Client) }()
	var full, initial, restart, change, scratch, gwChange time.Duration
	var wInitial, wRestart, wChange, wScratch, wGateway int
	var biggest, total, perNodeTotal int
	for range b.N {
		if err := testenv.Cleanup(ctx, env.Client); err != nil {
			b.Fatal(err)
		}
		c := &testenv.CountingClient{Client: env.Client}
		cur := in
		cur.Nodes = append([]plan.Node(nil), in.Nodes...)
		pl, pub := &plan.Planner{}, &routeplan.Publisher{}

		// Initial publication.
		start := time.Now()
		out := pl.Compute(cur)
		full += time.Since(start)
		if _, err := pub.Publish(ctx, c, out, nil, nil); err != nil {
			b.Fatal(err)
		}
		initial += time.Since(start)
		wInitial += int(c.Writes())

		// The controller's next pass sees its writes in the cache (listing it is not an apiserver request,
		// so it is not timed) and writes nothing.
		d, w := pass(ctx, b, c, &cur, pl, pub)
		restart, wRestart = restart+d, wRestart+w

		// Baseline: the same endpoint change as the controller handled it before, from scratch (a new
		// Planner computes everything; a new Publisher compares everything) — and then back, so the
		// measured change below is the same one.
		setEndpoint(&cur, "192.0.2.1")
		d, w = pass(ctx, b, c, &cur, &plan.Planner{}, &routeplan.Publisher{})
		scratch, wScratch = scratch+d, wScratch+w
		setEndpoint(&cur, "192.0.2.2")
		pass(ctx, b, c, &cur, pl, pub) // the warm Planner catches up with both, untimed
		pass(ctx, b, c, &cur, pl, pub)

		// One node change, incrementally.
		setEndpoint(&cur, "192.0.2.3")
		d, w = pass(ctx, b, c, &cur, pl, pub)
		change, wChange = change+d, wChange+w

		// A gateway fails: its Site's plan and every peered Site's plan name it.
		cur.Nodes[3].DataplaneReady = false // site-03-node-0000, a gateway
		d, w = pass(ctx, b, c, &cur, pl, pub)
		gwChange, wGateway = gwChange+d, wGateway+w
		biggest, total, perNodeTotal = sizes(pl.Compute(cur), nodes)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(full), "ms/full-plan")
	b.ReportMetric(ms(change), "ms/node-change")
	b.ReportMetric(ms(scratch), "baseline-ms/node-change")
	b.ReportMetric(float64(change)/float64(scratch), "x-baseline")
	b.ReportMetric(float64(wChange)/n, "writes/node-change")
	b.ReportMetric(float64(wGateway)/n, "writes/gateway-change")
	fmt.Printf("publish: %d nodes, %d sites: full plan %.0f ms, initial publication %d writes in %.0f ms; next pass %d writes in %.1f ms\n",
		nodes, sites, ms(full), wInitial/b.N, ms(initial), wRestart/b.N, ms(restart))
	fmt.Printf("publish: one node change (endpoint) %d writes in %.1f ms; baseline from scratch, all compared: %d writes in %.1f ms -> %.4fx the time\n",
		wChange/b.N, ms(change), wScratch/b.N, ms(scratch), float64(change)/float64(scratch))
	fmt.Printf("publish: a gateway going unhealthy: %d writes in %.0f ms (its slice and the RoutePlan of its Site and of every Site peered with it)\n",
		wGateway/b.N, ms(gwChange))
	fmt.Printf("size: largest object %d B, all objects %.2f MiB; baseline one-plan-per-node (model) %.1f GiB -> %.5fx; peak RSS %s\n",
		biggest, float64(total)/(1<<20), float64(perNodeTotal)/(1<<30), float64(total)/float64(perNodeTotal), vmHWM())
}

// setEndpoint gives node 25 of the cluster (not a gateway) a new endpoint, as a new NodeNetwork.
func setEndpoint(in *plan.Input, addr string) {
	n := &in.Nodes[25]
	spec := n.Network.DeepCopy()
	spec.Endpoints = []netv1.Endpoint{{Address: addr, Type: netv1.EndpointInternal}}
	n.Network = spec
}

// pass is one pass of the controller over cur: what is published is read (untimed: the controller reads
// its cache), then planned and published, timed, with the writes counted.
func pass(ctx context.Context, b *testing.B, c *testenv.CountingClient, cur *plan.Input, pl *plan.Planner, pub *routeplan.Publisher) (time.Duration, int) {
	b.Helper()
	plans, slices := listPublished(ctx, b)
	cur.Previous = slices
	n0 := c.Writes()
	start := time.Now()
	if _, err := pub.Publish(ctx, c, pl.Compute(*cur), plans, slices); err != nil {
		b.Fatal(err)
	}
	return time.Since(start), int(c.Writes() - n0)
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
