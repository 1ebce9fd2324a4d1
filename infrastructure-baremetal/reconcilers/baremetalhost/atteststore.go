package baremetalhost

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
)

// AttestStore is the attestation service's view of BareMetalHosts (attest.Store): the pinned TPM lives
// in EnrolmentAnnotation, bootstrap data is the Secret named by spec.userData, and outcomes are written
// to AttestationAnnotation, which the host reconciler acts on. Host names are "<namespace>/<name>".
type AttestStore struct {
	// Client writes hosts (and reads them when Reader is nil).
	Client client.Client
	// Reader reads hosts and user data Secrets uncached (the manager's API reader). The boot server acts on
	// a host moments after the controller wrote its provisioning status: a QEMU VM attests within seconds,
	// a real host within a minute, but a busy manager's cache may still show the host available, and a
	// release refused on that stale read would put a healthy host in error.
	Reader client.Reader
}

// reader is the uncached Reader when set, else the Client.
func (s AttestStore) reader() client.Reader {
	if s.Reader != nil {
		return s.Reader
	}
	return s.Client
}

var (
	_ attest.Store      = AttestStore{}
	_ attest.EKRegistry = AttestStore{}
)

func splitHost(host string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(host, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("host %q is not <namespace>/<name>", host)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

func (s AttestStore) get(ctx context.Context, host string) (*metal3v1.BareMetalHost, error) {
	key, err := splitHost(host)
	if err != nil {
		return nil, err
	}
	h := &metal3v1.BareMetalHost{}
	if err := s.reader().Get(ctx, key, h); err != nil {
		return nil, fmt.Errorf("failed to get BareMetalHost %s: %w", host, err)
	}
	if h.Labels[ManagedLabel] != "true" {
		return nil, fmt.Errorf("BareMetalHost %s is not managed by Yonder (label %s)", host, ManagedLabel)
	}
	return h, nil
}

// Enrolment implements attest.Store.
func (s AttestStore) Enrolment(ctx context.Context, host string) (*attest.Enrolment, error) {
	h, err := s.get(ctx, host)
	if err != nil {
		return nil, err
	}
	raw, ok := h.Annotations[EnrolmentAnnotation]
	if !ok {
		return nil, nil
	}
	e := &attest.Enrolment{}
	if err := json.Unmarshal([]byte(raw), e); err != nil {
		return nil, fmt.Errorf("failed to decode annotation %s of %s: %w", EnrolmentAnnotation, host, err)
	}
	return e, nil
}

// RegisteredEK implements attest.EKRegistry: the fingerprint an operator registered in
// EKFingerprintAnnotation. The attestation service trusts that EK by its hash, so a TPM without an EK
// certificate whose EK it is attests even where vendor roots are configured.
func (s AttestStore) RegisteredEK(ctx context.Context, host string) (string, error) {
	h, err := s.get(ctx, host)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(h.Annotations[EKFingerprintAnnotation]), nil
}

// Enrol implements attest.Store. Enrolment is explicit: the TPM is pinned only when its EK has the
// fingerprint registered in EKFingerprintAnnotation, or while an operator's enrolment window
// (EnrolmentWindowAnnotation, an RFC 3339 deadline) is open; the pin closes the window in the same update,
// so a second TPM can never be pinned by a later boot. A refusal is an *attest.RefusedError.
func (s AttestStore) Enrol(ctx context.Context, host string, e attest.Enrolment) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("failed to encode enrolment of %s: %w", host, err)
	}
	fp, err := attest.EKFingerprint(e.EKPublic)
	if err != nil {
		return &attest.RefusedError{Status: 400, Reason: wire.ReasonMalformedRequest, Message: err.Error()}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		h, err := s.get(ctx, host)
		if err != nil {
			return err
		}
		if _, pinned := h.Annotations[EnrolmentAnnotation]; pinned {
			return fmt.Errorf("host %s already has a pinned TPM", host)
		}
		if rerr := enrolmentAllowed(h, fp, time.Now()); rerr != nil {
			return rerr
		}
		orig := h.DeepCopy()
		h.Annotations[EnrolmentAnnotation] = string(raw)
		delete(h.Annotations, EnrolmentWindowAnnotation)
		// The optimistic lock makes "window open" and "pin" one atomic step.
		if err := s.Client.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Pinned host TPM", "BareMetalHost", host, "ekSHA256", fp)
		return nil
	})
}

