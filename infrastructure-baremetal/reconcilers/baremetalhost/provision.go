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
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/liveiso"
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
//  4. wait for the boot server's attestation record: released → step 5 or, for a live ISO (format
//     live-iso, fetched and verified by the boot server before step 3), persistent PXE boot into the
//     ISO (the host's script SAN-boots it) + power cycle → provisioned;
//     a fatal refusal → error; no record within ProvisionTimeout → retry with backoff, MaxProvisionAttempts
//     in all (a refusal of a session not from the host's DHCP lease, UnattributedRefusalAnnotation, is no
//     outcome: only the timeout's message names it);
//  5. a disk image: wait for the ramdisk's report (ReportAnnotation) that it wrote the image and the
//     config drive; written → persistent disk boot + power cycle → provisioned; failed, or no report
//     within ImageWriteTimeout → the attempt is retried as after a timeout. The diskless method
//     (customDeploy yonder-diskless): wait, as long, for the ramdisk's report that the agent's bootstrap
//     finished; joined → provisioned as the host runs (no disk boot, no power action).
func (r *Reconciler) provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	if !deploys(h) || !h.Spec.Online {
		// The consumer withdrew the image or custom deploy (or wants the host off) before it was provisioned.
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
		r.checkUserData, r.attemptOutcome, r.serveBoot, r.resumeBoot, r.prepareLiveISO, r.startAttempt,
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
	if liveBoot(h) {
		// As in Metal3, a live ISO is booted as it is: no user data reaches it, none is needed.
		return ctrl.Result{}, false, nil
	}
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
	if rec.Success && rec.Reason == attest.ReasonReleased {
		if liveBoot(s.host) {
			if c := meta.FindStatusCondition(s.host.Status.Conditions, BareMetalHostAttestedCondition); (c == nil || c.Reason != attest.ReasonReleased) &&
				time.Since(rec.At.Time) < recordSettleTime {
				// The boot server writes the release in two patches (the annotation, then the Attested
				// condition, with an optimistic lock). Acting between them, this pass's write would conflict
				// with the second and the next pass would power-cycle the host a second time.
				return ctrl.Result{RequeueAfter: time.Second}, true, nil
			}
			res, err := r.bootLiveISO(ctx, s)
			return res, true, err
		}
		res, err := r.awaitReport(ctx, s, rec)
		return res, true, err
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

// recordSettleTime bounds how long a release waits for the rest of the boot server's record of it (the
// Attested condition) before the controller acts on the annotation alone.
const recordSettleTime = 30 * time.Second

// prepareLiveISO holds a new attempt of a live ISO until the boot server has fetched and verified it: an
// ISO that cannot be downloaded, or does not match its checksum, is named before the host is touched.
func (r *Reconciler) prepareLiveISO(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	if !liveBoot(s.host) || s.state.BootRequestedAt != nil {
		return ctrl.Result{}, false, nil
	}
	_, res, ready := r.liveISO(ctx, s, *s.host.Spec.Image)
	return res, !ready, nil
}

// liveISO asks the boot server's cache for img and, until it is ready, says why on the Provisioned
// condition: ready is false while it is fetched (res polls it) or after it failed (res waits for the
// cache's next try; the host is in error meanwhile, as for any provisioning failure).
func (r *Reconciler) liveISO(ctx context.Context, s *scope, img metal3v1.Image) (liveiso.State, ctrl.Result, bool) {
	h := s.host
	if r.LiveISOs == nil {
		msg := "this manager has no live ISO cache (start yonder-metal-manager with the boot network flags) so it cannot boot format live-iso"
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostLiveISOUnavailableReason, msg)
		s.setError(metal3v1.ProvisioningError, msg, false)
		return liveiso.State{}, ctrl.Result{}, false
	}
	st := r.LiveISOs.Ensure(img)
	switch st.Phase {
	case liveiso.Ready:
		return st, ctrl.Result{}, true
	case liveiso.Failed:
		msg := "the boot server could not make the live ISO ready to boot: " + st.Message
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostLiveISOUnavailableReason, msg)
		if h.Status.ErrorMessage != msg {
			ctrl.LoggerFrom(ctx).Info("Live ISO unavailable", "message", st.Message, "retryAt", st.RetryAt)
		}
		s.setError(metal3v1.ProvisioningError, msg, false)
		if st.RetryAt.IsZero() {
			return st, ctrl.Result{}, false // the image itself is refused: only a changed spec.image helps
		}
		return st, ctrl.Result{RequeueAfter: max(time.Until(st.RetryAt), time.Second)}, false
	default:
		msg := "the boot server is downloading and verifying the live ISO before the host boots it"
		if st.Message != "" {
			msg += " (" + st.Message + ")"
		}
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostFetchingLiveISOReason, msg)
		return st, ctrl.Result{RequeueAfter: 5 * time.Second}, false
	}
}

