// Package metalremediation reconciles YonderMetalRemediations: CAPI's external remediation of an unhealthy
// bare-metal Machine, reboot first, the way CAPM3's Metal3Remediation does it. A MachineHealthCheck whose
// spec.remediation.templateRef names a YonderMetalRemediationTemplate creates one YonderMetalRemediation per
// unhealthy Machine (same name, owned by the Machine) and deletes it once the Node is healthy again.
// Meanwhile this controller power-cycles the Machine's claimed BareMetalHost through Metal3's keyed reboot
// annotation (reboot.metal3.io/yonder-remediation-<uid>-<attempt>: {"mode":"hard"}), which keeps the host
// off until the annotation is removed: once the host is seen off the annotation is removed and the host
// controller powers it on. After each power cycle the Node has spec.strategy.timeout to become healthy;
// after retryLimit power cycles the Machine's OwnerRemediated condition is set False, which is what CAPI's
// MachineSet reads to delete and replace it (the contract as CAPI v1.14 implements it: the
// MachineHealthCheck sets OwnerRemediated only when it has no templateRef).
//
// Progress lives in status and every step is written before the one that depends on it: the attempt is
// recorded before its annotation is put on the host, the observed power-off before the annotation is
// taken off. A controller restarted at any line therefore finishes the recorded attempt instead of
// starting it again, and the remediation is read uncached so a pass never acts on a status older than
// the last write.
package metalremediation

import (
	"context"
	"fmt"
	"strings"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	v1beta1conditions "sigs.k8s.io/cluster-api/util/conditions/deprecated/v1beta1"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalremediations;yondermetalremediations/status;yondermetalremediations/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalremediationtemplates;yondermetalmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;machines/status,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Event reasons.
const (
	// RebootRequestedEvent: an attempt's reboot annotation was put on the host.
	RebootRequestedEvent = "RebootRequested"
	// HostPowerCycledEvent: the host was seen off and its annotation removed, so it powers on again.
	HostPowerCycledEvent = "HostPowerCycled"
	// RemediationFailedEvent: power cycles did not help, or there is nothing to power-cycle; the Machine is
	// handed over for replacement (or, without an owner to replace it, left to the operator).
	RemediationFailedEvent = "RemediationFailed"
)

// rebootKeyPrefix starts the reboot annotations of this controller; the remediation's UID and the attempt
// follow, so every attempt has its own key (a left-over key of an earlier attempt or of another
// remediation can never be mistaken for the current one).
const rebootKeyPrefix = metal3v1.RebootAnnotationPrefix + "/yonder-remediation-"

// rebootValue asks for a hard power-off: a Node that is already unhealthy gets no graceful shutdown.
const rebootValue = `{"mode":"hard"}`

// defaultTimeout is spec.strategy.timeout's default (for objects written without the CRD's defaults).
const defaultTimeout = 10 * time.Minute

// defaultHealthCheckRecordWait is HealthCheckRecordWait's default.
const defaultHealthCheckRecordWait = 10 * time.Second

// Reconciler reconciles YonderMetalRemediations.
type Reconciler struct {
	Client client.Client
	// APIReader reads remediations uncached (see the package comment).
	APIReader client.Reader
	Recorder  record.EventRecorder
	// WatchFilterValue limits the controller to objects labelled with it (CAPI's watch filter).
	WatchFilterValue string
	// Name is the manager's name (event source).
	Name string
	// HealthCheckRecordWait bounds how long a new remediation waits for the MachineHealthCheck's own
	// record on the Machine before it writes to the Machine (see waitForHealthCheckRecord); 0: 10 s.
	HealthCheckRecordWait time.Duration
}

// SetupWithManager registers the reconciler with mgr: remediations, and the hosts they power-cycle.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor(r.Name) //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), r.WatchFilterValue)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.YonderMetalRemediation{}, builder.WithPredicates(filter)).
		Named("yondermetalremediation").
		WithOptions(opts).
		Watches(&metal3v1.BareMetalHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToRemediations)).
		Complete(r)
}

