package baremetalhost

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/yonder-dev/yonder/pkg/condevents"
)

// Event reasons of the host controller besides the provisioning states (each state a host enters is an
// Event named after it, e.g. Provisioning, Provisioned, Deprovisioning) and its conditions' reasons.
const (
	// PXEBootRequestedEvent: the BMC accepted the one-time PXE boot and the power action of an attempt.
	PXEBootRequestedEvent = "PXEBootRequested"
	// DiskBootRequestedEvent: the ramdisk reported the image written and the host was set to boot its disk.
	DiskBootRequestedEvent = "DiskBootRequested"
	// ImageWriteFailedEvent: the ramdisk reported that it could not write the image.
	ImageWriteFailedEvent = "ImageWriteFailed"
	// LiveISOBootRequestedEvent: the host attested and was set to SAN-boot its verified live ISO from the
	// boot server on every boot, starting with this power cycle.
	LiveISOBootRequestedEvent = "LiveISOBootRequested"
	// RunningDisklessEvent: a diskless host's ramdisk reported the Node joined; it keeps running from memory.
	RunningDisklessEvent = "RunningDiskless"
	// NodeStartFailedEvent: a diskless host's ramdisk reported that the agent's bootstrap failed.
	NodeStartFailedEvent = "NodeStartFailed"
	// DisksCleanedEvent / DiskCleaningFailedEvent: the ramdisk's report of metadata cleaning.
	DisksCleanedEvent       = "DisksCleaned"
	DiskCleaningFailedEvent = "DiskCleaningFailed"
	// UnattributedAttestationRefusalEvent (Warning, recorded by the boot server's AttestStore): an
	// attestation session for the host was refused for a reason that would be fatal, but it did not come
	// from the address Yonder's DHCP server leases to the host, so it is no evidence against the host and
	// the attempt goes on (UnattributedRefusalAnnotation).
	UnattributedAttestationRefusalEvent = "UnattributedAttestationRefusal"
)

var phaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "yonder_metal_phase_seconds",
	Help:    "Time BareMetalHosts spent in a provisioning state before leaving it (registering, inspecting, provisioning: PXE boot to released bootstrap data, deprovisioning…), by state.",
	Buckets: prometheus.ExponentialBuckets(0.5, 2, 14),
}, []string{"state"})

var hostsDesc = prometheus.NewDesc("yonder_baremetalhosts",
	"BareMetalHosts this manager manages (label "+ManagedLabel+"=true), by namespace, Metal3 provisioning state (none: not registered yet) and operational status (OK, discovered, error, delayed, detached, servicing; none: not reconciled yet).",
	[]string{"namespace", "state", "operational_status"}, nil)

// hosts counts the managed BareMetalHosts from the manager's cache at every scrape, so the figure is
// never older than the cache (no reconcile has to run for it to move), as pkg/claim counts the inventory.
var hosts = &hostsCollector{}

func init() { metrics.Registry.MustRegister(phaseSeconds, hosts) }

// hostKey is one series of yonder_baremetalhosts.
type hostKey struct{ namespace, state, status string }

type hostsCollector struct {
	mu    sync.Mutex
	count func(context.Context) (map[hostKey]int, error)
}

func (c *hostsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- hostsDesc }

func (c *hostsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count == nil {
		return // no host controller in this process
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(hostsDesc, err)
		return
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(hostsDesc, prometheus.GaugeValue, float64(n), k.namespace, k.state, k.status)
	}
}

// countHosts makes the collector count the hosts r manages, read through c (the manager's cached
// client). A later reconciler in this process, as tests start them, replaces an earlier one's count.
func (r *Reconciler) countHosts(c client.Client) {
	hosts.mu.Lock()
	defer hosts.mu.Unlock()
	hosts.count = func(ctx context.Context) (map[hostKey]int, error) {
		list := &metal3v1.BareMetalHostList{}
		if err := c.List(ctx, list, client.MatchingLabels{ManagedLabel: "true"}); err != nil {
			return nil, fmt.Errorf("failed to list BareMetalHosts: %w", err)
		}
		counts := map[hostKey]int{}
		for i := range list.Items {
			h := &list.Items[i]
			if r.manages(h) {
				counts[hostKey{h.Namespace, stateLabel(h), statusLabel(h)}]++
			}
		}
		return counts, nil
	}
}

