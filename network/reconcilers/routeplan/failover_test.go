package routeplan_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/test/promread"
)

// gatewayCounters reads the controller's gateway counters of Site b from the registry the manager's
// metrics endpoint serves.
type gatewayCounters struct{ elected, nodeNotReady, failovers float64 }

func readGatewayCounters() gatewayCounters {
	return gatewayCounters{
		elected:      promread.Sum(metrics.Registry, "yonder_net_gateway_elections_total", map[string]string{"site": "b", "reason": "Elected"}),
		nodeNotReady: promread.Sum(metrics.Registry, "yonder_net_gateway_elections_total", map[string]string{"site": "b", "reason": netv1.GatewayNodeNotReady}),
		failovers:    promread.Sum(metrics.Registry, "yonder_net_gateway_failovers_total", map[string]string{"site": "b", "reason": netv1.GatewayNodeNotReady}),
	}
}

// poolEvents are the Events about the GatewayPool pool with the given reason, from the events API.
func poolEvents(ctx context.Context, g Gomega, pool *netv1.GatewayPool, reason string) []corev1.Event {
	list := &corev1.EventList{}
	g.Expect(env.List(ctx, list)).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == pool.UID && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// When a gateway's Node goes NotReady while another gateway of its Site stays healthy, the operator sees
// it where they look: a GatewayFailover Warning on the GatewayPool naming the failed and the remaining
// gateway Node and why, and the controller's counters for that Site move. A restarted controller neither
// repeats the Events nor counts again.
func TestGatewayFailoverIsRecordedAndCounted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	twoSites(ctx, g)
	before := readGatewayCounters()
	c := testenv.Start(t, env, setup.Options{})

	pool := &netv1.GatewayPool{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gateways"}, pool)).To(Succeed())
		g.Expect(pool.Status.Active).To(Equal(int32(2)))
	}).Should(Succeed())
	// The first election counts each gateway once.
	g.Eventually(readGatewayCounters).Should(Equal(gatewayCounters{elected: before.elected + 2, nodeNotReady: before.nodeNotReady, failovers: before.failovers}))

	n := &corev1.Node{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gw1"}, n)).To(Succeed())
	g.Expect(testenv.SetNodeStatus(ctx, env.Client, n, "10.2.0.10", false)).To(Succeed())

	var failover corev1.Event
	g.Eventually(func(g Gomega) {
		events := poolEvents(ctx, g, pool, netv1.GatewayFailoverEvent)
		g.Expect(events).To(HaveLen(1))
		failover = events[0]
	}).Should(Succeed())
	g.Expect(failover.Type).To(Equal(corev1.EventTypeWarning))
	g.Expect(failover.InvolvedObject.Kind).To(Equal("GatewayPool"))
	g.Expect(failover.InvolvedObject.APIVersion).To(Equal(netv1.GroupVersion.String()))
	g.Expect(failover.InvolvedObject.Name).To(Equal("b-gateways"))
	g.Expect(failover.Source.Component).To(Equal(netv1.ControllerName))
	g.Expect(failover.Message).To(Equal("Traffic failed over from b-gw1 (" + netv1.GatewayNodeNotReady + ") to b-gw2"))
	deactivated := poolEvents(ctx, g, pool, netv1.GatewayDeactivatedEvent)
	g.Expect(deactivated).To(HaveLen(1))
	g.Expect(deactivated[0].Message).To(Equal("Gateway b-gw1 stopped carrying traffic: " + netv1.GatewayNodeNotReady))
	g.Eventually(readGatewayCounters).Should(Equal(gatewayCounters{elected: before.elected + 2, nodeNotReady: before.nodeNotReady + 1, failovers: before.failovers + 1}))
	// Events name Nodes and reasons only: none carries a gateway's key or public address.
	expectNoNodeDetails(ctx, g, pool)

	// A restarted controller finds the published status as it would write it: no Event, no count.
	converged(ctx, g, c)
	counted := readGatewayCounters()
	g.Expect(c.Stop()).To(Succeed())
	second := testenv.Start(t, env, setup.Options{})
	g.Eventually(second.RoutePlan.Passes).Should(BeNumerically(">=", 1))
	converged(ctx, g, second)
	g.Expect(readGatewayCounters()).To(Equal(counted))
	g.Expect(poolEvents(ctx, g, pool, netv1.GatewayFailoverEvent)).To(HaveLen(1))
	g.Expect(poolEvents(ctx, g, pool, netv1.GatewayFailoverEvent)[0].Count).To(Equal(int32(1)))
}

// expectNoNodeDetails fails when an Event about pool carries a gateway's public key or endpoint.
func expectNoNodeDetails(ctx context.Context, g Gomega, pool *netv1.GatewayPool) {
	list := &corev1.EventList{}
	g.Expect(env.List(ctx, list)).To(Succeed())
	for _, e := range list.Items {
		if e.InvolvedObject.UID != pool.UID {
			continue
		}
		for _, node := range []string{"b-gw1", "b-gw2"} {
			g.Expect(e.Message).NotTo(ContainSubstring(key(node)))
		}
		g.Expect(strings.Contains(e.Message, "203.0.113.")).To(BeFalse(), e.Message)
	}
}
