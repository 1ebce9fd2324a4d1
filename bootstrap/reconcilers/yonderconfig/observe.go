package yonderconfig

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/condevents"
)

// Event reasons of the YonderConfig controller besides its conditions' (kubectl get events
// --field-selector reason=…). Events name a bootstrap token by its ID, the public half kubeadm prints
// too; the secret half never leaves the data Secret.
const (
	// BootstrapTokenCreatedEvent: the Machine's bootstrap token was created with its data Secret.
	BootstrapTokenCreatedEvent = "BootstrapTokenCreated"
	// BootstrapTokenReplacedEvent: an expired or missing token was replaced and the data Secret rewritten.
	BootstrapTokenReplacedEvent = "BootstrapTokenReplaced"
	// BootstrapTokenDeletedEvent: the Node joined and its token was deleted.
	BootstrapTokenDeletedEvent = "BootstrapTokenDeleted"
)

var (
	tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_bootstrap_tokens_total",
		Help: "Bootstrap token operations in workload clusters, by action (created, replaced: expired or missing, extended, deleted: the Node joined, stopped: no longer refreshed).",
	}, []string{"action"})
	dataSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "yonder_bootstrap_data_seconds",
		Help:    "Time from a YonderConfig's creation to its bootstrap data Secret.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
	})
	joinSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "yonder_bootstrap_node_join_seconds",
		Help: "Time from a YonderConfig's creation to the controller seeing its Machine's Node (when it deletes the bootstrap token): host provisioning, boot and the kubelet's join.",
		// 5 s … about 5.7 h: a netns host joins in seconds, a bare-metal host after its BIOS and image write.
		Buckets: prometheus.ExponentialBuckets(5, 2, 13),
	})
	outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_bootstrap_outcomes_total",
		Help: "How each Machine's bootstrap ended, by outcome: joined (its Node registered), refresh_window_expired (no Node within spec.bootstrapToken.refreshSeconds), remediated (a MachineHealthCheck gave up on it first), deleted (the Machine went away before its Node joined).",
	}, []string{"outcome"})
)

// Outcomes of yonder_bootstrap_outcomes_total: how a Machine's bootstrap ended, counted once when it ends.
const (
	outcomeJoined               = "joined"
	outcomeRefreshWindowExpired = "refresh_window_expired"
	outcomeRemediated           = "remediated"
	outcomeDeleted              = "deleted"
)

func init() { metrics.Registry.MustRegister(tokens, dataSeconds, joinSeconds, outcomes) }

// configConditionEvents: the data Secret becoming available is news (the Machine can be provisioned);
// waiting for the workload cluster is a step every YonderConfig takes.
var configConditionEvents = condevents.Policy{
	Types:     []string{bootstrapv1.YonderConfigDataSecretAvailableCondition, bootstrapv1.YonderConfigBootstrapTokenReadyCondition},
	Quiet:     func(reason string) bool { return strings.HasPrefix(reason, "Waiting") },
	FirstTrue: true,
}

// recorder returns the reconciler's Event recorder; one built without a manager records nothing.
func (r *Reconciler) recorder() record.EventRecorder {
	return condevents.Or(r.Recorder)
}

// nodeJoined records that the Machine's Node joined: the end of a successful bootstrap.
func (r *Reconciler) nodeJoined(s *scope) {
	outcomes.WithLabelValues(outcomeJoined).Inc()
	joinSeconds.Observe(r.Now().Sub(s.config.CreationTimestamp.Time).Seconds())
}

// bootstrapEndedOnDelete counts a YonderConfig deleted while its Machine's bootstrap was still under way
// (its data written, no Node yet, not stopped for another reason that was counted already).
func bootstrapEndedOnDelete(cfg *bootstrapv1.YonderConfig) {
	if !ptr.Deref(cfg.Status.Initialization.DataSecretCreated, false) {
		return
	}
	switch conditions.GetReason(cfg, bootstrapv1.YonderConfigBootstrapTokenReadyCondition) {
	case bootstrapv1.YonderConfigBootstrapTokenRemovedReason, bootstrapv1.YonderConfigBootstrapTokenRefreshWindowExpiredReason,
		bootstrapv1.YonderConfigBootstrapTokenMachineRemediatingReason:
		return
	}
	outcomes.WithLabelValues(outcomeDeleted).Inc()
}

// stoppedOutcome is the outcome a stop of the token refresh (stopRefreshing's reason) ends a bootstrap with.
func stoppedOutcome(reason string) string {
	if reason == bootstrapv1.YonderConfigBootstrapTokenMachineRemediatingReason {
		return outcomeRemediated
	}
	return outcomeRefreshWindowExpired
}

// tokenCreated records a token made with the data Secret of s.
func (r *Reconciler) tokenCreated(s *scope, id string, expires time.Time) {
	tokens.WithLabelValues("created").Inc()
	dataSeconds.Observe(r.Now().Sub(s.config.CreationTimestamp.Time).Seconds())
	r.recorder().Eventf(s.config, corev1.EventTypeNormal, BootstrapTokenCreatedEvent, "Created bootstrap token %s (valid until %s) and the data Secret", id, expires.UTC().Format(time.RFC3339))
}