// stateLabel is the host's provisioning state as Metal3 spells it; a value no Metal3 version defines
// (status is writable by anyone with the status subresource) is "other", so the label stays bounded.
func stateLabel(h *metal3v1.BareMetalHost) string {
	switch st := h.Status.Provisioning.State; st {
	case metal3v1.StateNone:
		return "none"
	case metal3v1.StateUnmanaged, metal3v1.StateRegistering, metal3v1.StateMatchProfile, metal3v1.StatePreparing,
		metal3v1.StateReady, metal3v1.StateAvailable, metal3v1.StateProvisioning, metal3v1.StateProvisioned,
		metal3v1.StateExternallyProvisioned, metal3v1.StateDeprovisioning, metal3v1.StateInspecting,
		metal3v1.StatePoweringOffBeforeDelete, metal3v1.StateDeleting:
		return string(st)
	default:
		return "other"
	}
}

// statusLabel is the host's operational status; a host carrying Metal3's detached annotation is
// "detached" (the controller leaves it alone, whatever its last status says).
func statusLabel(h *metal3v1.BareMetalHost) string {
	if _, ok := h.Annotations[metal3v1.DetachedAnnotation]; ok {
		return string(metal3v1.OperationalStatusDetached)
	}
	switch st := h.Status.OperationalStatus; st {
	case "":
		return "none"
	case metal3v1.OperationalStatusOK, metal3v1.OperationalStatusDiscovered, metal3v1.OperationalStatusError,
		metal3v1.OperationalStatusDelayed, metal3v1.OperationalStatusDetached, metal3v1.OperationalStatusServicing:
		return string(st)
	default:
		return "other"
	}
}

// seen is what a reconcile started from, to tell afterwards what changed.
type seen struct {
	state        metal3v1.ProvisioningState
	phaseStarted *metav1.Time
	errType      metal3v1.ErrorType
	errMessage   string
	conditions   []metav1.Condition
}

func seenAtStart(h *metal3v1.BareMetalHost, st HostState) seen {
	return seen{state: st.State, phaseStarted: st.PhaseStartedAt, errType: h.Status.ErrorType, errMessage: h.Status.ErrorMessage,
		conditions: slices.Clone(h.Status.Conditions)}
}

// recordChanges records, after a reconcile's writes succeeded, what it changed: the provisioning state
// entered (an Event named after it, and the time spent in the one left), a new host error (a Warning named
// after its Metal3 error type) and the conditions that changed (condevents).
func (r *Reconciler) recordChanges(s *scope, was seen) {
	h, rec := s.host, r.recorder()
	if to := s.state.State; to != was.state {
		msg := "Provisioning state " + string(was.state) + " → " + string(to)
		if was.state == metal3v1.StateNone {
			msg = "Provisioning state " + string(to) + " (new host)"
		}
		if was.phaseStarted != nil {
			d := time.Since(was.phaseStarted.Time)
			phaseSeconds.WithLabelValues(string(was.state)).Observe(d.Seconds())
			msg += " after " + d.Round(time.Second).String()
		}
		rec.Event(h, corev1.EventTypeNormal, camel(string(to)), msg)
	}
	if t := h.Status.ErrorType; t != "" && (t != was.errType || h.Status.ErrorMessage != was.errMessage) {
		rec.Event(h, corev1.EventTypeWarning, camel(string(t)), h.Status.ErrorMessage)
	}
	condevents.Record(rec, h, hostConditionEvents, was.conditions, h.Status.Conditions)
}

// hostConditionEvents: waiting for the PXE boot, writing the image, starting a diskless Node, fetching a
// live ISO and cleaning disks are steps under way (Normal Events: a provisioning that goes well raises no
// Warning, however fast its ramdisk reports); a released host being not provisioned is what its
// Deprovisioning and Available Events say already, as is a provisioned one.
var hostConditionEvents = condevents.Policy{
	Progress: []string{BareMetalHostWaitingForPXEBootReason, BareMetalHostWritingImageReason, BareMetalHostStartingNodeReason,
		BareMetalHostFetchingLiveISOReason, BareMetalHostCleaningReason},
	Quiet:     func(reason string) bool { return reason == BareMetalHostNotProvisionedReason },
	QuietTrue: []string{BareMetalHostProvisionedCondition},
}

// camel turns a Metal3 state or error type ("powering off before delete", "provisioning error") into an
// Event reason ("PoweringOffBeforeDelete", "ProvisioningError").
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Fields(s) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// recorder returns the reconciler's Event recorder; one built without a manager records nothing.
func (r *Reconciler) recorder() record.EventRecorder {
	return condevents.Or(r.Recorder)
}
