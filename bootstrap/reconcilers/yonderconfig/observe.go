package yonderconfig

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

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
)

func init() { metrics.Registry.MustRegister(tokens, dataSeconds) }

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

// tokenCreated records a token made with the data Secret of s.
func (r *Reconciler) tokenCreated(s *scope, id string, expires time.Time) {
	tokens.WithLabelValues("created").Inc()
	dataSeconds.Observe(r.Now().Sub(s.config.CreationTimestamp.Time).Seconds())
	r.recorder().Eventf(s.config, corev1.EventTypeNormal, BootstrapTokenCreatedEvent, "Created bootstrap token %s (valid until %s) and the data Secret", id, expires.UTC().Format(time.RFC3339))
}