// hostToRemediations wakes the remediations that power-cycle a host (its power state is what they wait for).
func (r *Reconciler) hostToRemediations(ctx context.Context, o client.Object) []reconcile.Request {
	list := &infrav1.YonderMetalRemediationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list YonderMetalRemediations", "namespace", o.GetNamespace())
		return nil
	}
	var reqs []reconcile.Request
	for _, rem := range list.Items {
		if rem.Status.HostRef == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rem)})
		}
	}
	return reqs
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	rem := &infrav1.YonderMetalRemediation{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, rem); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, rem.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to get the owner Machine of %s: %w", klog.KObj(rem), err)
	}
	log := ctrl.LoggerFrom(ctx)
	if machine != nil {
		log = log.WithValues("Machine", klog.KObj(machine), "Cluster", klog.KRef(machine.Namespace, machine.Spec.ClusterName))
		ctx = ctrl.LoggerInto(ctx, log)
	}
	if !rem.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, rem, machine)
	}
	if added, err := finalizers.EnsureFinalizer(ctx, r.Client, rem, infrav1.RemediationFinalizer); err != nil || added {
		return ctrl.Result{}, err
	}
	h, err := patch.NewHelper(rem, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		// clusterctl move does not carry status, where an attempt in flight is recorded: a move waits until
		// the attempt is over (as it waits for a YonderMetalMachine whose host hand-off is in flight).
		if p := rem.Status.Phase; p == infrav1.RemediationRunning || p == infrav1.RemediationWaiting {
			if rem.Annotations == nil {
				rem.Annotations = map[string]string{}
			}
			rem.Annotations[clusterctlv1.BlockMoveAnnotation] = "true"
		} else {
			delete(rem.Annotations, clusterctlv1.BlockMoveAnnotation)
		}
		if err := h.Patch(ctx, rem, patch.WithOwnedConditions{Conditions: []string{clusterv1.PausedCondition,
			infrav1.YonderMetalRemediationHostPowerCycledCondition, infrav1.YonderMetalRemediationMachineReplacementRequestedCondition}}); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, fmt.Errorf("failed to patch %s: %w", klog.KObj(rem), err)})
		}
	}()
	if machine == nil {
		// The MachineHealthCheck creates the remediation with its owner reference; one created by hand
		// without it has nothing to remediate.
		log.Info("Waiting for the owner Machine")
		return ctrl.Result{}, nil
	}
	cluster, err := util.GetClusterByName(ctx, r.Client, machine.Namespace, machine.Spec.ClusterName)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get the Cluster of %s: %w", klog.KObj(machine), err)
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, rem); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if !machine.DeletionTimestamp.IsZero() {
		// Being deleted already (replaced, scaled down, deleted by hand): the host is the Machine's to
		// deprovision and must not stay held off by an attempt in flight. This object goes with the Machine.
		return ctrl.Result{}, r.releaseHost(ctx, rem)
	}
	return r.reconcileNormal(ctx, &scope{rem: rem, machine: machine})
}

// scope is one pass over one remediation.
type scope struct {
	rem     *infrav1.YonderMetalRemediation
	machine *clusterv1.Machine
	host    *metal3v1.BareMetalHost
}

func (s *scope) retryLimit() int32 { return max(s.rem.Spec.Strategy.RetryLimit, 1) }

func (s *scope) timeout() time.Duration {
	if t := s.rem.Spec.Strategy.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return defaultTimeout
}