// bootLiveISO ends the attempt of a live ISO: the host attested (proving it is the enrolled machine) and
// received nothing; from now on every boot of it SAN-boots its verified ISO from the boot server — a
// persistent PXE boot whose script names the ISO — starting with this power cycle. Killed between the
// cycle and the status write, the controller cycles once more: the ISO boots either way.
func (r *Reconciler) bootLiveISO(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	iso, res, ready := r.liveISO(ctx, s, *h.Spec.Image)
	if !ready {
		// Dropped from the cache since the attempt started (a restarted manager with an ISO that has no
		// checksum): the host waits in its ramdisk, within the attempt's timeout.
		return res, nil
	}
	if err := r.serveLiveISO(ctx, s, iso); err != nil {
		return ctrl.Result{}, err
	}
	if res, ok := r.bootPersistently(ctx, s, s.bmc.SetNetworkBoot, "PXE boot of the live ISO", "into its live ISO"); !ok {
		return res, nil
	}
	verified := "no checksum given: served as downloaded"
	if iso.Verified {
		verified = "verified against its checksum"
	}
	r.recorder().Eventf(h, corev1.EventTypeNormal, LiveISOBootRequestedEvent, "Booting the live ISO (%d bytes, sha256 %s, %s) from the boot server on every boot", iso.Size, iso.SHA256, verified)
	ctrl.LoggerFrom(ctx).Info("Attested, booting the live ISO", "bytes", iso.Size, "sha256", iso.SHA256)
	return r.provisioned(ctx, s)
}