// enrolmentAllowed is the explicit enrolment policy of a host without a pinned TPM whose EK has
// fingerprint fp: a registered fingerprint decides alone; otherwise a window must be open at now.
func enrolmentAllowed(h *metal3v1.BareMetalHost, fp string, now time.Time) *attest.RefusedError {
	if want, ok := h.Annotations[EKFingerprintAnnotation]; ok {
		if !strings.EqualFold(strings.TrimSpace(want), fp) {
			return &attest.RefusedError{Status: 403, Reason: wire.ReasonEKMismatch, Message: fmt.Sprintf(
				"the TPM's EK (sha256 %s) is not the one registered in annotation %s (%s)", fp, EKFingerprintAnnotation, want)}
		}
		return nil
	}
	raw, ok := h.Annotations[EnrolmentWindowAnnotation]
	if !ok {
		return &attest.RefusedError{Status: 403, Reason: wire.ReasonEnrolmentClosed, Message: fmt.Sprintf(
			"the host has no pinned TPM, no registered EK (annotation %s) and no enrolment window: run `kubectl yonder host enrol %s/%s --for 30m` "+
				"(annotation %s=<RFC 3339 deadline>) and provision again", EKFingerprintAnnotation, h.Namespace, h.Name, EnrolmentWindowAnnotation)}
	}
	deadline, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		return &attest.RefusedError{Status: 403, Reason: wire.ReasonEnrolmentClosed, Message: fmt.Sprintf(
			"annotation %s=%q is not an RFC 3339 deadline: the window is closed", EnrolmentWindowAnnotation, raw)}
	}
	if !now.Before(deadline) {
		return &attest.RefusedError{Status: 403, Reason: wire.ReasonEnrolmentClosed, Message: fmt.Sprintf(
			"the enrolment window closed at %s: open a new one to enrol this host's TPM", deadline.Format(time.RFC3339))}
	}
	return nil
}

// BootstrapData implements attest.Store: the user data Secret's "userData" key (what CAPM3 writes), or
// "value" (a CAPI bootstrap data Secret named directly).
func (s AttestStore) BootstrapData(ctx context.Context, host string) ([]byte, error) {
	h, err := s.get(ctx, host)
	if err != nil {
		return nil, err
	}
	if h.Spec.UserData == nil || h.Spec.UserData.Name == "" {
		return nil, fmt.Errorf("host %s has no spec.userData", host)
	}
	if h.Status.Provisioning.State != metal3v1.StateProvisioning {
		return nil, fmt.Errorf("host %s is %q, not provisioning: no bootstrap data is released", host, h.Status.Provisioning.State)
	}
	sec := &corev1.Secret{}
	if err := s.reader().Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.UserData.Name}, sec); err != nil {
		return nil, fmt.Errorf("failed to get user data Secret of %s: %w", host, err)
	}
	for _, k := range []string{"userData", "value"} {
		if v, ok := sec.Data[k]; ok {
			return v, nil
		}
	}
	return nil, fmt.Errorf("user data Secret %s/%s has neither key userData nor value", h.Namespace, sec.Name)
}

// recordBackoff spaces Record's retries. The host reconciler answers the annotation with its own status
// write at once, so Record's status patch conflicts often on a busy manager; a few seconds of retries
// keep the Attested condition from being dropped.
var recordBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1}

// Record implements attest.Store: the outcome lands on the host (annotation and Attested condition).
func (s AttestStore) Record(ctx context.Context, host string, r attest.Result) {
	rec := AttestationRecord{At: *now(), Success: r.Success, Reason: r.Reason, Message: r.Message, Fatal: r.Fatal}
	raw, _ := json.Marshal(rec)
	err := retry.RetryOnConflict(recordBackoff, func() error {
		h, err := s.get(ctx, host)
		if err != nil {
			return err
		}
		orig := h.DeepCopy()
		h.Annotations[AttestationAnnotation] = string(raw)
		// The response is the host as stored, status included: the base of the status patch below.
		if err := s.Client.Patch(ctx, h, client.MergeFrom(orig)); err != nil {
			return err
		}
		origStatus := h.DeepCopy()
		status := metav1.ConditionTrue
		if !r.Success {
			status = metav1.ConditionFalse
		}
		setConditionRaw(h, metav1.Condition{Type: BareMetalHostAttestedCondition, Status: status, Reason: r.Reason, Message: r.Message})
		// A merge patch replaces the whole conditions list. The host reconciler acts on the annotation
		// written above and may set Provisioned=True in between; without the optimistic lock this patch
		// would write the older list back (state provisioned, Provisioned condition False, for good).
		return s.Client.Status().Patch(ctx, h, client.MergeFromWithOptions(origStatus, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to record attestation outcome", "BareMetalHost", host, "reason", r.Reason)
	}
}
