package yondercontrolplane

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/condevents"
)

// Event reasons of the YonderControlPlane controller besides its conditions' (kubectl get events
// --field-selector reason=…). A condition that turns False is recorded with the condition's reason
// (SecretNotFound, InvalidKubeconfig, UnsupportedAuth, Unauthorized, Unreachable, ApplyFailed,
// UpgradeRequired …) as a Warning; one that turns True with the condition's type (KubeconfigValid,
// Available, JoinRBACReady, VersionUpToDate). No Event carries anything from inside a kubeconfig: they
// name Secrets, Clusters, API server URLs and versions only.
const (
	// ControlPlaneInitializedEvent: the attached cluster was marked initialized; CAPI goes on with the Cluster.
	ControlPlaneInitializedEvent = "ControlPlaneInitialized"
	// VersionObservedEvent: the attached API server reported its version for the first time.
	VersionObservedEvent = "VersionObserved"
	// VersionChangedEvent: the attached API server reports another version than before (upgraded by its
	// own tooling, or the kubeconfig now points elsewhere).
	VersionChangedEvent = "VersionChanged"
	// KubeconfigSecretCreatedEvent: CAPI's "<cluster>-kubeconfig" was created from the user's kubeconfig.
	KubeconfigSecretCreatedEvent = "KubeconfigSecretCreated"
	// KubeconfigSecretUpdatedEvent: "<cluster>-kubeconfig" was rewritten (the user's Secret changed).
	KubeconfigSecretUpdatedEvent = "KubeconfigSecretUpdated"
)

// controlPlaneConditionEvents: every failure of the kubeconfig, the join RBAC or the version is news, and
// so is each of them becoming True. Available turning False only repeats KubeconfigValid's Warning, and
// waiting for a kubeconfig is a step every YonderControlPlane takes: neither is recorded, and a condition
// that leaves them (or an unknown version) turns True without "again".
var controlPlaneConditionEvents = condevents.Policy{
	Types: []string{
		controlplanev1.YonderControlPlaneKubeconfigValidCondition, clusterv1.AvailableCondition,
		controlplanev1.YonderControlPlaneJoinRBACReadyCondition, controlplanev1.YonderControlPlaneVersionUpToDateCondition,
	},
	Progress: []string{clusterv1.NotAvailableReason, controlplanev1.YonderControlPlaneJoinRBACWaitingForKubeconfigReason, controlplanev1.YonderControlPlaneVersionUnknownReason},
	Quiet: func(reason string) bool {
		return reason == clusterv1.NotAvailableReason || strings.HasPrefix(reason, "Waiting")
	},
	FirstTrue: true,
}

// recorder returns the reconciler's Event recorder; one built without a manager records nothing.
func (r *Reconciler) recorder() record.EventRecorder {
	return condevents.Or(r.Recorder)
}

// observed is what one reconcile found about the attached cluster before it changed anything, so the
// Events after the patch tell only what changed.
type observed struct {
	initialized bool
	version     string
}

func observe(cp *controlplanev1.YonderControlPlane) observed {
	return observed{initialized: ptr.Deref(cp.Status.Initialization.ControlPlaneInitialized, false), version: cp.Status.Version}
}

// recordStatusEvents records the changes of status fields that are not conditions: initialization and
// the version the API server reports. Call it only after the patch that wrote them succeeded.
func recordStatusEvents(rec record.EventRecorder, cp *controlplanev1.YonderControlPlane, before observed) {
	after := observe(cp)
	if after.initialized && !before.initialized {
		rec.Eventf(cp, corev1.EventTypeNormal, ControlPlaneInitializedEvent, "Attached control plane at %s:%d is initialized (Kubernetes %s)",
			cp.Spec.ControlPlaneEndpoint.Host, cp.Spec.ControlPlaneEndpoint.Port, after.version)
	}
	switch {
	case after.version == "" || after.version == before.version:
	case before.version == "":
		rec.Eventf(cp, corev1.EventTypeNormal, VersionObservedEvent, "The attached API server runs Kubernetes %s", after.version)
	default:
		rec.Eventf(cp, corev1.EventTypeNormal, VersionChangedEvent, "The attached API server now runs Kubernetes %s (was %s)", after.version, before.version)
	}
}

// kubeconfigSecretWritten records that "<cluster>-kubeconfig" was created or rewritten: by name only.
func (r *Reconciler) kubeconfigSecretWritten(cp *controlplanev1.YonderControlPlane, s *corev1.Secret, created bool) {
	if created {
		r.recorder().Eventf(cp, corev1.EventTypeNormal, KubeconfigSecretCreatedEvent, "Created Secret %s, the Cluster's kubeconfig", klog.KObj(s))
		return
	}
	r.recorder().Eventf(cp, corev1.EventTypeNormal, KubeconfigSecretUpdatedEvent, "Updated Secret %s, the Cluster's kubeconfig, from spec.kubeconfigSecretRef", klog.KObj(s))
}