// serveLiveISO puts the host in the boot table with a script that SAN-boots iso (no ticket: the ISO
// attests nothing), under the boot MAC rule of keepLease.
func (r *Reconciler) serveLiveISO(ctx context.Context, s *scope, iso liveiso.State) error {
	h := s.host
	bh, err := leaseHost(h)
	if err != nil {
		return err
	}
	other, err := r.bootMACOwner(ctx, h)
	if err != nil {
		return err
	}
	if other != "" {
		setCondition(h, BareMetalHostBootMACUniqueCondition, false, BareMetalHostDuplicateBootMACReason, fmt.Sprintf(
			"boot MAC %s is already the boot MAC of managed host %s: this host's live ISO is not served until one of the two is removed", h.Spec.BootMACAddress, other))
		r.forgetBoot(h)
		return nil
	}
	setCondition(h, BareMetalHostBootMACUniqueCondition, true, BareMetalHostBootMACUniqueReason, "")
	bh.Boot = inventory.BootConfig{LiveISO: iso.Path}
	r.NetBoot.Set(bh)
	return nil
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
	if !diskless(s.host) && !isLiveImage(s.host.Spec.Image) {
		// From this boot on the ramdisk may write the disk (the image can be withdrawn while it does):
		// deprovisioning cleans it, as Metal3 cleans every deprovisioned host. A diskless host's ramdisk
		// writes nothing: it is powered off without a cleaning boot.
		s.state.DisksWritten = true
	}
	// An outcome recorded before this boot (an earlier provisioning in the same second) must not count.
	delete(s.host.Annotations, AttestationAnnotation)
	delete(s.host.Annotations, UnattributedRefusalAnnotation)
	delete(s.host.Annotations, ReportAnnotation)
	delete(s.host.Annotations, ReportTokenAnnotation)
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
		msg := fmt.Sprintf("PXE boot %d of %d requested at %s; waiting for the host to boot, attest and fetch its bootstrap data (timeout %s)",
			s.state.Attempt, r.MaxProvisionAttempts, s.state.BootRequestedAt.Format(time.RFC3339), r.ProvisionTimeout)
		if u := readUnattributed(h, s.state.BootRequestedAt); u != nil {
			msg += fmt.Sprintf("; meanwhile a session from %s, which is not this host's DHCP lease, was refused (%s: %s): no evidence against the host, which may still attest",
				u.From, u.Reason, u.Message)
		}
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostWaitingForPXEBootReason, msg)
		return ctrl.Result{RequeueAfter: min(r.ProvisionTimeout-waited+time.Second, 30*time.Second)}, nil
	}
	// Timed out: the host never PXE-booted, or never reached the attestation API.
	msg := fmt.Sprintf("the host did not PXE-boot and attest within %s of PXE boot %d of %d (boot MAC %s): check that the boot NIC is on the boot network, "+
		"that the BMC honours the one-time PXE override, and the host's console", r.ProvisionTimeout, s.state.Attempt, r.MaxProvisionAttempts, h.Spec.BootMACAddress)
	rec := readAttestation(h)
	if rec != nil && (rec.Success || rec.At.Before(s.state.BootRequestedAt)) {
		rec = nil
	}
	if u := readUnattributed(h, s.state.BootRequestedAt); u != nil && (rec == nil || u.At.After(rec.At.Time)) {
		// The last refusal seen was of a session not proven to be the host's: it may have been the host.
		msg = fmt.Sprintf("the host did not attest within %s of PXE boot %d of %d; the last session refused for it came from %s, which is not its DHCP lease "+
			"(%s: %s). If that was this host and its TPM or firmware changed on purpose, re-enrol it: remove annotation %s and register the new EK (%s) or open an enrolment window (%s)",
			r.ProvisionTimeout, s.state.Attempt, r.MaxProvisionAttempts, u.From, u.Reason, u.Message, EnrolmentAnnotation, EKFingerprintAnnotation, EnrolmentWindowAnnotation)
	} else if rec != nil {
		// It did reach the boot server, which refused it without evidence against it (e.g. EnrolmentClosed).
		msg = fmt.Sprintf("the boot server refused PXE boot %d of %d (%s: %s) and the host attested no later within %s",
			s.state.Attempt, r.MaxProvisionAttempts, rec.Reason, rec.Message, r.ProvisionTimeout)
	}
	ctrl.LoggerFrom(ctx).Info("PXE boot timed out", "attempt", s.state.Attempt)
	return r.retryAttempt(ctx, s, BareMetalHostPXEBootTimeoutReason, msg), nil
}

// retryAttempt ends a failed attempt: the host is in error with msg, and the next attempt comes after a
// backoff, or, out of attempts, the host is powered off and stays in error until its image changes.
func (r *Reconciler) retryAttempt(ctx context.Context, s *scope, reason, msg string) ctrl.Result {
	h := s.host
	setCondition(h, BareMetalHostProvisionedCondition, false, reason, msg)
	s.setError(metal3v1.ProvisioningError, msg, true)
	s.state.BootRequestedAt, s.state.BootSentAt = nil, nil
	// Out of attempts: the host stays in error until the image changes or is removed.
	return r.backoffOrPowerOff(ctx, s, s.state.Attempt)
}

// backoffOrPowerOff schedules the next of MaxProvisionAttempts boots after attempt failed (RetryInterval,
// doubled per attempt) or, after the last one, powers the host off and takes it out of the boot services.
func (r *Reconciler) backoffOrPowerOff(ctx context.Context, s *scope, attempt int) ctrl.Result {
	if attempt >= r.MaxProvisionAttempts {
		_ = s.bmc.Power(ctx, redfish.PowerOff)
		s.host.Status.PoweredOn = false
		r.forgetBoot(s.host)
		return ctrl.Result{}
	}
	retry := r.RetryInterval << (attempt - 1)
	s.state.RetryAt = now()
	s.state.RetryAt.Time = s.state.RetryAt.Add(retry)
	return ctrl.Result{RequeueAfter: retry}
}

// deployWork is what the ramdisk does between its release and its report (step 5), in the words of
// the conditions, Events and logs that follow it.
type deployWork struct {
	action                 string // the report's action (wire.Action*)
	doing                  string // what the host is doing, after "the host attested at <time> and "
	timedOut               string // what did not happen within the timeout
	failed                 string // what the host could not do, before ": <the ramdisk's message>"
	waitReason, failReason string // the Provisioned condition's reasons
	failEvent              string
}

