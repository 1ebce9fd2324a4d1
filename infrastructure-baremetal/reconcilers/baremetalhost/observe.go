package baremetalhost

import (
	"slices"
	"strings"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/yonder-dev/yonder/pkg/condevents"
)

// Event reasons of the host controller besides the provisioning states (each state a host enters is an
// Event named after it, e.g. Provisioning, Provisioned, Deprovisioning) and its conditions' reasons.
const (
	// PXEBootRequestedEvent: the BMC accepted the one-time PXE boot and the power action of an attempt.
	PXEBootRequestedEvent = "PXEBootRequested"
)

var phaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "yonder_metal_phase_seconds",
	Help:    "Time BareMetalHosts spent in a provisioning state before leaving it (registering, inspecting, provisioning: PXE boot to released bootstrap data, deprovisioning…), by state.",
	Buckets: prometheus.ExponentialBuckets(0.5, 2, 14),
}, []string{"state"})

func init() { metrics.Registry.MustRegister(phaseSeconds) }

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

// hostConditionEvents: waiting for the PXE boot is a step under way; a released host being not
// provisioned is what its Deprovisioning and Available Events say already, as is a provisioned one.
var hostConditionEvents = condevents.Policy{
	Progress:  []string{BareMetalHostWaitingForPXEBootReason},
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
