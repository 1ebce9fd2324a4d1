package baremetalhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// provision is the ordered list of provisioning steps. Each is idempotent and its result is recorded
// in the state annotation before the next one runs, so a controller killed between two steps resumes at
// the first unfinished one and never power-cycles a host twice for one attempt:
//
//  1. the host's user data Secret exists (it is what attestation releases);
//  2. the boot services know the host (DHCP reservation, iPXE script with a one-time ticket);
//  3. one-time PXE boot override + power cycle (BootRequestedAt recorded before, BootSentAt after; a
//     recorded boot that was never sent, as the BMC shows the host off, is sent on restart);
//  4. wait for the boot server's attestation record: released → provisioned, refused → error;
//     no record within ProvisionTimeout → retry with backoff, MaxProvisionAttempts in all.
func (r *Reconciler) provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	if h.Spec.Image == nil || h.Spec.Image.URL == "" || !h.Spec.Online {
		// The consumer withdrew the image (or wants the host off) before it was provisioned.
		s.transition(metal3v1.StateDeprovisioning)
		return r.deprovision(ctx, s)
	}
	if r.NetBoot == nil {
		msg := "this manager runs no boot services (start yonder-metal-manager with the boot network flags) so it cannot provision hosts"
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostNotProvisionedReason, msg)
		s.setError(metal3v1.ProvisioningError, msg, false)
		return ctrl.Result{}, nil
	}
	for _, step := range []func(context.Context, *scope) (ctrl.Result, bool, error){
		r.checkUserData, r.attemptOutcome, r.serveBoot, r.resumeBoot, r.startAttempt,
	} {
		if res, done, err := step(ctx, s); err != nil || done {
			return res, err
		}
	}
	return r.awaitAttempt(ctx, s)
}

// checkUserData is step 1: the host's user data Secret exists (it is what attestation releases); done
// when it does not.
func (r *Reconciler) checkUserData(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	h := s.host
	if h.Spec.UserData == nil || h.Spec.UserData.Name == "" {
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostUserDataMissingReason, "spec.userData names no Secret: the host would have no bootstrap data to receive")
		return ctrl.Result{RequeueAfter: r.RetryInterval}, true, nil
	}
	ns := h.Spec.UserData.Namespace
	if ns == "" {
		ns = h.Namespace
	}
	if ns != h.Namespace {
		msg := fmt.Sprintf("spec.userData names Secret %s/%s in another namespace: it must be in %s", ns, h.Spec.UserData.Name, h.Namespace)
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostUserDataMissingReason, msg)
		s.setError(metal3v1.ProvisioningError, msg, false)
		return ctrl.Result{}, true, nil
	}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Spec.UserData.Name}, &corev1.Secret{}); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, true, fmt.Errorf("failed to read user data Secret of %s: %w", h.Name, err)
		}
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostUserDataMissingReason, fmt.Sprintf("user data Secret %s/%s does not exist yet", ns, h.Spec.UserData.Name))
		return ctrl.Result{RequeueAfter: r.RetryInterval}, true, nil
	}
	return ctrl.Result{}, false, nil
}

// attemptOutcome is step 4, checked first: a recorded outcome of the current attempt decides.
func (r *Reconciler) attemptOutcome(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	if s.state.BootRequestedAt == nil {
		return ctrl.Result{}, false, nil
	}
	rec := readAttestation(s.host)
	if rec == nil || rec.At.Before(s.state.BootRequestedAt) {
		return ctrl.Result{}, false, nil
	}
	if rec.Success && rec.Reason == "BootstrapDataReleased" {
		return r.provisioned(ctx, s), true, nil
	}
	if !rec.Success && rec.Fatal {
		res, err := r.attestationFailed(ctx, s, rec)
		return res, true, err
	}
	if !rec.Success {
		// No evidence against the host (a malformed request, a closed enrolment window): it stays on, the
		// attempt runs to its timeout and is retried, and the condition says what to fix meanwhile.
		setCondition(s.host, BareMetalHostProvisionedCondition, false, BareMetalHostAttestationRefusedReason,
			fmt.Sprintf("the boot server refused PXE boot %d of %d (%s): %s; the attempt is retried after its timeout (%s)",
				s.state.Attempt, r.MaxProvisionAttempts, rec.Reason, rec.Message, r.ProvisionTimeout))
		res, err := r.awaitAttempt(ctx, s)
		return res, true, err
	}
	return ctrl.Result{}, false, nil
}