// rebootKey is the reboot annotation of the current attempt.
func (s *scope) rebootKey() string {
	return fmt.Sprintf("%s%s-%d", rebootKeyPrefix, s.rem.UID, s.rem.Status.RetryCount)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	switch s.rem.Status.Phase {
	case infrav1.RemediationDeleting:
		c := conditions.Get(s.rem, infrav1.YonderMetalRemediationMachineReplacementRequestedCondition)
		reason, msg := infrav1.YonderMetalRemediationRetriesExhaustedReason, ""
		if c != nil {
			// The condition's message is msg with the replacement's suffix: taken off again, so that every
			// pass of this phase writes the same message instead of growing it by one suffix per pass (past
			// the API server's 32 KiB limit, after which no patch of the Machine or this object succeeded).
			reason, msg = c.Reason, strings.TrimSuffix(c.Message, replacementSuffix(s.machine.Name))
		}
		return ctrl.Result{}, r.requestReplacement(ctx, s, reason, msg)
	case infrav1.RemediationFailed:
		return ctrl.Result{}, nil
	case "":
		if wait := r.waitForHealthCheckRecord(s); wait > 0 {
			ctrl.LoggerFrom(ctx).V(1).Info("Waiting for the MachineHealthCheck to record the Machine as unhealthy before touching it")
			return ctrl.Result{RequeueAfter: min(wait, time.Second)}, nil
		}
	}
	host, reason, msg, err := r.findHost(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host == nil {
		return ctrl.Result{}, r.giveUp(ctx, s, reason, msg)
	}
	s.host = host
	s.rem.Status.HostRef = host.Name
	switch s.rem.Status.Phase {
	case infrav1.RemediationRunning:
		return r.reconcileRunning(ctx, s)
	case infrav1.RemediationWaiting:
		return r.reconcileWaiting(ctx, s)
	default:
		return r.startAttempt(ctx, s)
	}
}

// waitForHealthCheckRecord says how much longer a remediation that has not started must wait before it
// writes to its Machine (0: none). The MachineHealthCheck creates the remediation and only then patches the
// Machine: HealthCheckSucceeded=False (what the MachineSet needs, with OwnerRemediated=False, to replace
// it) and ExternallyRemediated. A first pass that writes ExternallyRemediated in between makes that patch
// fail on a condition conflict, and CAPI v1.14's MachineHealthCheck never writes it again once the
// remediation exists: HealthCheckSucceeded=False is lost and a Machine whose power cycles all failed is
// never replaced (seen in CI: a remediation marked the Machine OwnerRemediated=False and its MachineSet
// left it for good). So the first write waits until the MachineHealthCheck's record is in the cache.
// A remediation made by hand, with no MachineHealthCheck to record anything, goes on after the bound.
func (r *Reconciler) waitForHealthCheckRecord(s *scope) time.Duration {
	if conditions.IsFalse(s.machine, clusterv1.MachineHealthCheckSucceededCondition) {
		return 0
	}
	bound := r.HealthCheckRecordWait
	if bound <= 0 {
		bound = defaultHealthCheckRecordWait
	}
	return max(bound-time.Since(s.rem.CreationTimestamp.Time), 0)
}

// startAttempt records the next power cycle. Only the next pass puts the annotation on the host, after
// this record is written: a pass that dies in between leaves an attempt whose annotation is still to be set.
func (r *Reconciler) startAttempt(ctx context.Context, s *scope) (ctrl.Result, error) {
	now := metav1.Now()
	s.rem.Status.RetryCount++
	s.rem.Status.Phase = infrav1.RemediationRunning
	s.rem.Status.RebootRequestedAt = &now
	msg := fmt.Sprintf("power cycle %d of %d of BareMetalHost %s: powering off", s.rem.Status.RetryCount, s.retryLimit(), s.host.Name)
	conditions.Set(s.rem, metav1.Condition{Type: infrav1.YonderMetalRemediationHostPowerCycledCondition, Status: metav1.ConditionFalse,
		Reason: infrav1.YonderMetalRemediationPoweringOffReason, Message: msg})
	ctrl.LoggerFrom(ctx).Info("Starting power cycle", "BareMetalHost", klog.KObj(s.host), "attempt", s.rem.Status.RetryCount)
	if err := r.setExternallyRemediated(ctx, s.machine, infrav1.YonderMetalRemediationPoweringOffReason, msg); err != nil {
		return ctrl.Result{}, err
	}
	// The status patch wakes the next pass through the watch; the requeue covers a lost event.
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// reconcileRunning puts the attempt's annotation on the host and waits for the host to be off; that is
// recorded (phase Waiting) before the annotation comes off in the next pass.
func (r *Reconciler) reconcileRunning(ctx context.Context, s *scope) (ctrl.Result, error) {
	key := s.rebootKey()
	if _, ok := s.host.Annotations[key]; !ok {
		if err := r.patchHost(ctx, s.host, func(h *metal3v1.BareMetalHost) {
			if h.Annotations == nil {
				h.Annotations = map[string]string{}
			}
			h.Annotations[key] = rebootValue
		}); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Requesting reboot", "BareMetalHost", klog.KObj(s.host), "annotation", key)
		r.Recorder.Eventf(s.rem, corev1.EventTypeNormal, RebootRequestedEvent, "Power cycle %d of %d requested on BareMetalHost %s (annotation %s)",
			s.rem.Status.RetryCount, s.retryLimit(), s.host.Name, key)
		return ctrl.Result{}, nil // the host's power-off arrives through the watch
	}
	now := metav1.Now()
	if !s.host.Status.PoweredOn {
		s.rem.Status.Phase = infrav1.RemediationWaiting
		s.rem.Status.LastRemediated = &now
		msg := fmt.Sprintf("BareMetalHost %s was powered off and is powering on (power cycle %d of %d); waiting up to %s for the Node to be healthy",
			s.host.Name, s.rem.Status.RetryCount, s.retryLimit(), s.timeout())
		conditions.Set(s.rem, metav1.Condition{Type: infrav1.YonderMetalRemediationHostPowerCycledCondition, Status: metav1.ConditionTrue,
			Reason: infrav1.YonderMetalRemediationPowerCycledReason, Message: msg})
		r.Recorder.Eventf(s.rem, corev1.EventTypeNormal, HostPowerCycledEvent, "BareMetalHost %s was powered off; releasing it to power on (power cycle %d of %d)",
			s.host.Name, s.rem.Status.RetryCount, s.retryLimit())
		return ctrl.Result{RequeueAfter: time.Second}, r.setExternallyRemediated(ctx, s.machine, infrav1.YonderMetalRemediationWaitingForNodeReason, msg)
	}
	requested := s.rem.Status.RebootRequestedAt
	if requested == nil {
		requested = &now
		s.rem.Status.RebootRequestedAt = requested
	}
	if left := time.Until(requested.Add(s.timeout())); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	// The host controller did not power the host off in time (BMC unreachable, host paused, detached…):
	// the attempt counts as done, with the timeout already spent, so the next pass removes the annotation
	// and goes on to the next attempt or the replacement.
	s.rem.Status.Phase = infrav1.RemediationWaiting
	s.rem.Status.LastRemediated = requested
	conditions.Set(s.rem, metav1.Condition{Type: infrav1.YonderMetalRemediationHostPowerCycledCondition, Status: metav1.ConditionFalse,
		Reason:  infrav1.YonderMetalRemediationPowerOffTimedOutReason,
		Message: fmt.Sprintf("BareMetalHost %s was not powered off within %s of the request (see the host's status and events)", s.host.Name, s.timeout())})
	r.Recorder.Eventf(s.rem, corev1.EventTypeWarning, RemediationFailedEvent, "BareMetalHost %s was not powered off within %s (power cycle %d of %d)",
		s.host.Name, s.timeout(), s.rem.Status.RetryCount, s.retryLimit())
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// reconcileWaiting takes the attempt's annotation off the host (it powers on) and waits for the
// MachineHealthCheck to find the Node healthy, which deletes this remediation; when the timeout passes
// first, the next attempt starts or the Machine is replaced.
func (r *Reconciler) reconcileWaiting(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.removeRebootAnnotations(ctx, s.rem, s.host); err != nil {
		return ctrl.Result{}, err
	}
	since := s.rem.Status.LastRemediated
	if since == nil {
		now := metav1.Now()
		since = &now
		s.rem.Status.LastRemediated = since
	}
	if left := time.Until(since.Add(s.timeout())); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	if s.rem.Status.RetryCount < s.retryLimit() {
		return r.startAttempt(ctx, s)
	}
	return ctrl.Result{}, r.giveUp(ctx, s, infrav1.YonderMetalRemediationRetriesExhaustedReason,
		fmt.Sprintf("the Node was not healthy within %s of any of %d power cycles of BareMetalHost %s", s.timeout(), s.rem.Status.RetryCount, s.host.Name))
}

// findHost returns the Machine's claimed, provisioned host, or nil with the reason and message why there
// is none to power-cycle (among them a diskless Machine, whose Node no power cycle brings back).
func (r *Reconciler) findHost(ctx context.Context, s *scope) (_ *metal3v1.BareMetalHost, reason, msg string, _ error) {
	ref := s.machine.Spec.InfrastructureRef
	if ref.APIGroup != infrav1.GroupVersion.Group || ref.Kind != "YonderMetalMachine" {
		return nil, infrav1.YonderMetalRemediationUnsupportedMachineReason,
			fmt.Sprintf("Machine %s's infrastructure is a %s, not a YonderMetalMachine: use its provider's remediation", s.machine.Name, ref.Kind), nil
	}
	ymm := &infrav1.YonderMetalMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.machine.Namespace, Name: ref.Name}, ymm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, infrav1.YonderMetalRemediationNoHostReason, fmt.Sprintf("YonderMetalMachine %s does not exist: nothing to power-cycle", ref.Name), nil
		}
		return nil, "", "", fmt.Errorf("failed to get YonderMetalMachine %s: %w", klog.KRef(s.machine.Namespace, ref.Name), err)
	}
	if cd := ymm.Spec.CustomDeploy; cd != nil && cd.Method == infrav1.DisklessDeployMethod {
		// A reboot would not bring this Node back, only lose it for good: the host boots no ramdisk
		// again (the boot server serves a provisioned host no boot script) and the bootstrap token
		// was single-use. Replacing the Machine provisions the host afresh.
		return nil, infrav1.YonderMetalRemediationDisklessHostReason, fmt.Sprintf("YonderMetalMachine %s runs diskless (customDeploy %s): "+
			"its Node lived in the host's memory and a power cycle cannot bring it back, so the Machine is replaced without one", ymm.Name, cd.Method), nil
	}
	name := ymm.Annotations[infrav1.HostAnnotation]
	if name == "" {
		name = ymm.Status.HostRef
	}
	if name == "" {
		return nil, infrav1.YonderMetalRemediationNoHostReason,
			fmt.Sprintf("YonderMetalMachine %s has not claimed a BareMetalHost yet: nothing to power-cycle", ymm.Name), nil
	}
	host := &metal3v1.BareMetalHost{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ymm.Namespace, Name: name}, host); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, infrav1.YonderMetalRemediationNoHostReason, fmt.Sprintf("BareMetalHost %s of YonderMetalMachine %s does not exist", name, ymm.Name), nil
		}
		return nil, "", "", fmt.Errorf("failed to get BareMetalHost %s: %w", klog.KRef(ymm.Namespace, name), err)
	}
	if c := host.Spec.ConsumerRef; c == nil || c.Kind != "YonderMetalMachine" || c.Name != ymm.Name {
		// Never power-cycle a host another Machine runs on.
		return nil, infrav1.YonderMetalRemediationNoHostReason, fmt.Sprintf("BareMetalHost %s is no longer claimed by YonderMetalMachine %s", name, ymm.Name), nil
	}
	if st := host.Status.Provisioning.State; st != metal3v1.StateProvisioned {
		return nil, infrav1.YonderMetalRemediationNoHostReason,
			fmt.Sprintf("BareMetalHost %s is %q, not provisioned: a power cycle would not bring a Node back", name, st), nil
	}
	if host.Spec.DisablePowerOff {
		return nil, infrav1.YonderMetalRemediationPowerOffDisabledReason,
			fmt.Sprintf("BareMetalHost %s has spec.disablePowerOff: it cannot be held off for a power cycle", name), nil
	}
	return host, "", "", nil
}