// work is the deployWork of the host's spec: running the Node from memory (diskless) or writing the image.
func work(h *metal3v1.BareMetalHost) deployWork {
	if diskless(h) {
		return deployWork{action: wire.ActionRunNode,
			doing:      "is running the agent's bootstrap from its ramdisk to join the Node (customDeploy " + infrav1.DisklessDeployMethod + ")",
			timedOut:   "report its Node joined",
			failed:     "the host could not start its Node from its ramdisk",
			waitReason: BareMetalHostStartingNodeReason, failReason: BareMetalHostNodeStartFailedReason, failEvent: NodeStartFailedEvent}
	}
	return deployWork{action: wire.ActionWriteImage,
		doing:      "is writing " + h.Spec.Image.URL + " to its root disk",
		timedOut:   "report its image written",
		failed:     "the host could not write " + h.Spec.Image.URL,
		waitReason: BareMetalHostWritingImageReason, failReason: BareMetalHostImageWriteFailedReason, failEvent: ImageWriteFailedEvent}
}

// awaitReport is step 5: the ramdisk received its instructions (rec, the release) and writes the image,
// or runs the Node from memory (diskless); its report decides, within ImageWriteTimeout. A written image
// is booted from disk and the host is provisioned; a joined diskless Node is provisioned as it runs.
func (r *Reconciler) awaitReport(ctx context.Context, s *scope, rec *AttestationRecord) (ctrl.Result, error) {
	h := s.host
	w := work(h)
	rep := readReport(h)
	if rep == nil || rep.Action != w.action || rep.At.Before(s.state.BootRequestedAt) {
		waited := time.Since(rec.At.Time)
		if waited < r.ImageWriteTimeout {
			setCondition(h, BareMetalHostProvisionedCondition, false, w.waitReason,
				fmt.Sprintf("attempt %d of %d: the host attested at %s and %s (timeout %s)",
					s.state.Attempt, r.MaxProvisionAttempts, rec.At.Format(time.RFC3339), w.doing, r.ImageWriteTimeout))
			return ctrl.Result{RequeueAfter: min(r.ImageWriteTimeout-waited+time.Second, 30*time.Second)}, nil
		}
		msg := fmt.Sprintf("the host attested but did not %s within %s (attempt %d of %d): check its console", w.timedOut, r.ImageWriteTimeout, s.state.Attempt, r.MaxProvisionAttempts)
		ctrl.LoggerFrom(ctx).Info("Ramdisk report timed out", "action", w.action, "attempt", s.state.Attempt)
		return r.retryAttempt(ctx, s, w.failReason, msg), nil
	}
	if !rep.Success {
		msg := fmt.Sprintf("%s (attempt %d of %d): %s", w.failed, s.state.Attempt, r.MaxProvisionAttempts, rep.Message)
		ctrl.LoggerFrom(ctx).Info("Ramdisk reported a failure", "action", w.action, "attempt", s.state.Attempt, "message", rep.Message)
		r.recorder().Eventf(h, corev1.EventTypeWarning, w.failEvent, "Attempt %d of %d: %s", s.state.Attempt, r.MaxProvisionAttempts, rep.Message)
		return r.retryAttempt(ctx, s, w.failReason, msg), nil
	}
	if w.action == wire.ActionRunNode {
		// The Node lives in the ramdisk's memory: no disk boot, no power action, the host keeps running.
		r.recorder().Eventf(h, corev1.EventTypeNormal, RunningDisklessEvent, "Node joined from the ramdisk in %s; the host runs diskless (a reboot loses the Node)", rep.Duration)
		ctrl.LoggerFrom(ctx).Info("Node joined, host runs diskless", "duration", rep.Duration)
		return r.provisioned(ctx, s)
	}
	// Written: every boot from now on boots the disk, starting with this power cycle. Killed between the
	// cycle and the status write, the controller cycles once more: the target is the disk either way.
	if res, ok := r.bootPersistently(ctx, s, s.bmc.SetDiskBoot, "disk boot", "from its disk"); !ok {
		return res, nil
	}
	r.recorder().Eventf(h, corev1.EventTypeNormal, DiskBootRequestedEvent, "Image written to %s (%d bytes in %s); booting the host from its disk", rep.Device, rep.Bytes, rep.Duration)
	ctrl.LoggerFrom(ctx).Info("Image written, booting from disk", "device", rep.Device, "bytes", rep.Bytes, "duration", rep.Duration)
	return r.provisioned(ctx, s)
}