// serveBoot is step 2: the boot services know the host (rebuilt on every pass: the table is in memory
// and a restart empties it). A host whose boot MAC another managed host already uses (in any namespace),
// or whose image would change its iPXE script, never enters the table.
func (r *Reconciler) serveBoot(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	if res, done, err := r.checkBootMACUnique(ctx, s); err != nil || done {
		return res, done, err
	}
	bh, err := bootHost(s.host, r.Boot)
	if err != nil {
		msg := err.Error()
		reason := BareMetalHostNotProvisionedReason
		if errors.Is(err, inventory.ErrInvalidBootParameter) {
			reason = inventory.ReasonInvalidBootParameter
		}
		setCondition(s.host, BareMetalHostProvisionedCondition, false, reason, msg)
		s.setError(metal3v1.ProvisioningError, msg, false)
		return ctrl.Result{}, true, nil
	}
	r.NetBoot.Set(bh)
	return ctrl.Result{}, false, nil
}

// checkBootMACUnique refuses to boot a host whose boot MAC an earlier-created managed host (any
// namespace; ties broken by namespace/name) also names: the MAC-keyed boot table would hand one host's
// script, ticket and data to the other. The condition names the other host only by namespace when it
// is in another one.
func (r *Reconciler) checkBootMACUnique(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	h := s.host
	other, err := r.bootMACOwner(ctx, h)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if other == "" {
		setCondition(h, BareMetalHostBootMACUniqueCondition, true, BareMetalHostBootMACUniqueReason, "")
		return ctrl.Result{}, false, nil
	}
	msg := fmt.Sprintf("boot MAC %s is already the boot MAC of managed host %s: this host is not booted until its spec.bootMACAddress is unique", h.Spec.BootMACAddress, other)
	setCondition(h, BareMetalHostBootMACUniqueCondition, false, BareMetalHostDuplicateBootMACReason, msg)
	setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostDuplicateBootMACReason, msg)
	s.setError(metal3v1.ProvisioningError, msg, false)
	return ctrl.Result{RequeueAfter: r.RetryInterval}, true, nil
}

// bootMACOwner is the managed host that has h's boot MAC and was created first ("" when that is h).
func (r *Reconciler) bootMACOwner(ctx context.Context, h *metal3v1.BareMetalHost) (string, error) {
	mac, err := net.ParseMAC(h.Spec.BootMACAddress)
	if err != nil {
		return "", nil // bootHost names the error
	}
	list := &metal3v1.BareMetalHostList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{ManagedLabel: "true"}); err != nil {
		return "", fmt.Errorf("failed to list BareMetalHosts for the boot MAC check: %w", err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == h.UID {
			continue
		}
		om, err := net.ParseMAC(o.Spec.BootMACAddress)
		if err != nil || !bytes.Equal(om, mac) || !earlier(o, h) {
			continue
		}
		if o.Namespace != h.Namespace {
			return "in namespace " + o.Namespace, nil
		}
		return o.Name, nil
	}
	return "", nil
}

// earlier orders hosts by creation, then namespace/name: the first claimant of a MAC keeps it.
func earlier(a, b *metal3v1.BareMetalHost) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// resumeBoot is step 3 for an attempt whose pass recorded it but not its power action: it was stopped in
// between (or its last write failed). A host that is off is not booting, so the boot was never sent and
// is sent now as the same attempt, its timeout counted from now. A host that is on may be booting from
// it: it is left alone and the attempt runs to its outcome or timeout, never a second cycle.
func (r *Reconciler) resumeBoot(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	if s.state.BootRequestedAt == nil || s.state.BootSentAt != nil {
		return ctrl.Result{}, false, nil
	}
	sys, err := s.bmc.System(ctx)
	if err != nil {
		res, err := r.powerFailed(s, err.Error())
		return res, true, err
	}
	if sys.PoweredOn {
		s.state.BootSentAt = s.state.BootRequestedAt
		return ctrl.Result{}, false, nil
	}
	ctrl.LoggerFrom(ctx).Info("Resuming a PXE boot request that was recorded but not sent", "attempt", s.state.Attempt)
	s.state.BootRequestedAt = now()
	// As for a new attempt, the status (provisioning state: the boot server releases bootstrap data only
	// to a host whose status says provisioning) is written before the host boots.
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, true, err
	}
	res, err := r.sendBoot(ctx, s, false)
	return res, err != nil || s.state.BootRequestedAt == nil, err
}