// giveUp ends the power cycles: the Machine is handed over for replacement.
func (r *Reconciler) giveUp(ctx context.Context, s *scope, reason, msg string) error {
	r.Recorder.Eventf(s.rem, corev1.EventTypeWarning, RemediationFailedEvent, "%s; requesting replacement of Machine %s", capitalize(msg), s.machine.Name)
	ctrl.LoggerFrom(ctx).Info("Remediation by power cycle failed, requesting replacement", "reason", reason)
	s.rem.Status.Phase = infrav1.RemediationDeleting
	return r.requestReplacement(ctx, s, reason, msg)
}

// requestReplacement sets the Machine's OwnerRemediated condition False (WaitingForRemediation): the
// MachineSet that owns it deletes it and creates a replacement (the same condition KCP reads for control
// plane Machines). A Machine without a controller owner would wait for ever: that is the Failed phase.
// Idempotent: a condition the owner has moved on (e.g. MachineDeleting) is left alone.
func (r *Reconciler) requestReplacement(ctx context.Context, s *scope, reason, msg string) error {
	// The host is the Machine's to deprovision: it must not stay held off by this remediation.
	if err := r.releaseHost(ctx, s.rem); err != nil {
		return err
	}
	if metav1.GetControllerOf(s.machine) == nil {
		s.rem.Status.Phase = infrav1.RemediationFailed
		conditions.Set(s.rem, metav1.Condition{Type: infrav1.YonderMetalRemediationMachineReplacementRequestedCondition, Status: metav1.ConditionFalse,
			Reason:  infrav1.YonderMetalRemediationNoOwnerReason,
			Message: fmt.Sprintf("%s, but Machine %s has no MachineSet or control plane to replace it: delete the Machine yourself", capitalize(msg), s.machine.Name)})
		return nil
	}
	conditions.Set(s.rem, metav1.Condition{Type: infrav1.YonderMetalRemediationMachineReplacementRequestedCondition, Status: metav1.ConditionTrue,
		Reason: reason, Message: capitalize(msg) + replacementSuffix(s.machine.Name)})
	m := s.machine
	h, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return err
	}
	if c := conditions.Get(m, clusterv1.MachineOwnerRemediatedCondition); c == nil || c.Status == metav1.ConditionTrue {
		conditions.Set(m, metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
			Reason: clusterv1.MachineOwnerRemediatedWaitingForRemediationReason, Message: "Waiting for remediation: " + msg})
	}
	if !v1beta1conditions.Has(m, clusterv1.MachineOwnerRemediatedV1Beta1Condition) || v1beta1conditions.IsTrue(m, clusterv1.MachineOwnerRemediatedV1Beta1Condition) {
		v1beta1conditions.MarkFalse(m, clusterv1.MachineOwnerRemediatedV1Beta1Condition, clusterv1.WaitingForRemediationV1Beta1Reason, clusterv1.ConditionSeverityWarning, "%s", msg)
	}
	conditions.Set(m, metav1.Condition{Type: clusterv1.MachineExternallyRemediatedCondition, Status: metav1.ConditionFalse,
		Reason: infrav1.YonderMetalRemediationReplacementRequestedReason, Message: capitalize(msg) + ": replacement requested"})
	// The deprecated v1beta1 condition is written beside the v1beta2 one, as CAPI's own remediation owners do,
	// for clients that still read v1beta1 Machines.
	if err := h.Patch(ctx, m, patch.WithOwnedV1Beta1Conditions{Conditions: []clusterv1.ConditionType{clusterv1.MachineOwnerRemediatedV1Beta1Condition}}, //nolint:staticcheck // see above
		patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineOwnerRemediatedCondition, clusterv1.MachineExternallyRemediatedCondition}}); err != nil {
		return fmt.Errorf("failed to mark Machine %s for replacement: %w", klog.KObj(m), err)
	}
	return nil
}

