package baremetalhost

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// Metal3's BareMetalHost annotations, honoured as the baremetal-operator (BMO) honours them, so that CAPM3's
// remediation (reboot.metal3.io/<key>), clusterctl move (baremetalhost.metal3.io/status) and the operators'
// habits (detached, inspect.metal3.io) work unchanged on hosts Yonder manages.

// Event reasons of the annotations (condition changes are recorded as Events by condevents).
const (
	// InvalidAnnotationEvent: a Metal3 annotation's value could not be parsed; what is done instead is in
	// the message.
	InvalidAnnotationEvent = "InvalidAnnotationValue"
	// RebootPowerOffEvent: reboot annotations asked for the host off and the BMC accepted the power-off.
	RebootPowerOffEvent = "RebootPowerOff"
	// SoftPowerOffTimedOutEvent: the OS did not shut down within SoftPowerOffTimeout; the host was forced off.
	SoftPowerOffTimedOutEvent = "SoftPowerOffTimedOut"
	// RebootedEvent: the host was seen off for reboot.metal3.io, whose annotation the controller removed.
	RebootedEvent = "Rebooted"
	// InspectionRequestedEvent: inspect.metal3.io asked for a new inspection of an available host.
	InspectionRequestedEvent = "InspectionRequested"
	// HardwareDetailsEvent: status.hardware was set from inspect.metal3.io/hardwaredetails;
	// HardwareDetailsIgnoredEvent: the annotation was removed unused (status.hardware is set and
	// inspection is enabled, Metal3's rule).
	HardwareDetailsEvent        = "UpdateHardwareDetails"
	HardwareDetailsIgnoredEvent = "HardwareDetailsIgnored"
	// StatusRestoredEvent: status was rebuilt from baremetalhost.metal3.io/status.
	StatusRestoredEvent = "StatusRestored"
	// DetachedEvent: the host carries baremetalhost.metal3.io/detached and the controller stopped managing it.
	DetachedEvent = "Detached"
)

// rebootRequest is what the host's reboot annotations ask for.
type rebootRequest struct {
	// once: the bare reboot.metal3.io is present (one reboot; the controller removes it).
	once bool
	// held are the reboot.metal3.io/<key> annotations: the host stays off while any is present.
	held []string
	// hard: one of them asked for mode hard (it wins over soft, as in BMO, so a remediation that needs
	// the host off now is not slowed by another owner's soft request).
	hard bool
	// invalid are the annotations whose value is not Metal3's JSON; they count as soft requests.
	invalid []string
}

// inspectDisabledValue is inspect.metal3.io's value that disables inspection. Metal3 deprecates the
// annotation in favour of spec.inspectionMode but still honours it (BareMetalHost.InspectionDisabled), as
// Yonder does: hosts registered for BMO carry it.
const inspectDisabledValue = "disabled"

func (q rebootRequest) any() bool { return q.once || len(q.held) > 0 }

func (q rebootRequest) names() string {
	var n []string
	if q.once {
		n = append(n, metal3v1.RebootAnnotationPrefix)
	}
	return strings.Join(append(n, q.held...), ", ")
}

// readRebootRequest collects the honoured reboot annotations. Hosts that are not provisioned honour only
// those with "force": true (BMO: a plain reboot of a host that runs nothing is meaningless, a forced one
// is how an owner keeps an available host off).
func readRebootRequest(h *metal3v1.BareMetalHost, provisioned bool) rebootRequest {
	var q rebootRequest
	for k, v := range h.Annotations {
		if k != metal3v1.RebootAnnotationPrefix && !strings.HasPrefix(k, metal3v1.RebootAnnotationPrefix+"/") {
			continue
		}
		args := metal3v1.RebootAnnotationArguments{Mode: metal3v1.RebootModeSoft}
		if v != "" {
			if err := json.Unmarshal([]byte(v), &args); err != nil {
				q.invalid = append(q.invalid, k)
				args = metal3v1.RebootAnnotationArguments{Mode: metal3v1.RebootModeSoft}
			}
		}
		if !provisioned && !args.Force {
			continue
		}
		if args.Mode == metal3v1.RebootModeHard {
			q.hard = true
		}
		if k == metal3v1.RebootAnnotationPrefix {
			q.once = true
		} else {
			q.held = append(q.held, k)
		}
	}
	slices.Sort(q.held)
	slices.Sort(q.invalid)
	return q
}

