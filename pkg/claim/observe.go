package claim

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/pkg/condevents"
)

// Event reasons of the claim (kubectl get events --field-selector reason=…), recorded on the machine and
// on the host. The machine's condition changes are recorded as well (recordConditionEvents).
const (
	// HostClaimedEvent: the machine claimed a host.
	HostClaimedEvent = "HostClaimed"
	// HostReleasedEvent: the machine released its host back to the inventory, after the provider's
	// withdrawal (SSH cleanup, deprovisioning).
	HostReleasedEvent = "HostReleased"
	// HostOrphanReleasedEvent (Warning, on the host only): a claim that outlived its machine was released
	// without that machine's withdrawal (orphan.go).
	HostOrphanReleasedEvent = "HostOrphanReleased"
)

// Claim attempt outcomes (the outcome label of yonder_claim_attempts_total).
const (
	attemptClaimed  = "claimed"
	attemptRaceLost = "race_lost"
	attemptNoHost   = "no_host"
	attemptError    = "error"
)

// Host states in yonder_inventory_hosts.
const (
	hostClaimed     = "claimed"
	hostFree        = "free"
	hostUnavailable = "unavailable"
)

var (
	claimAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_claim_attempts_total",
		Help: "Attempts of infrastructure machines to claim an inventory host, by machine kind and outcome (claimed, race_lost: another machine or replica won the host, no_host: none free matches, error).",
	}, []string{"machine_kind", "outcome"})
	claimWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "yonder_claim_wait_seconds",
		Help:    "Time from an infrastructure machine's creation to its claim of a host, by machine kind.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	}, []string{"machine_kind"})
	releases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_claim_releases_total",
		Help: "Hosts released back to the inventory by deleted infrastructure machines, by machine kind.",
	}, []string{"machine_kind"})
	inventoryDesc = prometheus.NewDesc("yonder_inventory_hosts",
		"Inventory hosts by host kind, namespace, failure domain and state (claimed, free: claimable now, unavailable: neither, e.g. unhealthy, not ready or deleting).",
		[]string{"host_kind", "namespace", "failure_domain", "state"}, nil)
	inventory = &inventoryCollector{sources: map[string]func(context.Context) ([]inventoryCount, error){}}
)

func init() {
	metrics.Registry.MustRegister(claimAttempts, claimWait, releases, inventory)
}

// inventoryCount is one series of yonder_inventory_hosts.
type inventoryCount struct {
	namespace, failureDomain, state string
	hosts                           int
}

// inventoryCollector counts each registered host kind's hosts from the manager's cache at every scrape,
// so the figure is never older than the cache (no reconcile has to run for it to move).
type inventoryCollector struct {
	mu      sync.Mutex
	sources map[string]func(context.Context) ([]inventoryCount, error)
}

func (c *inventoryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- inventoryDesc }

func (c *inventoryCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for kind, count := range c.sources {
		counts, err := count(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(inventoryDesc, err)
			continue
		}
		for _, n := range counts {
			ch <- prometheus.MustNewConstMetric(inventoryDesc, prometheus.GaugeValue, float64(n.hosts), kind, n.namespace, n.failureDomain, n.state)
		}
	}
}

// countInventory registers the reconciler's host kind with the inventory collector (a later manager of
// the same kind in this process, as tests start them, replaces an earlier one's).
func (r *Reconciler[M, H]) countInventory(c client.Client) {
	a := r.Adapter
	inventory.mu.Lock()
	defer inventory.mu.Unlock()
	inventory.sources[a.HostKind()] = func(ctx context.Context) ([]inventoryCount, error) {
		hosts, err := List(ctx, c, a.NewHost())
		if err != nil {
			return nil, err
		}
		type key struct{ namespace, failureDomain, state string }
		counts := map[key]int{}
		for _, h := range hosts {
			state := hostUnavailable
			switch {
			case a.ConsumerOf(h) != nil:
				state = hostClaimed
			case a.Available(h):
				state = hostFree
			}
			counts[key{h.GetNamespace(), a.FailureDomain(h), state}]++
		}
		out := make([]inventoryCount, 0, len(counts))
		for k, n := range counts {
			out = append(out, inventoryCount{k.namespace, k.failureDomain, k.state, n})
		}
		return out, nil
	}
}

// countAttempt counts one claim attempt of kind.
func countAttempt(kind string, out outcome, err error) {
	switch {
	case err != nil:
		claimAttempts.WithLabelValues(kind, attemptError).Inc()
	case out == claimed:
		claimAttempts.WithLabelValues(kind, attemptClaimed).Inc()
	case out == raceLost:
		claimAttempts.WithLabelValues(kind, attemptRaceLost).Inc()
	default:
		claimAttempts.WithLabelValues(kind, attemptNoHost).Inc()
	}
}

// recordClaimed records a new claim: an Event on the machine and on the host, and the machine's wait.
func (r *Reconciler[M, H]) recordClaimed(m M, h H, cluster string) {
	a := r.Adapter
	kind := a.Spec().MachineKind
	claimWait.WithLabelValues(kind).Observe(time.Since(m.GetCreationTimestamp().Time).Seconds())
	r.recorder().Eventf(m, corev1.EventTypeNormal, HostClaimedEvent, "Claimed %s %s", a.HostKind(), h.GetName())
	r.recorder().Eventf(h, corev1.EventTypeNormal, HostClaimedEvent, "Claimed by %s %s of Cluster %s", kind, m.GetName(), cluster)
}

// recordReleased records a release: an Event on the machine and on the host.
func (r *Reconciler[M, H]) recordReleased(m M, h H) {
	a := r.Adapter
	kind := a.Spec().MachineKind
	releases.WithLabelValues(kind).Inc()
	r.recorder().Eventf(m, corev1.EventTypeNormal, HostReleasedEvent, "Released %s %s", a.HostKind(), h.GetName())
	r.recorder().Eventf(h, corev1.EventTypeNormal, HostReleasedEvent, "Released by %s %s: free for the next claim", kind, m.GetName())
}

// recordOrphanReleased records the release of a claim that outlived its machine (orphan.go): a Warning
// Event on the host, as there is no machine to record it on.
func (r *Reconciler[M, H]) recordOrphanReleased(h H, machine string) {
	kind := r.Adapter.Spec().MachineKind
	releases.WithLabelValues(kind).Inc()
	r.recorder().Eventf(h, corev1.EventTypeWarning, HostOrphanReleasedEvent,
		"Released: its claim by %s %s outlived that machine, whose deletion never released it", kind, machine)
}

// conditionEvents is which changes of a machine's conditions are recorded: the claim's and the provider's
// hand-off (Ready only summarises them; Claimed turning True is HostClaimedEvent). Waiting and deleting
// are steps every machine takes, not news; a finished hand-off (bootstrapped, provisioned) is.
func conditionEvents(c Conditions) condevents.Policy {
	return condevents.Policy{
		Types:     []string{c.Claimed, c.Provisioned, c.Released},
		Progress:  c.Progress,
		QuietTrue: []string{c.Claimed},
		Quiet: func(reason string) bool {
			return strings.HasPrefix(reason, "Waiting") || reason == clusterv1.DeletingReason ||
				(c.QuietProgress && slices.Contains(c.Progress, reason))
		},
		FirstTrue: true,
	}
}

// recorder returns the reconciler's Event recorder; a reconciler built without a manager (unit tests)
// records nothing.
func (r *Reconciler[M, H]) recorder() record.EventRecorder {
	return condevents.Or(r.Recorder)
}