// startAttempt is step 3 for a new attempt: one PXE boot per attempt, recorded before it is sent.
func (r *Reconciler) startAttempt(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	if s.state.BootRequestedAt != nil {
		return ctrl.Result{}, false, nil
	}
	if s.state.Attempt >= r.MaxProvisionAttempts {
		// Out of attempts (the error says why): wait for the consumer to withdraw or change the image.
		return ctrl.Result{}, true, nil
	}
	if s.state.RetryAt != nil && time.Now().Before(s.state.RetryAt.Time) {
		return ctrl.Result{RequeueAfter: time.Until(s.state.RetryAt.Time)}, true, nil
	}
	// Record the attempt before acting on it: a controller killed after the power cycle must not cycle
	// the host again when it restarts (it waits for this attempt's outcome or timeout instead).
	s.state.Attempt++
	s.state.BootRequestedAt = now()
	s.state.RetryAt = nil
	// An outcome recorded before this boot (an earlier provisioning in the same second) must not count.
	delete(s.host.Annotations, AttestationAnnotation)
	s.state.BootSentAt = nil
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, true, err
	}
	res, err := r.sendBoot(ctx, s, true)
	return res, err != nil || s.state.BootRequestedAt == nil, err
}

// awaitAttempt is step 4: wait for the boot server's attestation record until ProvisionTimeout, then
// retry with backoff, MaxProvisionAttempts in all.
func (r *Reconciler) awaitAttempt(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	waited := time.Since(s.state.BootRequestedAt.Time)
	if waited < r.ProvisionTimeout {
		if c := meta.FindStatusCondition(h.Status.Conditions, BareMetalHostProvisionedCondition); c != nil && c.Reason == BareMetalHostAttestationRefusedReason {
			return ctrl.Result{RequeueAfter: min(r.ProvisionTimeout-waited+time.Second, 30*time.Second)}, nil
		}
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostWaitingForPXEBootReason,
			fmt.Sprintf("PXE boot %d of %d requested at %s; waiting for the host to boot, attest and fetch its bootstrap data (timeout %s)",
				s.state.Attempt, r.MaxProvisionAttempts, s.state.BootRequestedAt.Format(time.RFC3339), r.ProvisionTimeout))
		return ctrl.Result{RequeueAfter: min(r.ProvisionTimeout-waited+time.Second, 30*time.Second)}, nil
	}
	// Timed out: the host never PXE-booted, or never reached the attestation API.
	msg := fmt.Sprintf("the host did not PXE-boot and attest within %s of PXE boot %d of %d (boot MAC %s): check that the boot NIC is on the boot network, "+
		"that the BMC honours the one-time PXE override, and the host's console", r.ProvisionTimeout, s.state.Attempt, r.MaxProvisionAttempts, h.Spec.BootMACAddress)
	if rec := readAttestation(h); rec != nil && !rec.Success && !rec.At.Before(s.state.BootRequestedAt) {
		// It did reach the boot server, which refused it without evidence against it (e.g. EnrolmentClosed).
		msg = fmt.Sprintf("the boot server refused PXE boot %d of %d (%s: %s) and the host attested no later within %s",
			s.state.Attempt, r.MaxProvisionAttempts, rec.Reason, rec.Message, r.ProvisionTimeout)
	}
	setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostPXEBootTimeoutReason, msg)
	s.setError(metal3v1.ProvisioningError, msg, true)
	ctrl.LoggerFrom(ctx).Info("PXE boot timed out", "attempt", s.state.Attempt)
	s.state.BootRequestedAt, s.state.BootSentAt = nil, nil
	if s.state.Attempt >= r.MaxProvisionAttempts {
		// Out of attempts: power off and stay in error until the image changes or is removed.
		_ = s.bmc.Power(ctx, redfish.PowerOff)
		h.Status.PoweredOn = false
		r.forgetBoot(h)
		return ctrl.Result{}, nil
	}
	retry := r.RetryInterval << (s.state.Attempt - 1)
	s.state.RetryAt = now()
	s.state.RetryAt.Time = s.state.RetryAt.Add(retry)
	return ctrl.Result{RequeueAfter: retry}, nil
}

// sendBoot arms the one-time PXE override and powers the host on (or cycles it when cycle is true and it
// is on), then records BootSentAt. On a BMC failure it clears BootRequestedAt, so the attempt is retried
// after RetryInterval, and returns the powerFailed result.
func (r *Reconciler) sendBoot(ctx context.Context, s *scope, cycle bool) (ctrl.Result, error) {
	fail := func(msg string) (ctrl.Result, error) {
		s.state.BootRequestedAt, s.state.BootSentAt = nil, nil
		return r.powerFailed(s, msg)
	}
	if err := s.bmc.SetOneTimePXEBoot(ctx); err != nil {
		return fail(fmt.Sprintf("failed to set the one-time PXE boot: %v", err))
	}
	action := redfish.PowerOn
	if cycle {
		sys, err := s.bmc.System(ctx)
		if err != nil {
			return fail(err.Error())
		}
		if sys.PoweredOn {
			action = redfish.PowerCycle
		}
	}
	ctrl.LoggerFrom(ctx).Info("PXE-booting host", "action", string(action), "attempt", s.state.Attempt)
	if err := s.bmc.Power(ctx, action); err != nil {
		return fail(fmt.Sprintf("failed to power-cycle the host into PXE: %v", err))
	}
	s.state.BootSentAt = now()
	s.host.Status.PoweredOn = true
	r.recorder().Eventf(s.host, corev1.EventTypeNormal, PXEBootRequestedEvent, "Attempt %d of %d: one-time PXE boot set and power action %s accepted by the BMC", s.state.Attempt, r.MaxProvisionAttempts, action)
	return ctrl.Result{}, nil
}