// replacementSuffix ends the MachineReplacementRequested condition's message.
func replacementSuffix(machine string) string {
	return ": Machine " + machine + " is marked OwnerRemediated=False for its owner to replace"
}

// setExternallyRemediated reports the remediation's progress on the Machine (CAPI leaves the
// ExternallyRemediated condition to the external remediation controller once it has created the request).
func (r *Reconciler) setExternallyRemediated(ctx context.Context, m *clusterv1.Machine, reason, msg string) error {
	h, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return err
	}
	conditions.Set(m, metav1.Condition{Type: clusterv1.MachineExternallyRemediatedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: capitalize(msg)})
	if err := h.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineExternallyRemediatedCondition}}); err != nil {
		return fmt.Errorf("failed to patch Machine %s: %w", klog.KObj(m), err)
	}
	return nil
}

// reconcileDelete takes every reboot annotation of this remediation off its host (a keyed one left behind
// would hold the host off for ever) and, on a Machine that stays, the ExternallyRemediated condition this
// controller reported; then releases the remediation.
func (r *Reconciler) reconcileDelete(ctx context.Context, rem *infrav1.YonderMetalRemediation, machine *clusterv1.Machine) error {
	if !controllerutil.ContainsFinalizer(rem, infrav1.RemediationFinalizer) {
		return nil
	}
	if err := r.releaseHost(ctx, rem); err != nil {
		return err
	}
	if machine != nil && machine.DeletionTimestamp.IsZero() && conditions.Has(machine, clusterv1.MachineExternallyRemediatedCondition) {
		h, err := patch.NewHelper(machine, r.Client)
		if err != nil {
			return err
		}
		conditions.Delete(machine, clusterv1.MachineExternallyRemediatedCondition)
		if err := h.Patch(ctx, machine, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineExternallyRemediatedCondition}}); err != nil {
			return fmt.Errorf("failed to patch Machine %s: %w", klog.KObj(machine), err)
		}
	}
	ctrl.LoggerFrom(ctx).Info("Remediation removed", "retryCount", rem.Status.RetryCount, "phase", rem.Status.Phase)
	orig := rem.DeepCopy()
	controllerutil.RemoveFinalizer(rem, infrav1.RemediationFinalizer)
	if err := r.Client.Patch(ctx, rem, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to remove the finalizer of %s: %w", klog.KObj(rem), err)
	}
	return nil
}