// bootPersistently makes every boot from now on boot what set names (the disk, or the network for a live
// ISO) and boots the host into it: a power cycle, or a power-on when it is off. ok is false, with the
// powerFailed result, when the BMC refused a step; what and into complete its messages.
func (r *Reconciler) bootPersistently(ctx context.Context, s *scope, set func(context.Context, redfish.BootMode) error, what, into string) (ctrl.Result, bool) {
	if err := set(ctx, bootMode(s.host)); err != nil {
		res, _ := r.powerFailed(s, fmt.Sprintf("failed to set the persistent %s: %v", what, err))
		return res, false
	}
	action := redfish.PowerCycle
	if sys, err := s.bmc.System(ctx); err != nil {
		res, _ := r.powerFailed(s, err.Error())
		return res, false
	} else if !sys.PoweredOn {
		action = redfish.PowerOn
	}
	if err := s.bmc.Power(ctx, action); err != nil {
		res, _ := r.powerFailed(s, fmt.Sprintf("failed to boot the host %s: %v", into, err))
		return res, false
	}
	return ctrl.Result{}, true
}

// sendBoot arms the one-time PXE override and powers the host on (or cycles it when cycle is true and it
// is on), then records BootSentAt. On a BMC failure it clears BootRequestedAt, so the attempt is retried
// after RetryInterval, and returns the powerFailed result.
func (r *Reconciler) sendBoot(ctx context.Context, s *scope, cycle bool) (ctrl.Result, error) {
	fail := func(msg string) (ctrl.Result, error) {
		s.state.BootRequestedAt, s.state.BootSentAt = nil, nil
		return r.powerFailed(s, msg)
	}
	if err := s.bmc.SetOneTimePXEBoot(ctx, bootMode(s.host)); err != nil {
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

// provisioned records the host as running its image, or its diskless Node. An error (the boot MAC check
// could not list the hosts) leaves the host out of the boot table and provisioned; the retried pass puts
// its lease back.
func (r *Reconciler) provisioned(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	var img *metal3v1.Image
	var cd *metal3v1.CustomDeploy
	if diskless(h) {
		cd = h.Spec.CustomDeploy.DeepCopy()
	} else {
		img = h.Spec.Image.DeepCopy()
	}
	s.state.Image, s.state.CustomDeploy = img, cd
	s.state.BootRequestedAt, s.state.BootSentAt, s.state.RetryAt, s.state.Attempt = nil, nil, nil, 0
	h.Status.Provisioning.Image = ptr.Deref(img, metal3v1.Image{})
	h.Status.Provisioning.CustomDeploy = cd.DeepCopy()
	h.Status.Provisioning.BootMode = h.Spec.BootMode
	h.Status.PoweredOn = true
	s.clearError()
	s.endOperation(metal3v1.StateProvisioning)
	s.transition(metal3v1.StateProvisioned)
	setCondition(h, BareMetalHostProvisionedCondition, true, BareMetalHostProvisionedReason, provisionedMessage(h.Status.Provisioning))
	// The host is running its image: its next boot must not be served a provisioning script, but the OS
	// it booted keeps the address it was leased.
	err := r.keepLease(ctx, s)
	ctrl.LoggerFrom(ctx).Info("Host provisioned")
	return ctrl.Result{RequeueAfter: r.PowerPollInterval}, err
}

// keepLease puts a provisioned host in the boot table lease-only when it has a boot address
// (BootAddressAnnotation), replacing its boot entry: DHCP keeps leasing it that address, with no boot
// options, because the OS it booted from disk (a cloud image whose cloud-init falls back to DHCP when the
// config drive has no network_data.json) needs it, and the addresses recorded at attestation (the
// Machine's) stay true; the boot server serves it no script and no ticket. The table is in memory, so
// every pass of a provisioned host calls this (a restarted manager starts empty); it reads only the
// cache and writes nothing but the BootMACUnique condition when that changes. Without a boot address, or
// when an earlier host has the same boot MAC (checkBootMACUnique's rule: the entry would replace that
// host's), the host's own entry is removed instead.
func (r *Reconciler) keepLease(ctx context.Context, s *scope) error {
	h := s.host
	if r.NetBoot == nil {
		return nil
	}
	if img := s.state.Image; img != nil && isLiveImage(img) && s.state.CustomDeploy == nil {
		// A live ISO host boots it from the network every time: its entry is its ISO's script. The host
		// keeps running what it booted while the cache has not got the ISO again (a restarted manager
		// fetches it anew); a reboot meanwhile finds no script, and the firmware goes on to its next boot
		// device. Nothing here touches the Provisioned condition or the error: the host is provisioned.
		if r.LiveISOs == nil {
			r.forgetBoot(h)
			return nil
		}
		iso := r.LiveISOs.Ensure(*img)
		if iso.Phase != liveiso.Ready {
			ctrl.LoggerFrom(ctx).Info("The live ISO of this provisioned host is not ready to serve", "phase", iso.Phase, "message", iso.Message)
			r.forgetBoot(h)
			return nil
		}
		return r.serveLiveISO(ctx, s, iso)
	}
	lh, err := leaseHost(h)
	if err != nil || !lh.Address.IsValid() {
		// No reservation to keep (an invalid one is refused by the webhook and named when provisioning).
		r.forgetBoot(h)
		return nil
	}
	other, err := r.bootMACOwner(ctx, h)
	if err != nil {
		r.forgetBoot(h)
		return err
	}
	if other != "" {
		setCondition(h, BareMetalHostBootMACUniqueCondition, false, BareMetalHostDuplicateBootMACReason, fmt.Sprintf(
			"boot MAC %s is already the boot MAC of managed host %s: the DHCP server does not lease this host its boot address %s until one of the two is removed",
			h.Spec.BootMACAddress, other, lh.Address))
		r.forgetBoot(h)
		return nil
	}
	setCondition(h, BareMetalHostBootMACUniqueCondition, true, BareMetalHostBootMACUniqueReason, "")
	lh.LeaseOnly = true
	r.NetBoot.Set(lh)
	return nil
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

// deprovision cleans and powers off a host. A host whose disks Yonder wrote (a disk image's instructions
// were released) is cleaned first when automatedCleaningMode is metadata: its ramdisk PXE-boots, attests
// and removes every disk's partition tables and signatures (cleanDisks). "disabled" leaves the disks as
// they are, and a host that wrote nothing (live-iso, diskless) is not cleaned in either mode. All end
// with the host powered off and available.
func (r *Reconciler) deprovision(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	cleaned := "nothing was written to its disks"
	switch {
	case s.state.DisksWritten && cleaningMode(h) == string(metal3v1.CleaningModeMetadata):
		if res, done, err := r.cleanDisks(ctx, s); err != nil || !done {
			return res, err
		}
		cleaned = "disk metadata cleaned"
	case s.state.DisksWritten:
		cleaned = "cleaning disabled: the disks keep the image"
	case s.state.CustomDeploy != nil:
		// Whatever the cleaning mode: the Node ran from memory and powering off ends it.
		cleaned = "the host ran diskless, nothing was written to its disks"
	case s.state.Image != nil && isLiveImage(s.state.Image):
		cleaned = "the host ran its live ISO, nothing was written to its disks"
	}
	r.forgetBoot(h)
	if s.state.Image != nil && isLiveImage(s.state.Image) {
		if err := r.dropUnusedLiveISOs(ctx, h); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !h.Spec.DisablePowerOff {
		if err := s.bmc.Power(ctx, redfish.PowerOff); err != nil {
			msg := fmt.Sprintf("failed to power off the host while deprovisioning: %v", err)
			s.setError(metal3v1.PowerManagementError, msg, true)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		}
		h.Status.PoweredOn = false
	}
	s.state.Image, s.state.CustomDeploy, s.state.BootRequestedAt, s.state.BootSentAt, s.state.RetryAt, s.state.Attempt = nil, nil, nil, nil, nil, 0
	s.state.DisksWritten, s.state.CleanRequestedAt, s.state.CleanSentAt, s.state.CleanAttempt = false, nil, nil, 0
	delete(h.Annotations, AttestationAnnotation)
	delete(h.Annotations, UnattributedRefusalAnnotation)
	delete(h.Annotations, ReportAnnotation)
	delete(h.Annotations, ReportTokenAnnotation)
	h.Status.Provisioning.Image, h.Status.Provisioning.CustomDeploy = metal3v1.Image{}, nil
	s.clearError()
	setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostNotProvisionedReason, "deprovisioned ("+cleaningMode(h)+" cleaning: "+cleaned+")")
	s.endOperation(metal3v1.StateDeprovisioning)
	s.transition(metal3v1.StateAvailable)
	ctrl.LoggerFrom(ctx).Info("Host deprovisioned, available", "cleaning", cleaned)
	return ctrl.Result{}, nil // the patch of the new state triggers the next pass
}

// dropUnusedLiveISOs frees the boot server's disk of the live ISOs no host but released (the one being
// deprovisioned) provisions or runs.
func (r *Reconciler) dropUnusedLiveISOs(ctx context.Context, released *metal3v1.BareMetalHost) error {
	if r.LiveISOs == nil {
		return nil
	}
	list := &metal3v1.BareMetalHostList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{ManagedLabel: "true"}); err != nil {
		return fmt.Errorf("failed to list BareMetalHosts for the live ISOs in use: %w", err)
	}
	var inUse []metal3v1.Image
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == released.UID {
			continue
		}
		if liveBoot(o) {
			inUse = append(inUse, *o.Spec.Image)
		}
		if img := o.Status.Provisioning.Image; isLiveImage(&img) {
			inUse = append(inUse, img)
		}
	}
	r.LiveISOs.Keep(inUse)
	return nil
}

// cleanDisks runs the cleaning boot, in the steps of a provisioning attempt: the boot recorded before it
// is sent (CleanRequestedAt, CleanSentAt), the host attests and receives the clean instructions, and its
// ramdisk's report decides. done is true once the disks are clean. A failed or timed-out attempt is
// retried with backoff, MaxProvisionAttempts in all; then the host stays in error (and powered off), not
// available: a host whose disks may still hold a cluster's data is not handed to the next consumer.
func (r *Reconciler) cleanDisks(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	h := s.host
	if r.NetBoot == nil {
		msg := "automatedCleaningMode metadata needs the boot services to boot the cleaning ramdisk (start yonder-metal-manager with the boot network flags), or set it to disabled"
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostCleaningFailedReason, msg)
		s.setError(metal3v1.ProvisioningError, msg, false)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, false, nil
	}
	if res, done, err := r.serveBoot(ctx, s); err != nil || done {
		return res, false, err
	}
	fresh := s.state.CleanRequestedAt == nil
	if fresh {
		if s.state.CleanAttempt >= r.MaxProvisionAttempts {
			return ctrl.Result{}, false, nil // in error (cleanFailed says why) until an operator acts
		}
		if s.state.RetryAt != nil && time.Now().Before(s.state.RetryAt.Time) {
			return ctrl.Result{RequeueAfter: time.Until(s.state.RetryAt.Time)}, false, nil
		}
		s.state.CleanAttempt++
		s.state.CleanRequestedAt, s.state.CleanSentAt, s.state.RetryAt = now(), nil, nil
		delete(h.Annotations, AttestationAnnotation)
		delete(h.Annotations, UnattributedRefusalAnnotation)
		delete(h.Annotations, ReportAnnotation)
		delete(h.Annotations, ReportTokenAnnotation)
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostCleaningReason,
			fmt.Sprintf("cleaning boot %d of %d: the host PXE-boots its ramdisk to remove the partition tables and signatures of its disks", s.state.CleanAttempt, r.MaxProvisionAttempts))
		if err := r.persist(ctx, s); err != nil {
			return ctrl.Result{}, false, err
		}
	}
	if s.state.CleanSentAt == nil {
		sys, err := s.bmc.System(ctx)
		if err != nil {
			res, err := r.powerFailed(s, err.Error())
			return res, false, err
		}
		if fresh || !sys.PoweredOn {
			// A new attempt, or one a predecessor recorded but never sent (the host is off). A host that
			// is on after a recorded request may be booting from it: it is left alone.
			if err := s.bmc.SetOneTimePXEBoot(ctx, bootMode(s.host)); err != nil {
				res, err := r.powerFailed(s, fmt.Sprintf("failed to set the one-time PXE boot for cleaning: %v", err))
				return res, false, err
			}
			action := redfish.PowerOn
			if sys.PoweredOn {
				action = redfish.PowerCycle
			}
			if err := s.bmc.Power(ctx, action); err != nil {
				res, err := r.powerFailed(s, fmt.Sprintf("failed to power the host into its cleaning boot: %v", err))
				return res, false, err
			}
			h.Status.PoweredOn = true
			r.recorder().Eventf(h, corev1.EventTypeNormal, PXEBootRequestedEvent, "Cleaning boot %d of %d: one-time PXE boot set and power action %s accepted by the BMC", s.state.CleanAttempt, r.MaxProvisionAttempts, action)
		}
		s.state.CleanSentAt = now()
	}
	if rec := readAttestation(h); rec != nil && !rec.At.Before(s.state.CleanRequestedAt) && !rec.Success && rec.Fatal {
		res, err := r.attestationFailed(ctx, s, rec)
		return res, false, err
	}
	rep := readReport(h)
	if rep != nil && rep.Action == wire.ActionClean && !rep.At.Before(s.state.CleanRequestedAt) {
		if rep.Success {
			r.recorder().Eventf(h, corev1.EventTypeNormal, DisksCleanedEvent, "Disk metadata cleaned in %s: %s", rep.Duration, rep.Message)
			return ctrl.Result{}, true, nil
		}
		r.recorder().Eventf(h, corev1.EventTypeWarning, DiskCleaningFailedEvent, "Cleaning boot %d of %d: %s", s.state.CleanAttempt, r.MaxProvisionAttempts, rep.Message)
		return r.cleanFailed(ctx, s, "the ramdisk could not clean the disks: "+rep.Message), false, nil
	}
	timeout := r.ProvisionTimeout + r.ImageWriteTimeout
	if waited := time.Since(s.state.CleanRequestedAt.Time); waited < timeout {
		return ctrl.Result{RequeueAfter: min(timeout-waited+time.Second, 30*time.Second)}, false, nil
	}
	why := fmt.Sprintf("no cleaning report within %s of the cleaning boot", timeout)
	if u := readUnattributed(h, s.state.CleanRequestedAt); u != nil {
		why += fmt.Sprintf("; the last session refused for the host came from %s, which is not its DHCP lease (%s: %s)", u.From, u.Reason, u.Message)
	}
	return r.cleanFailed(ctx, s, why), false, nil
}

