package plan_test

import (
	"fmt"
	"testing"
	"time"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/network/internal/plan/plantest"
	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// nodeChange is one change of one node of a synthetic cluster, applied as an informer delivers it (a new
// object: maps and publication replaced, not mutated).
type nodeChange struct {
	name  string
	apply func(in *plan.Input, step int)
}

// NodeChanges are the node-local changes the "one node change" stands for: a node's endpoint, its
// key, a node joining. GatewayChange is a gateway going unhealthy, which changes the links.
func nodeChanges(sites int) []nodeChange {
	return []nodeChange{
		{"endpoint", func(in *plan.Input, step int) {
			n := &in.Nodes[len(in.Nodes)/2]
			spec := n.Network.DeepCopy()
			spec.Endpoints = []netv1.Endpoint{{Address: fmt.Sprintf("192.0.2.%d", step%250+1), Type: netv1.EndpointInternal}}
			n.Network = spec
		}},
		{"key", func(in *plan.Input, step int) {
			n := &in.Nodes[len(in.Nodes)/3]
			spec := n.Network.DeepCopy()
			spec.PublicKey = plantest.Key(fmt.Sprint("rotated", step))
			n.Network = spec
		}},
		{"join", func(in *plan.Input, step int) {
			s := step % sites
			n := plan.Node{Name: fmt.Sprintf("%s-joined-%d", plantest.SiteName(s), step), Site: plantest.SiteName(s), Ready: true, DataplaneReady: true,
				PodCIDRs: []string{fmt.Sprintf("10.%d.255.0/24", 10+s)},
				Network:  &netv1.NodeNetworkSpec{PublicKey: plantest.Key(fmt.Sprint("joined", step)), Ports: netv1.Ports{WireGuard: 51820}}}
			in.Nodes = append(in.Nodes[:len(in.Nodes):len(in.Nodes)], n)
		}},
	}
}

// gatewayChange flips the health of site 3's first gateway (node 3 of Synthetic).
func gatewayChange(in *plan.Input) { in.Nodes[3].DataplaneReady = !in.Nodes[3].DataplaneReady }

// BenchmarkRoutePlanCompute50000Nodes200Sites is the pure half of the route plan row: the full plan
// of 50,000 nodes at 200 Sites (all peered through 2 gateways each), then one node change at a time through
// the incremental Planner, timed, with the writes it plans counted (objects whose desired state changed).
// The baseline, measured in the same run, is what one change cost before: the plan from scratch and every
// object compared with the published one.
func BenchmarkRoutePlanCompute50000Nodes200Sites(b *testing.B) {
	nodes, sites := benchsize.Pick(50000, 200), benchsize.Pick(200, 4) // tiny in the test suite
	in := plantest.Synthetic(nodes, sites)
	var full, fullCPU, scratch, change, changeCPU, gwChange time.Duration
	var changes, maxWrites, gwWrites int
	for range b.N {
		cur := in
		cur.Nodes = append([]plan.Node(nil), in.Nodes...)
		pl := &plan.Planner{}
		start, cpu := time.Now(), benchmeter.SelfCPU()
		out := pl.Compute(cur)
		full, fullCPU = full+time.Since(start), fullCPU+benchmeter.SelfCPU()-cpu
		cur.Previous = out.Slices
		out = pl.Compute(cur) // the steady state: what is published is what was planned

		for step, c := range nodeChanges(sites) {
			c.apply(&cur, step)
			// Baseline: from scratch, and every object diffed.
			start = time.Now()
			ref := plan.Compute(cur)
			_, _ = plan.DiffPlans(ref.Plans, out.Plans), plan.DiffSlices(ref.Slices, out.Slices)
			scratch += time.Since(start)

			start, cpu = time.Now(), benchmeter.SelfCPU()
			next := pl.Compute(cur)
			w := plannedWrites(next, out)
			d := time.Since(start)
			change, changeCPU = change+d, changeCPU+benchmeter.SelfCPU()-cpu
			changes, maxWrites = changes+1, max(maxWrites, w)
			fmt.Printf("route plan: one %s change: %d planned writes in %v\n", c.name, w, d)
			out, cur.Previous = next, next.Slices
		}

		gatewayChange(&cur)
		start = time.Now()
		next := pl.Compute(cur)
		gwWrites = plannedWrites(next, out)
		gwChange += time.Since(start)
		if pl.Incremental() < len(nodeChanges(sites)) {
			b.Fatalf("only %d of the node changes were incremental", pl.Incremental())
		}
	}
	ms := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(full, b.N), "ms/full-plan")
	// CPU time of the process (all threads, the garbage collector's included): on a shared machine the
	// wall-clock figures above include waiting for a core.
	b.ReportMetric(ms(fullCPU, b.N), "cpu-ms/full-plan")
	b.ReportMetric(ms(changeCPU, changes), "cpu-ms/node-change")
	b.ReportMetric(ms(change, changes), "ms/node-change")
	b.ReportMetric(ms(scratch, changes), "baseline-ms/node-change")
	b.ReportMetric(float64(change)/float64(scratch), "x-baseline")
	b.ReportMetric(float64(maxWrites), "writes/node-change")
	b.ReportMetric(ms(gwChange, b.N), "ms/gateway-change")
	b.ReportMetric(float64(gwWrites), "writes/gateway-change")
	fmt.Printf("route plan: %d nodes, %d sites: full plan %.1f ms (%.1f ms CPU); one node change (endpoint, key, join) %.2f ms and at most %d writes "+
		"(from scratch and diffing everything: %.1f ms -> %.4fx); a gateway going unhealthy %.1f ms and %d writes (every peered Site's plan names it)\n",
		nodes, sites, ms(full, b.N), ms(fullCPU, b.N), ms(change, changes), maxWrites, ms(scratch, changes), float64(change)/float64(scratch), ms(gwChange, b.N), gwWrites)
}

// plannedWrites are the objects a publication of next over prev writes, comparing only what the Planner
// recomputed (as the controller's Publisher does).
func plannedWrites(next, prev *plan.Output) int {
	pc := plan.DiffPlansKnown(next.Plans, prev.Plans, func(d, _ *netv1.RoutePlan) bool { return !next.IsFresh(plan.PlanKey(d.Name)) })
	sc := plan.DiffSlicesKnown(next.Slices, prev.Slices, func(d, _ *netv1.PeerSlice) bool { return !next.IsFresh(plan.SliceKey(d.Name)) })
	return pc.Len() + sc.Len()
}