// reconcilePower settles the power of an available or provisioned host: spec.online, unless reboot
// annotations ask for it off. The steps are decided from the BMC's power state and the annotations on
// every pass, so a restarted controller carries on where the last one stopped: the one-shot annotation is
// removed (and that removal written) only once the host was seen off, before it is powered on again.
func (r *Reconciler) reconcilePower(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	q := readRebootRequest(h, s.state.State == metal3v1.StateProvisioned)
	for _, k := range q.invalid {
		r.recorder().Eventf(h, corev1.EventTypeWarning, InvalidAnnotationEvent,
			"Annotation %s is not JSON like {\"mode\":\"hard\"}: treated as a soft reboot request", k)
	}
	if !q.any() {
		delete(h.Annotations, RebootPowerOffAnnotation)
		meta.RemoveStatusCondition(&h.Status.Conditions, BareMetalHostRebootRequestedCondition)
		return r.ensurePower(ctx, s, h.Spec.Online)
	}
	sys, err := s.bmc.System(ctx)
	if err != nil {
		s.setError(metal3v1.PowerManagementError, err.Error(), false)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	h.Status.PoweredOn = sys.PoweredOn
	if h.Spec.DisablePowerOff {
		return r.rebootWithoutPowerOff(ctx, s, q, sys.PoweredOn)
	}
	if sys.PoweredOn {
		return r.powerOffForReboot(ctx, s, q)
	}
	delete(h.Annotations, RebootPowerOffAnnotation)
	if q.once {
		delete(h.Annotations, metal3v1.RebootAnnotationPrefix)
		// Written before the host is powered on: a pass that found the annotation again with the host
		// back on would reboot it a second time.
		if err := r.persist(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
		r.recorder().Event(h, corev1.EventTypeNormal, RebootedEvent, "Host was powered off for "+metal3v1.RebootAnnotationPrefix+"; annotation removed")
		ctrl.LoggerFrom(ctx).Info("Removing reboot annotation, host was off", "annotation", metal3v1.RebootAnnotationPrefix)
	}
	if len(q.held) == 0 {
		meta.RemoveStatusCondition(&h.Status.Conditions, BareMetalHostRebootRequestedCondition)
		return r.ensurePower(ctx, s, h.Spec.Online)
	}
	setCondition(h, BareMetalHostRebootRequestedCondition, true, BareMetalHostPoweredOffByAnnotationReason,
		fmt.Sprintf("the host is kept off by %s: it is powered on again (if spec.online) when the last is removed", strings.Join(q.held, ", ")))
	if h.Status.ErrorType == metal3v1.PowerManagementError {
		s.clearError()
	}
	return ctrl.Result{RequeueAfter: r.PowerPollInterval}, nil
}

// powerOffForReboot powers a running host off: ForceOff for hard requests; for soft ones GracefulShutdown,
// then ForceOff once SoftPowerOffTimeout has passed since it was sent. Each action is recorded on the host
// (RebootPowerOffAnnotation, an optimistic-locked write) before it is sent.
func (r *Reconciler) powerOffForReboot(ctx context.Context, s *scope, q rebootRequest) (ctrl.Result, error) {
	h := s.host
	poll := min(r.PowerPollInterval, 5*time.Second)
	var last PowerOffRecord
	sent := json.Unmarshal([]byte(h.Annotations[RebootPowerOffAnnotation]), &last) == nil && !last.At.IsZero()
	action := redfish.PowerOff
	switch {
	case !sent && !q.hard:
		action = redfish.PowerSoftOff
	case !sent:
	case last.Action == string(redfish.PowerSoftOff) && time.Since(last.At.Time) < r.SoftPowerOffTimeout:
		setCondition(h, BareMetalHostRebootRequestedCondition, true, BareMetalHostPoweringOffReason,
			fmt.Sprintf("waiting for the OS to shut down (asked at %s, forced off after %s) for %s", last.At.UTC().Format(time.RFC3339), r.SoftPowerOffTimeout, q.names()))
		return ctrl.Result{RequeueAfter: min(poll, time.Until(last.At.Add(r.SoftPowerOffTimeout))+time.Second)}, nil
	case last.Action == string(redfish.PowerSoftOff):
		r.recorder().Eventf(h, corev1.EventTypeWarning, SoftPowerOffTimedOutEvent,
			"The OS did not shut down within %s of the soft power-off: forcing the host off", r.SoftPowerOffTimeout)
	case time.Since(last.At.Time) < r.RetryInterval:
		return ctrl.Result{RequeueAfter: poll}, nil // the BMC is still carrying out the ForceOff
	}
	raw, _ := json.Marshal(PowerOffRecord{Action: string(action), At: *now()})
	h.Annotations[RebootPowerOffAnnotation] = string(raw)
	setCondition(h, BareMetalHostRebootRequestedCondition, true, BareMetalHostPoweringOffReason,
		fmt.Sprintf("powering off (%s) for %s", action, q.names()))
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Powering off for reboot annotations", "action", string(action), "annotations", q.names())
	if err := s.bmc.Power(ctx, action); err != nil {
		s.setError(metal3v1.PowerManagementError, fmt.Sprintf("failed to power the host off (%s) for %s: %v", action, q.names(), err), true)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	r.recorder().Eventf(h, corev1.EventTypeNormal, RebootPowerOffEvent, "Powering off (%s) for %s", action, q.names())
	return ctrl.Result{RequeueAfter: poll}, nil
}

// rebootWithoutPowerOff serves hosts with spec.disablePowerOff, which must never be off: BMO reboots them
// in one action instead, and cannot hold them off for keyed annotations.
func (r *Reconciler) rebootWithoutPowerOff(ctx context.Context, s *scope, q rebootRequest, on bool) (ctrl.Result, error) {
	h := s.host
	var last PowerOffRecord
	restarted := json.Unmarshal([]byte(h.Annotations[RebootPowerOffAnnotation]), &last) == nil && last.Action == string(redfish.PowerCycle)
	if q.once && on && !restarted {
		// Recorded first, as a power-off is: a pass that read an outdated host fails on this write
		// instead of rebooting the host a second time.
		raw, _ := json.Marshal(PowerOffRecord{Action: string(redfish.PowerCycle), At: *now()})
		h.Annotations[RebootPowerOffAnnotation] = string(raw)
		if err := r.persist(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Rebooting host that may not be powered off", "annotation", metal3v1.RebootAnnotationPrefix)
		if err := s.bmc.Power(ctx, redfish.PowerCycle); err != nil {
			delete(h.Annotations, RebootPowerOffAnnotation)
			s.setError(metal3v1.PowerManagementError, fmt.Sprintf("failed to reboot the host: %v", err), true)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		}
		r.recorder().Event(h, corev1.EventTypeNormal, RebootedEvent, "Host rebooted (spec.disablePowerOff) for "+metal3v1.RebootAnnotationPrefix+"; annotation removed")
	}
	if q.once {
		delete(h.Annotations, metal3v1.RebootAnnotationPrefix)
	}
	delete(h.Annotations, RebootPowerOffAnnotation)
	if len(q.held) > 0 {
		setCondition(h, BareMetalHostRebootRequestedCondition, false, BareMetalHostPowerOffDisabledReason,
			fmt.Sprintf("%s ask for the host off, but spec.disablePowerOff is true: remove them, or set spec.disablePowerOff false", strings.Join(q.held, ", ")))
	} else {
		meta.RemoveStatusCondition(&h.Status.Conditions, BareMetalHostRebootRequestedCondition)
	}
	return r.ensurePower(ctx, s, true)
}

// applyAnnotations applies the annotations that act before the state's work: inspect.metal3.io and
// inspect.metal3.io/hardwaredetails, and the removal of those whose purpose is served. done is true when the
// pass ends here (a state change to write).
func (r *Reconciler) applyAnnotations(ctx context.Context, s *scope) (done bool) {
	h := s.host
	// Status is present: the copy would only grow stale (BMO removes it the same way).
	delete(h.Annotations, metal3v1.StatusAnnotation)
	if s.state.State == metal3v1.StateProvisioning || s.state.State == metal3v1.StateDeprovisioning {
		// Provisioning and deprovisioning boot or power off the host: that serves a one-shot reboot
		// request (BMO clears it the same way); keyed ones stay and hold the host off afterwards.
		delete(h.Annotations, metal3v1.RebootAnnotationPrefix)
	}
	r.applyHardwareDetails(ctx, s)
	v, ok := h.Annotations[metal3v1.InspectAnnotationPrefix]
	if !ok || v == inspectDisabledValue {
		return false
	}
	switch s.state.State {
	case metal3v1.StateAvailable, metal3v1.StateReady:
		delete(h.Annotations, metal3v1.InspectAnnotationPrefix)
		if h.InspectionDisabled() {
			return false // spec.inspectionMode disabled wins; the request is consumed, as BMO does
		}
		ctrl.LoggerFrom(ctx).Info("Inspecting again", "annotation", metal3v1.InspectAnnotationPrefix)
		r.recorder().Event(h, corev1.EventTypeNormal, InspectionRequestedEvent, "Annotation "+metal3v1.InspectAnnotationPrefix+" asked for a new inspection")
		s.transition(metal3v1.StateInspecting)
		return true
	case metal3v1.StateRegistering, metal3v1.StateInspecting:
		// The inspection this host is about to run answers the request.
		delete(h.Annotations, metal3v1.InspectAnnotationPrefix)
	}
	// Other states (provisioning, provisioned…) keep it: the host is inspected once it is available again.
	return false
}

// applyHardwareDetails sets status.hardware from inspect.metal3.io/hardwaredetails when status.hardware is
// empty or inspection is disabled (Metal3's rule), and removes the annotation. A value that is not
// HardwareDetails JSON stays, with condition Inspected False saying what is wrong.
func (r *Reconciler) applyHardwareDetails(ctx context.Context, s *scope) {
	h := s.host
	raw, ok := h.Annotations[metal3v1.HardwareDetailsAnnotation]
	if !ok {
		return
	}
	if h.Status.HardwareDetails != nil && !h.InspectionDisabled() {
		delete(h.Annotations, metal3v1.HardwareDetailsAnnotation)
		r.recorder().Event(h, corev1.EventTypeNormal, HardwareDetailsIgnoredEvent,
			"Annotation "+metal3v1.HardwareDetailsAnnotation+" removed unused: status.hardware is set and inspection is enabled")
		return
	}
	if strings.TrimSpace(raw) == "" {
		delete(h.Annotations, metal3v1.HardwareDetailsAnnotation)
		return
	}
	hd := &metal3v1.HardwareDetails{}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(hd); err != nil {
		msg := fmt.Sprintf("annotation %s is not Metal3 HardwareDetails JSON (%v): fix or remove it", metal3v1.HardwareDetailsAnnotation, err)
		setCondition(h, BareMetalHostInspectedCondition, false, BareMetalHostInvalidHardwareDetailsReason, msg)
		ctrl.LoggerFrom(ctx).Info("Ignoring hardware details annotation", "error", err.Error())
		return
	}
	h.Status.HardwareDetails = hd
	delete(h.Annotations, metal3v1.HardwareDetailsAnnotation)
	setCondition(h, BareMetalHostInspectedCondition, true, BareMetalHostHardwareDetailsAnnotationReason,
		fmt.Sprintf("status.hardware set from annotation %s: %d CPUs, %d MiB, %d NICs, %d disks", metal3v1.HardwareDetailsAnnotation,
			hd.CPU.Count, hd.RAMMebibytes, len(hd.NIC), len(hd.Storage)))
	r.recorder().Event(h, corev1.EventTypeNormal, HardwareDetailsEvent, "Set status.hardware from annotation "+metal3v1.HardwareDetailsAnnotation)
}

// restoreStatusAnnotation rebuilds an empty status from baremetalhost.metal3.io/status (clusterctl move of
// hosts BMO managed, or a status saved by hand), as BMO does on a host without status. The provisioning
// state in it becomes the host's durable state when it has none of Yonder's: the host carries on in that
// state (a provisioned host is not provisioned again). The state annotation is written before the status
// update, so a failed update leaves the next pass to do the same again.
func (r *Reconciler) restoreStatusAnnotation(ctx context.Context, h *metal3v1.BareMetalHost, st *HostState) error {
	raw := h.Annotations[metal3v1.StatusAnnotation]
	if raw == "" {
		return nil
	}
	saved := &metal3v1.BareMetalHostStatus{}
	if err := json.Unmarshal([]byte(raw), saved); err != nil {
		r.recorder().Eventf(h, corev1.EventTypeWarning, InvalidAnnotationEvent,
			"Annotation %s is not BareMetalHost status JSON (%v): the host starts with a new status", metal3v1.StatusAnnotation, err)
		return nil
	}
	if st.State == "" && saved.Provisioning.State != "" {
		st.State = saved.Provisioning.State
		st.PhaseStartedAt = now()
		if st.State == metal3v1.StateProvisioned {
			img := saved.Provisioning.Image
			st.Image = &img
			if cd := saved.Provisioning.CustomDeploy; cd != nil {
				// A diskless host: provisioned with its custom deploy, no image.
				st.CustomDeploy = cd.DeepCopy()
				if img.URL == "" {
					st.Image = nil
				}
			}
		}
		status := *saved
		orig := h.DeepCopy()
		writeState(h, *st)
		if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("failed to record the state restored from annotation %s on %s: %w", metal3v1.StatusAnnotation, klog.KObj(h), err)
		}
		saved = &status
	}
	h.Status = *saved
	if h.Status.LastUpdated.IsZero() {
		h.Status.LastUpdated = now()
	}
	ctrl.LoggerFrom(ctx).Info("Restoring status from annotation", "annotation", metal3v1.StatusAnnotation, "state", st.State)
	r.recorder().Eventf(h, corev1.EventTypeNormal, StatusRestoredEvent, "Status restored from annotation %s (provisioning state %q)", metal3v1.StatusAnnotation, st.State)
	return nil
}

// reconcileDetached leaves hosts with baremetalhost.metal3.io/detached alone, as BMO does: a settled host
// (available, ready, provisioned, or not registered yet; any state with {"force":true}) gets
// operationalStatus detached and no further BMC traffic; one in the middle of an operation finishes it first. A detached host being deleted
// loses the finalizer without power-off or deprovisioning, unless {"deleteAction":"delay"} asks to wait for
// the annotation's removal. When the annotation goes, the status returns to OK (or error). done is true
// when the pass ends here.
func (r *Reconciler) reconcileDetached(ctx context.Context, h *metal3v1.BareMetalHost) (done bool, err error) {
	raw, detached := h.Annotations[metal3v1.DetachedAnnotation]
	if !detached {
		if h.Status.OperationalStatus != metal3v1.OperationalStatusDetached {
			return false, nil
		}
		base := h.DeepCopy()
		h.Status.OperationalStatus = metal3v1.OperationalStatusOK
		if h.Status.ErrorType != "" {
			h.Status.OperationalStatus = metal3v1.OperationalStatusError
		}
		ctrl.LoggerFrom(ctx).Info("Managing host again, detached annotation removed")
		return true, r.patchStatus(ctx, base, h)
	}
	args := metal3v1.DetachedAnnotationArguments{}
	if raw != "" {
		if jerr := json.Unmarshal([]byte(raw), &args); jerr != nil {
			// Metal3 documents any value as valid: an unparsable one detaches without options.
			ctrl.LoggerFrom(ctx).V(4).Info("Ignoring detached annotation value", "error", jerr.Error())
		}
	}
	if !h.DeletionTimestamp.IsZero() {
		if args.DeleteAction == metal3v1.DetachedDeleteActionDelay {
			ctrl.LoggerFrom(ctx).Info("Delaying deletion of detached host until the annotation is removed")
			return true, nil
		}
		if !controllerutil.ContainsFinalizer(h, Finalizer) {
			return true, nil
		}
		ctrl.LoggerFrom(ctx).Info("Deleting detached host without powering it off or deprovisioning it")
		r.forgetBoot(h)
		orig := h.DeepCopy()
		controllerutil.RemoveFinalizer(h, Finalizer)
		if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return true, fmt.Errorf("failed to remove finalizer from detached %s: %w", klog.KObj(h), err)
		}
		return true, nil
	}
	switch h.Status.OperationalStatus {
	case metal3v1.OperationalStatusDetached:
		return true, nil
	case "":
		// No status yet (a new or moved host): it is written whole first (Metal3's status schema has
		// required fields a patch of one would lack); the next pass detaches the host.
		return false, nil
	}
	st, err := readState(h)
	if err != nil {
		return true, err
	}
	switch st.State {
	case metal3v1.StateAvailable, metal3v1.StateReady, metal3v1.StateProvisioned, metal3v1.StateExternallyProvisioned:
	case metal3v1.StateNone:
		// Never registered: a host brought into the cluster detached (moved by hand, with or without
		// BMO's status annotation, which the first pass restored) is not registered until it is attached.
	default:
		if !args.Force {
			ctrl.LoggerFrom(ctx).V(4).Info("Host cannot be detached yet, finishing its current operation", "state", st.State)
			return false, nil
		}
	}
	base := h.DeepCopy()
	h.Status.OperationalStatus = metal3v1.OperationalStatusDetached
	r.forgetBoot(h)
	if err := r.patchStatus(ctx, base, h); err != nil {
		return true, err
	}
	r.recorder().Eventf(h, corev1.EventTypeNormal, DetachedEvent, "Host detached in state %s: the controller no longer manages it", st.State)
	return true, nil
}

func (r *Reconciler) patchStatus(ctx context.Context, base, h *metal3v1.BareMetalHost) error {
	if err := r.Client.Status().Patch(ctx, h, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to patch status of %s: %w", klog.KObj(h), err)
	}
	return nil
}
