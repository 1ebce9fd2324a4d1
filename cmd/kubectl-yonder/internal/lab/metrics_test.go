package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/yonder-dev/yonder/test/prometheus"
	"github.com/yonder-dev/yonder/test/stack"
)

// expectScraped: the lab's Prometheus (the URL `lab status` printed) scrapes every manager — ours and
// CAPI's — and, with a Cluster, the yonder-net-node of every Node there is now, each target up; every
// Node's daemon exports its tunnel metrics (the failover counter, bytes sent to its peers, which the
// WireGuard handshakes alone make non-zero). It returns how long the checks took.
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
	perNode(fmt.Sprintf(`up{job=%q}`, NetNodeJob), prometheus.Equals(1))
	perNode(fmt.Sprintf(`yonder_net_failovers_total{job=%q}`, NetNodeJob), func(float64) bool { return true })
	perNode(fmt.Sprintf(`sum by (node) (yonder_net_peer_tx_bytes_total{job=%q})`, NetNodeJob), prometheus.Above(0))
	return time.Since(t0)
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
