package sitetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/prometheus"
)

// metricsJob is the scrape job of the failover labs' daemons, named as the lab's and the docs' job of
// yonder-net-node.
const metricsJob = "yonder-net-node"

// scrapeInterval is short so that a probe state that lasts a few seconds is scraped.
const scrapeInterval = 250 * time.Millisecond

// startPrometheus runs the real Prometheus (Debian's package, as the lab's) for the test.
func startPrometheus(t *testing.T) *prometheus.Prometheus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := prometheus.Start(ctx, prometheus.Options{ScrapeInterval: scrapeInterval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// scrapedLab is a failover lab whose nodes on both sides of the failing gateway group, a1 and gb1,
// Prometheus scrapes (their daemons' /metrics, forwarded out of their namespaces; labels node, site and lab).
type scrapedLab struct {
	f    *failoverLab
	p    *prometheus.Prometheus
	lab  string
	diag func() string
}

// scrape points metricsJob at a1 and gb1 of this lab (replacing an earlier lab's targets) and waits until
// both are up and export their failover counter.
func (f *failoverLab) scrape(t *testing.T, p *prometheus.Prometheus, lab string) *scrapedLab {
	t.Helper()
	targets := map[string]map[string]string{}
	for _, n := range []*Node{f.a1, f.s.Nodes["gb1"]} {
		targets[f.s.ForwardDebug(n)] = map[string]string{"node": n.Name, "site": n.Site, "lab": lab}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.SetJob(ctx, prometheus.Job{Name: metricsJob, Scheme: "http", Targets: targets}); err != nil {
		t.Fatal(err)
	}
	s := &scrapedLab{f: f, p: p, lab: lab}
	s.diag = func() string {
		ts, err := p.Targets(context.Background())
		return fmt.Sprintf("targets %+v (error %v)\nPrometheus log:\n%s", ts, err, p.Log(10))
	}
	_, err := p.WaitFor(ctx, s.query("up"), func(v prometheus.Vector) bool {
		return len(v) == 2 && prometheus.All(prometheus.Equals(1))(v)
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), s.diag)
	s.failovers(t)
	return s
}

// query selects metric's series of this lab's job.
func (s *scrapedLab) query(metric string, matchers ...string) string {
	m := fmt.Sprintf(`job=%q,lab=%q`, metricsJob, s.lab)
	for _, x := range matchers {
		m += "," + x
	}
	return fmt.Sprintf("%s{%s}", metric, m)
}

// failovers returns the scraped yonder_net_failovers_total of a1 and gb1, once Prometheus has both.
func (s *scrapedLab) failovers(t *testing.T) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := s.p.WaitFor(ctx, s.query("yonder_net_failovers_total"), func(v prometheus.Vector) bool { return len(v) == 2 })
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), s.diag)
	out := map[string]float64{}
	for _, x := range v {
		out[x.Labels["node"]] = x.Value
	}
	return out
}

// expectFailedOver: through PromQL, both a1 and gb1 counted a failover since before, and each reports the
// failed gateway's probes down.
func (s *scrapedLab) expectFailedOver(t *testing.T, before map[string]float64, gw *Node) {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []*Node{s.f.a1, s.f.s.Nodes["gb1"]} {
		q := s.query("yonder_net_failovers_total", fmt.Sprintf("node=%q", n.Name))
		_, err := s.p.WaitFor(ctx, q, func(v prometheus.Vector) bool { return len(v) == 1 && v[0].Value > before[n.Name] })
		g.Expect(err).NotTo(HaveOccurred(), "%s counts the failover (it had %v)\n%s", n.Name, before[n.Name], s.diag())
		q = s.query("yonder_net_probe_up", fmt.Sprintf("node=%q,peer=%q", n.Name, s.f.probeKey(n, gw)))
		_, err = s.p.WaitFor(ctx, q, func(v prometheus.Vector) bool { return len(v) == 1 && v[0].Value == 0 })
		g.Expect(err).NotTo(HaveOccurred(), "%s reports %s's probes down\n%s", n.Name, gw.Name, s.diag())
	}
}

// expectBackUp: through PromQL, a1 and gb1 report the restored gateway's probes answered again.
func (s *scrapedLab) expectBackUp(t *testing.T, gw *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []*Node{s.f.a1, s.f.s.Nodes["gb1"]} {
		q := s.query("yonder_net_probe_up", fmt.Sprintf("node=%q,peer=%q", n.Name, s.f.probeKey(n, gw)))
		_, err := s.p.WaitFor(ctx, q, func(v prometheus.Vector) bool { return len(v) == 1 && v[0].Value == 1 })
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), "%s reports %s's probes answered again\n%s", n.Name, gw.Name, s.diag())
	}
}