// releaseHost removes every reboot annotation of rem from the host it power-cycles (status.hostRef), if any.
func (r *Reconciler) releaseHost(ctx context.Context, rem *infrav1.YonderMetalRemediation) error {
	if rem.Status.HostRef == "" {
		return nil
	}
	host := &metal3v1.BareMetalHost{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rem.Namespace, Name: rem.Status.HostRef}, host); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("failed to get BareMetalHost %s: %w", klog.KRef(rem.Namespace, rem.Status.HostRef), err)
	}
	return r.removeRebootAnnotations(ctx, rem, host)
}

// removeRebootAnnotations removes every reboot annotation of rem from host.
func (r *Reconciler) removeRebootAnnotations(ctx context.Context, rem *infrav1.YonderMetalRemediation, host *metal3v1.BareMetalHost) error {
	prefix := fmt.Sprintf("%s%s-", rebootKeyPrefix, rem.UID)
	var keys []string
	for k := range host.Annotations {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if err := r.patchHost(ctx, host, func(h *metal3v1.BareMetalHost) {
		for _, k := range keys {
			delete(h.Annotations, k)
		}
	}); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Removing reboot annotation", "BareMetalHost", klog.KObj(host), "annotations", keys)
	return nil
}

// patchHost changes host's metadata with an optimistic lock: a pass that read an outdated host (the cache
// lags its own last write) fails and retries instead of adding back an annotation that was removed.
func (r *Reconciler) patchHost(ctx context.Context, host *metal3v1.BareMetalHost, change func(*metal3v1.BareMetalHost)) error {
	orig := host.DeepCopy()
	change(host)
	if err := r.Client.Patch(ctx, host, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to patch BareMetalHost %s: %w", klog.KObj(host), err)
	}
	return nil
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