func (r *Reconciler) powerFailed(s *scope, msg string) (ctrl.Result, error) {
	setCondition(s.host, BareMetalHostProvisionedCondition, false, BareMetalHostPowerFailedReason, msg)
	s.setError(metal3v1.PowerManagementError, msg, true)
	return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
}

func (r *Reconciler) provisioned(ctx context.Context, s *scope) ctrl.Result {
	h := s.host
	img := h.Spec.Image.DeepCopy()
	s.state.Image = img
	s.state.BootRequestedAt, s.state.BootSentAt, s.state.RetryAt, s.state.Attempt = nil, nil, nil, 0
	h.Status.Provisioning.Image = *img
	h.Status.Provisioning.BootMode = h.Spec.BootMode
	h.Status.PoweredOn = true
	s.clearError()
	s.endOperation(metal3v1.StateProvisioning)
	s.transition(metal3v1.StateProvisioned)
	setCondition(h, BareMetalHostProvisionedCondition, true, BareMetalHostProvisionedReason, provisionedMessage(img.URL))
	// The host is running its image: its next boot must not be served a provisioning script.
	r.forgetBoot(h)
	ctrl.LoggerFrom(ctx).Info("Host provisioned")
	return ctrl.Result{RequeueAfter: r.PowerPollInterval}
}

// attestationFailed powers the host off and keeps it in error: a host that fails attestation may run
// something it should not, so there is no automatic retry. Deprovisioning (removing spec.image) clears it.
func (r *Reconciler) attestationFailed(ctx context.Context, s *scope, rec *AttestationRecord) (ctrl.Result, error) {
	h := s.host
	msg := fmt.Sprintf("attestation refused (%s): %s; the host was powered off and gets no bootstrap data. "+
		"If its TPM was replaced on purpose, remove annotation %s and register the new EK (%s) or open an enrolment window (%s), then remove and re-add spec.image",
		rec.Reason, rec.Message, EnrolmentAnnotation, EKFingerprintAnnotation, EnrolmentWindowAnnotation)
	setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostAttestationFailedReason, msg)
	if h.Status.ErrorMessage != msg {
		s.setError(metal3v1.ProvisioningError, msg, true)
		ctrl.LoggerFrom(ctx).Info("Attestation refused, powering host off", "reason", rec.Reason)
	}
	r.forgetBoot(h)
	if err := s.bmc.Power(ctx, redfish.PowerOff); err != nil {
		return r.powerFailed(s, fmt.Sprintf("failed to power off the host that failed attestation: %v", err))
	}
	h.Status.PoweredOn = false
	return ctrl.Result{}, nil
}

// deprovision cleans and powers off a host. Images are only ever run live (nothing is written to the
// host's disks), so "metadata" cleaning has nothing to wipe and "disabled" skips it: both end with the
// host powered off and available.
func (r *Reconciler) deprovision(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	r.forgetBoot(h)
	if !h.Spec.DisablePowerOff {
		if err := s.bmc.Power(ctx, redfish.PowerOff); err != nil {
			msg := fmt.Sprintf("failed to power off the host while deprovisioning: %v", err)
			s.setError(metal3v1.PowerManagementError, msg, true)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		}
		h.Status.PoweredOn = false
	}
	s.state.Image, s.state.BootRequestedAt, s.state.BootSentAt, s.state.RetryAt, s.state.Attempt = nil, nil, nil, nil, 0
	delete(h.Annotations, AttestationAnnotation)
	h.Status.Provisioning.Image = metal3v1.Image{}
	s.clearError()
	setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostNotProvisionedReason, "deprovisioned ("+cleaningMode(h)+" cleaning: live images leave no data on disk)")
	s.endOperation(metal3v1.StateDeprovisioning)
	s.transition(metal3v1.StateAvailable)
	ctrl.LoggerFrom(ctx).Info("Host deprovisioned, available")
	return ctrl.Result{}, nil // the patch of the new state triggers the next pass
}

func cleaningMode(h *metal3v1.BareMetalHost) string {
	if h.Spec.AutomatedCleaningMode == "" {
		return string(metal3v1.CleaningModeMetadata)
	}
	return string(h.Spec.AutomatedCleaningMode)
}
