package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/prometheus"
	"github.com/yonder-dev/yonder/test/stack"
)

// expectScraped: the lab's Prometheus (the URL `lab status` printed) scrapes every manager — ours and
// CAPI's — and, with a Cluster, both yonder-net-controller replicas and the yonder-net-node of every Node
// there is now, each target up; every Node's daemon exports its tunnel metrics (the failover counter,
// bytes sent to its peers, which the WireGuard handshakes alone make non-zero); and the controller counted
// an elected gateway at every site. It returns how long the checks took.
func (l labUnderTest) expectScraped(t *testing.T, st *State) time.Duration {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	g.Expect(st.Prometheus).To(HavePrefix("http://127.0.0.1:"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := prometheus.Attach(st.Prometheus, prometheus.DefaultScrapeInterval)
	managers := 5 // CAPI, bootstrap, control plane, ssh … and metal
	if !l.metal {
		managers--
	}
	_, err := p.WaitFor(ctx, fmt.Sprintf(`up{job=~"%s|%s"}`, stack.ProvidersJob, stack.CAPIJob), func(v prometheus.Vector) bool {
		return len(v) == managers && prometheus.All(prometheus.Equals(1))(v)
	})
	g.Expect(err).NotTo(HaveOccurred(), targets(p))
	if !l.withCluster {
		return time.Since(t0)
	}
	_, wl := labClients(g, st)
	nodes := &corev1.NodeList{}
	g.Expect(wl.List(ctx, nodes)).To(Succeed())
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	perNode := func(q string, ok func(float64) bool) {
		t.Helper()
		_, err := p.WaitFor(ctx, q, func(v prometheus.Vector) bool {
			var seen []string
			for _, s := range v {
				if ok(s.Value) {
					seen = append(seen, s.Labels["node"])
				}
			}
			return len(v) == len(names) && len(seen) == len(names)
		})
		g.Expect(err).NotTo(HaveOccurred(), "%s for every Node %v\n%s", q, names, targets(p)())
		v, err := p.Query(ctx, q)
		g.Expect(err).NotTo(HaveOccurred())
		var got []string
		for _, s := range v {
			got = append(got, s.Labels["node"])
		}
		g.Expect(got).To(ConsistOf(names), q)
	}
	// Two replicas (network/config/manager/manager.yaml), wherever they run now: the target set follows them.
	_, err = p.WaitFor(ctx, fmt.Sprintf(`up{job=%q}`, NetControllerJob), func(v prometheus.Vector) bool {
		return len(v) == 2 && prometheus.All(prometheus.Equals(1))(v)
	})
	g.Expect(err).NotTo(HaveOccurred(), "both yonder-net-controller replicas scraped\n%s", targets(p)())
	// Only the leader counts, and a replica that stopped (its Node drained) takes its series with it: the
	// highest value each series had within the lab's life, summed per site.
	_, err = p.WaitFor(ctx, fmt.Sprintf(`sum by (site) (max_over_time(yonder_net_gateway_elections_total{job=%q,reason="Elected"}[1h]))`, NetControllerJob), func(v prometheus.Vector) bool {
		var sites []string
		for _, s := range v {
			if s.Value >= 1 {
				sites = append(sites, s.Labels["site"])
			}
		}
		return len(sites) == 4
	})
	g.Expect(err).NotTo(HaveOccurred(), "the controller elected a gateway at each of the four sites\n%s", targets(p)())
	perNode(fmt.Sprintf(`up{job=%q}`, NetNodeJob), prometheus.Equals(1))
	perNode(fmt.Sprintf(`yonder_net_failovers_total{job=%q}`, NetNodeJob), func(float64) bool { return true })
	perNode(fmt.Sprintf(`sum by (node) (yonder_net_peer_tx_bytes_total{job=%q})`, NetNodeJob), prometheus.Above(0))
	return time.Since(t0)
}

// expectGatewayStopped: yonder-net-controller recorded the Warning Event GatewayDeactivated on site's
// GatewayPool naming node (its only Node, drained and deleted by a scale-down). The stop is counted too
// (yonder_net_gateway_elections_total with the stop's reason), but not asserted here: when the leader ran on
// that Node, the drain's cordon makes it count and the eviction stops it within the same second, before a
// scrape; the next leader does not count a change already published. The Event is the durable record, and
// expectGatewayElectedAgain checks the counter.
func expectGatewayStopped(t *testing.T, st *State, site, node string) {
	t.Helper()
	_, wl := labClients(NewWithT(t), st)
	NewWithT(t).Eventually(func(g Gomega) {
		evs := &corev1.EventList{}
		g.Expect(wl.List(context.Background(), evs)).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", netv1.GatewayDeactivatedEvent),
			HaveField("InvolvedObject.Kind", "GatewayPool"),
			HaveField("InvolvedObject.Name", site+"-gateways"),
			HaveField("Message", HavePrefix("Gateway "+node+" stopped carrying traffic: "))),
		), "the controller's Event for %s's gateway %s", site, node)
	}).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}

// expectGatewayElectedAgain: through the lab's Prometheus, yonder-net-controller counted a second gateway
// elected at site (the Node that joined on the host a scale-down freed), after the first one it counted at
// `lab up`. Only the leader counts and a replica can leave with a drained Node, so it reads the highest value
// each series had over the lab's life, summed; the leader that elects the new Node is alive and scraped.
func expectGatewayElectedAgain(t *testing.T, st *State, site string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := prometheus.Attach(st.Prometheus, prometheus.DefaultScrapeInterval)
	q := fmt.Sprintf(`sum(max_over_time(yonder_net_gateway_elections_total{job=%q,site=%q,reason="Elected"}[1h]))`, NetControllerJob, site)
	v, err := p.WaitFor(ctx, q, func(v prometheus.Vector) bool { return len(v) == 1 && v[0].Value >= 2 })
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), "the controller counted %s's new gateway elected\n%s", site, targets(p)())
	stops, err := p.Query(ctx, fmt.Sprintf(`max_over_time(yonder_net_gateway_elections_total{job=%q,site=%q,reason!="Elected"}[1h])`, NetControllerJob, site))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var why []string
	for _, s := range stops {
		why = append(why, fmt.Sprintf("%s=%v", s.Labels["reason"], s.Value))
	}
	t.Logf("Prometheus: %v gateway elections at %s; stops scraped: %v", v[0].Value, site, why)
}

// targets lists the targets' health and last scrape errors, for a failed wait.
func targets(p *prometheus.Prometheus) func() string {
	return func() string {
		ts, err := p.Targets(context.Background())
		var b strings.Builder
		fmt.Fprintf(&b, "targets (error %v):\n", err)
		for _, t := range ts {
			fmt.Fprintf(&b, "  %s %s %s %s\n", t.Job, t.ScrapeURL, t.Health, t.LastError)
		}
		return b.String()
	}
}
