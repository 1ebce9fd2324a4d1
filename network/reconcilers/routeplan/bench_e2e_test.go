package routeplan_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// BenchmarkControllerEndToEnd runs the whole controller against the real apiserver: Nodes (1,000 by
// default, YONDER_NET_BENCH_NODES to change) at 20 Sites get labels and pod CIDRs and the plan is published;
// then the controller restarts. It prints the time and writes of both, the restart as a ratio of the
// initial run (the baseline measured in the same run).
func BenchmarkControllerEndToEnd(b *testing.B) {
	nodes := benchsize.Pick(1000, 20) // tiny in the test suite
	if v, err := strconv.Atoi(os.Getenv("YONDER_NET_BENCH_NODES")); err == nil && v > 0 {
		nodes = v
	}
	g := NewWithT(b)
	ctx := context.Background()
	var initial, restart time.Duration
	var wInitial, wRestart int64
	for range b.N {
		g.Expect(testenv.Cleanup(ctx, env.Client)).To(Succeed())
		for s := range 20 {
			g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%02d", s)}, Spec: netv1.SiteSpec{
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node-restriction.kubernetes.io/loc": fmt.Sprint(s)}},
				PodCIDRPools: []netv1.PodCIDRPool{{CIDR: fmt.Sprintf("10.%d.0.0/16", 10+s)}},
			}})).To(Succeed())
		}
		// converged pokes this NodeNetwork to start a pass; it belongs to no Node.
		g.Expect(testenv.PublishNodeNetwork(ctx, env.Client, "a1", key("a1"), "192.0.2.1", nil)).To(Succeed())
		for i := range nodes {
			_, err := testenv.CreateNode(ctx, env.Client, fmt.Sprintf("n%05d", i), map[string]string{"node-restriction.kubernetes.io/loc": fmt.Sprint(i % 20)}, "", true)
			g.Expect(err).NotTo(HaveOccurred())
		}
		b.ResetTimer()
		start := time.Now()
		c := testenv.Start(b, env, setup.Options{NodeConcurrency: 4})
		g.Eventually(func(g Gomega) {
			list := &corev1.NodeList{}
			g.Expect(env.GetAPIReader().List(ctx, list)).To(Succeed())
			done := 0
			for _, n := range list.Items {
				if len(n.Spec.PodCIDRs) > 0 && n.Labels[netv1.SiteLabel] != "" {
					done++
				}
			}
			g.Expect(done).To(Equal(nodes))
		}, 15*time.Minute, 500*time.Millisecond).Should(Succeed())
		converged(ctx, g, c)
		initial += time.Since(start)
		wInitial += c.Client.Writes()
		g.Expect(c.Stop()).To(Succeed())

		start = time.Now()
		c2 := testenv.Start(b, env, setup.Options{NodeConcurrency: 4})
		g.Eventually(func() bool { return c2.RoutePlan.Passes() >= 1 && c2.Node.Reconciles() >= int64(nodes) }, 5*time.Minute, 50*time.Millisecond).Should(BeTrue())
		restart += time.Since(start)
		wRestart += c2.Client.Writes()
		g.Expect(c2.Stop()).To(Succeed())
		b.StopTimer()
	}
	g.Expect(testenv.Cleanup(ctx, env.Client)).To(Succeed())
	n := time.Duration(b.N)
	b.ReportMetric(float64(wInitial)/float64(b.N)/float64(nodes), "writes/node")
	fmt.Printf("end-to-end: %d nodes at 20 sites assigned, allocated and planned in %v with %d writes (%.2f per node); peak RSS %s\n",
		nodes, initial/n, wInitial/int64(b.N), float64(wInitial)/float64(b.N)/float64(nodes), vmHWM())
	fmt.Printf("end-to-end: restart synced %d nodes in %v with %d writes -> %.3fx the time and %.3fx the writes of the initial run\n",
		nodes, restart/n, wRestart/int64(b.N), float64(restart)/float64(initial), float64(wRestart)/float64(wInitial))
}