// cleanFailed ends a failed cleaning attempt: retried after a backoff, or, out of attempts, the host is
// powered off and stays in error.
func (r *Reconciler) cleanFailed(ctx context.Context, s *scope, why string) ctrl.Result {
	h := s.host
	msg := fmt.Sprintf("cleaning boot %d of %d failed: %s", s.state.CleanAttempt, r.MaxProvisionAttempts, why)
	setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostCleaningFailedReason, msg)
	s.setError(metal3v1.ProvisioningError, msg, true)
	ctrl.LoggerFrom(ctx).Info("Disk cleaning failed", "attempt", s.state.CleanAttempt, "reason", why)
	s.state.CleanRequestedAt, s.state.CleanSentAt = nil, nil
	return r.backoffOrPowerOff(ctx, s, s.state.CleanAttempt)
}

func cleaningMode(h *metal3v1.BareMetalHost) string {
	if h.Spec.AutomatedCleaningMode == "" {
		return string(metal3v1.CleaningModeMetadata)
	}
	return string(h.Spec.AutomatedCleaningMode)
}

// bootMode is the firmware mode spec.bootMode asks for: UEFI or legacy BIOS, sent with every boot override
// as Ironic does; unset keeps the mode the host is set to.
func bootMode(h *metal3v1.BareMetalHost) redfish.BootMode {
	switch h.Spec.BootMode {
	case metal3v1.UEFI:
		return redfish.BootModeUEFI
	case metal3v1.Legacy:
		return redfish.BootModeLegacy
	}
	return redfish.BootModeCurrent
}
