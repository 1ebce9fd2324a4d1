package routeplan

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reasons of yonder_net_gateway_elections_total besides the candidates' inactive reasons
// (netv1.GatewayNodeNotReady, netv1.GatewayDataplaneNotReady, …): the label stays a small fixed set.
const (
	// electedReason: a candidate started to carry traffic.
	electedReason = "Elected"
	// notSelectedReason: an active gateway left the pool (its Node lost the label or was deleted).
	notSelectedReason = "NotSelected"
	// unknownReason: an inactive gateway whose status gives no reason (not expected; kept bounded).
	unknownReason = "Unknown"
)

// The controller's view of gateway elections, beside each node daemon's yonder_net_failovers_total (its
// probes taking a peer out of its own hashing): these count what the controller published, once per
// status write that changed the pool, so a restarted controller does not count again. Labels are bounded:
// Sites are objects an administrator creates, reasons a fixed set.
var (
	gatewayElections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_net_gateway_elections_total",
		Help: "Changes of a Site's active gateways: a candidate elected to carry traffic (reason Elected) or an active gateway that stopped, by why (NodeNotReady, DataplaneNotReady, Unschedulable, Deleting, NoPublicKey, NotSelected).",
	}, []string{"site", "reason"})
	gatewayFailovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_net_gateway_failovers_total",
		Help: "Active gateways whose traffic failed over to other active gateways of their Site, by why the gateway stopped (reasons as yonder_net_gateway_elections_total).",
	}, []string{"site", "reason"})
)

// countedSites are the Sites with series, for forgetDeletedSites (tests run several reconcilers in one
// process, hence the lock).
var countedSites = struct {
	sync.Mutex
	names map[string]bool
}{names: map[string]bool{}}

// controller-runtime's registry is the one the manager's metrics endpoint serves.
func init() { metrics.Registry.MustRegister(gatewayElections, gatewayFailovers) }

// countGatewayChanges adds one pool's changes to its Site's counters.
func countGatewayChanges(site string, c gatewayChanges) {
	if len(c.elected)+len(c.stopped) == 0 {
		return
	}
	countedSites.Lock()
	defer countedSites.Unlock()
	countedSites.names[site] = true
	if n := len(c.elected); n > 0 {
		gatewayElections.WithLabelValues(site, electedReason).Add(float64(n))
	}
	for _, s := range c.stopped {
		gatewayElections.WithLabelValues(site, s.reason).Inc()
		if c.failover() {
			gatewayFailovers.WithLabelValues(site, s.reason).Inc()
		}
	}
}

// forgetDeletedSites drops the series of Sites that no longer exist, so deleted Sites do not pile up in
// every scrape.
func forgetDeletedSites(exists func(site string) bool) {
	countedSites.Lock()
	defer countedSites.Unlock()
	for site := range countedSites.names {
		if exists(site) {
			continue
		}
		gatewayElections.DeletePartialMatch(prometheus.Labels{"site": site})
		gatewayFailovers.DeletePartialMatch(prometheus.Labels{"site": site})
		delete(countedSites.names, site)
	}
}
