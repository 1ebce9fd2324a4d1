// Package baremetalhost reconciles Metal3 BareMetalHosts without Ironic: registration and inspection
// over Redfish (BMC certificate pinned on first contact), power, and provisioning through a one-time PXE
// boot into Yonder's boot services, where the host attests with its TPM before it receives its bootstrap
// data. Only hosts labelled metal.yonder.dev/managed=true are touched.
//
// yonder-metal-manager wires it with:
//
//	(&baremetalhost.Reconciler{Client: mgr.GetClient(), ...}).SetupWithManager(ctx, mgr, controller.Options{})
//
// and, when it runs the boot services, passes the same inventory.Static to netboot.Start and as
// Reconciler.NetBoot, and a baremetalhost.AttestStore as the attestation store.
package baremetalhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/liveiso"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts;baremetalhosts/status;baremetalhosts/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;patch

// NetBoot is the boot services' host table (an *inventory.Static): the controller adds a host while it
// is being provisioned (or cleaned), so boot options and the iPXE script are served only then. A
// provisioned host with a boot address stays in it lease-only (inventory.Host.LeaseOnly): DHCP keeps
// leasing that address to the OS the host booted, with no boot options, and no script is served to it.
type NetBoot interface {
	Set(h inventory.Host)
	// DeleteHost removes the MAC's entry if it is the named host's.
	DeleteHost(mac net.HardwareAddr, name string)
}

// LiveISOs fetches and verifies the live ISOs hosts boot, and serves them (liveiso.Cache).
type LiveISOs interface {
	// Ensure reports whether img is fetched and verified, starting its download when it is not; it
	// never blocks on the network.
	Ensure(img metal3v1.Image) liveiso.State
	// Keep drops every cached ISO but those of inUse.
	Keep(inUse []metal3v1.Image)
}

// Reconciler reconciles BareMetalHosts labelled metal.yonder.dev/managed=true.
type Reconciler struct {
	Client client.Client
	// Dial opens a Redfish connection (default redfish.Dial).
	Dial redfish.Dialer
	// NetBoot, when set, receives the hosts being provisioned; without it provisioning is refused with a
	// condition (a manager that runs no boot services cannot provision).
	NetBoot NetBoot
	// Boot is what a provisioning host boots: the Yonder agent's kernel and initramfs.
	Boot inventory.BootConfig
	// LiveISOs is the boot server's cache of verified live ISOs (format live-iso), which the hosts running
	// one SAN-boot; without it a live-iso image is refused with a condition.
	LiveISOs LiveISOs
	// ProvisionTimeout bounds the time from the power cycle to the released bootstrap data (default 15m).
	ProvisionTimeout time.Duration
	// ImageWriteTimeout bounds the time from the released instructions to the ramdisk's report that the
	// image is written, or that the disks are cleaned (default 60m: a multi-GiB image over a slow link).
	ImageWriteTimeout time.Duration
	// MaxProvisionAttempts is how many PXE boots one image gets before the host stays in error (default 3).
	MaxProvisionAttempts int
	// RetryInterval is the first delay after a BMC error or a failed boot; it doubles per attempt (default 1m).
	RetryInterval time.Duration
	// PowerPollInterval is how often a settled host's power state is read from its BMC (default 5m).
	PowerPollInterval time.Duration
	// SoftPowerOffTimeout is how long a soft power-off for Metal3's reboot annotations waits for the OS to
	// shut down before the host is forced off (default 3m, as Metal3's baremetal-operator).
	SoftPowerOffTimeout time.Duration
	// Namespaces, when set, limits the controller to hosts in these namespaces (the label is still required).
	Namespaces []string
	// BasicAuth sends credentials with every request instead of opening Redfish sessions.
	BasicAuth bool
	// InsecureAcceptAnyEK says that the boot services accept TPMs without verifying their EK certificate
	// against vendor roots; every host then carries condition EKCertificatesVerified=False.
	InsecureAcceptAnyEK bool
	// EKRoots, when set, is the watch of the EK roots ConfigMap: hosts say in EKCertificatesVerified whether
	// a root is loaded, and are reconciled again when that changes.
	EKRoots *EKRootsWatch
	// UnsignedBootData says that the boot services release bootstrap data without the provider's signature
	// (--insecure-unsigned-boot-data); hosts say so in BootDataSigned.
	UnsignedBootData bool
	// Recorder records Events on hosts (observe.go); SetupWithManager sets the manager's.
	Recorder record.EventRecorder

	// sessions keeps each host's Redfish client between passes (sessions.go).
	sessions bmcSessions
	// writes remembers the host versions the controller's own writes replaced (ownwrites.go).
	writes ownWrites
	// settled remembers the hosts whose power a pass found settled, until their next poll (settled.go).
	settled settledHosts
}

// SetupWithManager registers the reconciler. Called from yonder-metal-manager's main.go (setup package).
func (r *Reconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.Dial == nil {
		r.Dial = redfish.Dial
	}
	if r.ProvisionTimeout == 0 {
		r.ProvisionTimeout = 15 * time.Minute
	}
	if r.ImageWriteTimeout == 0 {
		r.ImageWriteTimeout = time.Hour
	}
	if r.MaxProvisionAttempts == 0 {
		r.MaxProvisionAttempts = 3
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = time.Minute
	}
	if r.PowerPollInterval == 0 {
		r.PowerPollInterval = 5 * time.Minute
	}
	if r.SoftPowerOffTimeout == 0 {
		r.SoftPowerOffTimeout = 3 * time.Minute
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("yonder-metal-manager") //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}
	r.countHosts(mgr.GetClient())
	// The kept Redfish sessions are logged out when the manager stops leading (or stops).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.sessions.closeAll()
		return nil
	})); err != nil {
		return fmt.Errorf("failed to add the Redfish session closer: %w", err)
	}
	// Hosts that are ours, and the update that opts a host out (its kept BMC session is logged out then).
	managed := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return r.manages(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return r.manages(e.ObjectOld) || r.manages(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return r.manages(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return r.manages(e.Object) },
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("baremetalhost").
		For(&metal3v1.BareMetalHost{}, builder.WithPredicates(managed)).
		WithOptions(opts)
	if r.EKRoots != nil {
		b = b.WatchesRawSource(source.Channel(r.EKRoots.Changes(), handler.EnqueueRequestsFromMapFunc(r.allHosts)))
	}
	return b.Complete(r)
}

// allHosts are the managed hosts: each says in EKCertificatesVerified whether EK roots are loaded.
func (r *Reconciler) allHosts(ctx context.Context, _ client.Object) []reconcile.Request {
	var hosts metal3v1.BareMetalHostList
	if err := r.Client.List(ctx, &hosts, client.MatchingLabels{ManagedLabel: "true"}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list BareMetalHosts to report the changed EK roots")
		return nil
	}
	var reqs []reconcile.Request
	for i := range hosts.Items {
		if r.manages(&hosts.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&hosts.Items[i])})
		}
	}
	return reqs
}

// manages is the opt-in: the label, and the namespace when Namespaces is set.
func (r *Reconciler) manages(o client.Object) bool {
	if o.GetLabels()[ManagedLabel] != "true" {
		return false
	}
	return len(r.Namespaces) == 0 || slices.Contains(r.Namespaces, o.GetNamespace())
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, rerr error) {
	h := &metal3v1.BareMetalHost{}
	if err := r.Client.Get(ctx, req.NamespacedName, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.sessions.drop(req.NamespacedName)
			r.writes.start(req.NamespacedName)
			r.settled.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("BareMetalHost", klog.KObj(h))
	ctx = ctrl.LoggerInto(ctx, log)
	if r.writes.outdated(req.NamespacedName, h.ResourceVersion) {
		// The cache is behind this controller's own last write; its watch event brings the newer version.
		log.V(4).Info("Host in the cache predates the last write, waiting for the newer version")
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	r.writes.start(req.NamespacedName)
	if !r.manages(h) {
		// Opted out (or never in): not ours, even if it carries our finalizer from before.
		r.sessions.drop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	// clusterctl move deletes the source copy of each object it recreated in the target cluster, after a
	// patch that replaces all its annotations with its delete-for-move annotation (the state, the pins and
	// any pause go with them). The host is the target manager's now: this one forgets it and lets the
	// deletion through — no power action, no state written. Without this a moved host was powered off.
	if _, ok := h.Annotations[clusterctlv1.DeleteForMoveAnnotation]; ok {
		return ctrl.Result{}, r.releaseMoved(ctx, h)
	}
	// CAPM3 pauses hosts with Metal3's annotation; detached hosts are left alone (annotations.go), and
	// deleted without deprovisioning. Neither needs a BMC session kept open.
	if _, ok := h.Annotations[metal3v1.PausedAnnotation]; ok {
		r.sessions.drop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if done, err := r.reconcileDetached(ctx, h); done || err != nil {
		r.sessions.drop(req.NamespacedName)
		return ctrl.Result{}, err
	}
	if h.DeletionTimestamp.IsZero() {
		if added, err := ensureFinalizer(ctx, r.Client, h); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	if h.Status.OperationalStatus == "" {
		// A new host, or one whose status clusterctl move dropped. Metal3's status schema has required
		// fields, which a merge patch of only the changed ones would lack: write it whole, once.
		st, err := readState(h)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.restoreStatusAnnotation(ctx, h, &st); err != nil {
			return ctrl.Result{}, err
		}
		restoreStatus(h, st)
		if h.Status.OperationalStatus == "" {
			h.Status.OperationalStatus = metal3v1.OperationalStatusDiscovered
		}
		if err := r.Client.Status().Update(ctx, h); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to initialise status of %s: %w", klog.KObj(h), err)
		}
		return ctrl.Result{}, nil // the patch of the new state triggers the next pass
	}
	st, err := readState(h)
	if err != nil {
		return ctrl.Result{}, err
	}
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	s := &scope{host: h, state: st, orig: h.DeepCopy()}
	was := seenAtStart(h, st)
	restoreStatus(h, st)
	readVersion := h.ResourceVersion
	defer func() {
		err := r.persist(ctx, s)
		switch {
		case err == nil:
			r.recordChanges(s, was)
			if s.powerSettled && rerr == nil && h.ResourceVersion == readVersion {
				r.settled.record(req.NamespacedName, readVersion, time.Now().Add(res.RequeueAfter))
			} else if !s.powerSettled {
				r.settled.forget(req.NamespacedName)
			}
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err) && rerr == nil:
			// This pass read an outdated host; the newer version is on its way through the watch.
			ctrl.LoggerFrom(ctx).V(4).Info("Host changed while reconciling, retrying")
			res = ctrl.Result{RequeueAfter: 100 * time.Millisecond}
		default:
			rerr = kerrors.NewAggregate([]error{rerr, err})
		}
	}()
	if !h.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if s.state.State == metal3v1.StateProvisioned && !deployWithdrawn(h, s.state) {
		// Before anything that can stop this pass (an unsupported field, an unreachable BMC): the host's
		// OS needs its address whatever else is wrong, and the table is empty after a restart.
		if err := r.keepLease(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if msgs := unsupported(h); len(msgs) > 0 {
		msg := "Yonder does not support " + strings.Join(msgs, "; ") + ": remove these fields or let Metal3's baremetal-operator manage this host (remove label " + ManagedLabel + ")"
		setCondition(h, BareMetalHostSpecSupportedCondition, false, BareMetalHostUnsupportedFieldsReason, msg)
		s.setError(metal3v1.RegistrationError, msg, false)
		return ctrl.Result{}, nil
	}
	setCondition(h, BareMetalHostSpecSupportedCondition, true, BareMetalHostSupportedReason, "")
	r.setEKTrust(h)
	if s.state.State == metal3v1.StateNone {
		s.transition(metal3v1.StateRegistering)
	}
	if r.applyAnnotations(ctx, s) {
		return ctrl.Result{}, nil // the patch of the new state triggers the next pass
	}
	return r.reconcileNormal(ctx, s)
}

// persist writes the host's metadata (annotations, finalizers: the durable state) and then its status,
// both as patches that fail on a conflict. The manager's cache may hand a reconcile an outdated host; an
// optimistic lock makes such a pass fail and retry instead of writing old state back.
func (r *Reconciler) persist(ctx context.Context, s *scope) error {
	h := s.host
	writeState(h, s.state)
	h.Status.Provisioning.State = s.state.State
	status := h.Status.DeepCopy()
	key := client.ObjectKeyFromObject(h)
	if !equality.Semantic.DeepEqual(s.orig.Annotations, h.Annotations) || !equality.Semantic.DeepEqual(s.orig.Finalizers, h.Finalizers) {
		from := h.ResourceVersion
		if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("failed to patch %s: %w", klog.KObj(h), err)
		}
		r.writes.wrote(key, from, h.ResourceVersion)
		h.Status = *status
	}
	if !equality.Semantic.DeepEqual(s.orig.Status, h.Status) {
		base := h.DeepCopy()
		base.Status = s.orig.Status
		from := h.ResourceVersion
		if err := r.Client.Status().Patch(ctx, h, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("failed to patch status of %s: %w", klog.KObj(h), err)
		}
		r.writes.wrote(key, from, h.ResourceVersion)
	}
	s.orig = h.DeepCopy()
	return nil
}

func ensureFinalizer(ctx context.Context, c client.Client, h *metal3v1.BareMetalHost) (bool, error) {
	if controllerutil.ContainsFinalizer(h, Finalizer) {
		return false, nil
	}
	orig := h.DeepCopy()
	controllerutil.AddFinalizer(h, Finalizer)
	if err := c.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("failed to add finalizer to %s: %w", klog.KObj(h), err)
	}
	return true, nil
}

// restoreStatus derives the status fields that mirror the durable state: after clusterctl move (status
// dropped) and after a pass whose status write failed once its metadata write had succeeded.
func restoreStatus(h *metal3v1.BareMetalHost, st HostState) {
	if st.State == "" {
		return
	}
	h.Status.Provisioning.State = st.State
	switch {
	case st.Image != nil || st.CustomDeploy != nil:
		h.Status.Provisioning.Image = ptr.Deref(st.Image, metal3v1.Image{})
		h.Status.Provisioning.CustomDeploy = st.CustomDeploy.DeepCopy()
	case st.State != metal3v1.StateProvisioned:
		h.Status.Provisioning.Image = metal3v1.Image{}
		h.Status.Provisioning.CustomDeploy = nil
	}
	if h.Status.OperationalStatus == "" {
		h.Status.OperationalStatus = metal3v1.OperationalStatusOK
	}
	// status.provisioning.state and the Provisioned condition are written in one status patch, but the
	// state annotation is written first, in its own patch: a pass whose status patch failed leaves the
	// next pass to derive the state from the annotation, and it must derive the condition with it.
	// Readers (CAPM3, the YonderMetalMachine reconciler) act on the state and must never see a
	// provisioned host that still carries the provisioning attempts' error or a False condition.
	c := meta.FindStatusCondition(h.Status.Conditions, BareMetalHostProvisionedCondition)
	switch {
	case st.State == metal3v1.StateProvisioned && (c == nil || c.Status != metav1.ConditionTrue):
		setCondition(h, BareMetalHostProvisionedCondition, true, BareMetalHostProvisionedReason, provisionedMessage(h.Status.Provisioning))
		if h.Status.ErrorType == metal3v1.ProvisioningError {
			h.Status.ErrorType, h.Status.ErrorMessage, h.Status.ErrorCount = "", "", 0
			h.Status.OperationalStatus = metal3v1.OperationalStatusOK
		}
	case st.State != metal3v1.StateProvisioned && st.State != metal3v1.StateDeprovisioning && c != nil && c.Status == metav1.ConditionTrue:
		setCondition(h, BareMetalHostProvisionedCondition, false, BareMetalHostNotProvisionedReason, fmt.Sprintf("the host is %s, not provisioned", st.State))
	}
}

// provisionedMessage is the Provisioned condition's message for a host provisioned with p's image or
// custom deploy.
func provisionedMessage(p metal3v1.ProvisionStatus) string {
	if p.CustomDeploy != nil && p.CustomDeploy.Method == infrav1.DisklessDeployMethod {
		return "the host attested and received its bootstrap data; it runs the Node diskless, from its provisioning ramdisk's memory " +
			"(customDeploy " + infrav1.DisklessDeployMethod + "): nothing was written to its disks, and a reboot loses the Node"
	}
	if isLiveImage(&p.Image) {
		return "the host attested; it SAN-boots the live ISO " + p.Image.URL + " from the boot server on every boot (format live-iso: no bootstrap data)"
	}
	return "the host attested, received its bootstrap data and wrote " + p.Image.URL + " to its disk, which it boots"
}

type scope struct {
	host  *metal3v1.BareMetalHost
	state HostState
	bmc   redfish.Client
	// orig is the host as last read or written, the base of the optimistic-locked patches.
	orig *metal3v1.BareMetalHost
	// credVersion is the resourceVersion of the credentials Secret this reconcile used.
	credVersion string
	// bmcKey is what bmc was opened with (sessionKey), under which it is kept after the pass.
	bmcKey string
	// bmcProvenAt is when a request through bmc last succeeded (kept with it: keptSessionTrust).
	bmcProvenAt time.Time
	// powerSettled is set by a pass that found the power as wanted and did nothing but read it; with
	// nothing written, the host is settled at the version read until the power poll (settledHosts).
	powerSettled bool
	// trustKept lets connect hand out a recently proven kept client without reading the system first;
	// set only for a pass whose first BMC call retries through reprove (the inspecting pass).
	trustKept bool
	// bmcUnproven is true while bmc is such a trusted client and no request of this pass succeeded on it.
	bmcUnproven bool
}

func (s *scope) transition(to metal3v1.ProvisioningState) {
	if s.state.State == to {
		return
	}
	s.state.State = to
	s.state.PhaseStartedAt = now()
	s.host.Status.Provisioning.State = to
	s.host.Status.LastUpdated = now()
	om := s.host.OperationMetricForState(to)
	if om != nil {
		om.Start = *now()
		om.End = metav1.Time{}
	}
}

func (s *scope) endOperation(op metal3v1.ProvisioningState) {
	if om := s.host.OperationMetricForState(op); om != nil && !om.Start.IsZero() {
		om.End = *now()
	}
}

// setError records a host error as Metal3 consumers (CAPM3, our machine controller) read it: errorType,
// errorMessage, errorCount and operationalStatus error. count is false for a condition that repeats.
func (s *scope) setError(t metal3v1.ErrorType, msg string, count bool) {
	h := s.host
	if h.Status.ErrorType != t || h.Status.ErrorMessage != msg || count {
		h.Status.ErrorCount++
	}
	h.Status.ErrorType = t
	h.Status.ErrorMessage = msg
	h.Status.OperationalStatus = metal3v1.OperationalStatusError
}

func (s *scope) clearError() {
	h := s.host
	h.Status.ErrorType = ""
	h.Status.ErrorMessage = ""
	h.Status.ErrorCount = 0
	h.Status.OperationalStatus = metal3v1.OperationalStatusOK
}

func setCondition(h *metal3v1.BareMetalHost, t string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&h.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: h.Generation})
}

// unsupported lists the spec fields set on h that Yonder does not implement, so they are refused
// instead of silently ignored. The honoured fields are listed in docs/infrastructure-baremetal.md.
func unsupported(h *metal3v1.BareMetalHost) []string {
	var out []string
	sp := h.Spec
	add := func(field, why string) { out = append(out, field+" ("+why+")") }
	if sp.RAID != nil {
		add("spec.raid", "no RAID configuration")
	}
	if sp.Firmware != nil { //nolint:staticcheck // deprecated in Metal3, still refused explicitly rather than ignored
		add("spec.firmware", "no BIOS settings")
	}
	if sp.CustomDeploy != nil && !diskless(h) {
		add("spec.customDeploy.method="+sp.CustomDeploy.Method, "no Ironic deploy steps; the one custom deploy is "+infrav1.DisklessDeployMethod)
	}
	if diskless(h) && hasImage(h) {
		add("spec.image with spec.customDeploy "+infrav1.DisklessDeployMethod, "a diskless host writes and boots no image; set one of the two")
	}
	if sp.ExternallyProvisioned {
		add("spec.externallyProvisioned", "hosts are provisioned by Yonder")
	}
	if sp.HardwareProfile != "" {
		add("spec.hardwareProfile", "deprecated in Metal3")
	}
	if sp.PreprovisioningNetworkDataName != "" {
		add("spec.preprovisioningNetworkDataName", "the agent configures its own boot network")
	}
	if sp.BootMode == metal3v1.UEFISecureBoot {
		add("spec.bootMode=UEFISecureBoot", "the boot override does not manage Secure Boot")
	}
	if sp.InspectionMode == metal3v1.InspectionModeAgent {
		add("spec.inspectionMode=agent", "inspection reads the BMC's Redfish inventory; no inspection boot yet")
	}
	if sp.Image != nil {
		if f := sp.Image.DiskFormat; f != nil && *f != "raw" && *f != "qcow2" && *f != "live-iso" {
			add("spec.image.format="+*f, "images are written as raw or qcow2, or booted as live-iso")
		}
		if sp.Image.OCIAuthSecretName != nil {
			add("spec.image.ociAuthSecretName", "no OCI images")
		}
	}
	if sp.Architecture != "" && sp.Architecture != "x86_64" {
		add("spec.architecture="+sp.Architecture, "boot artefacts are x86_64")
	}
	return out
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	// Every state needs the BMC; a failure here is the host's registration error, whatever its state.
	// The inspecting pass follows registration within moments: its kept session may be trusted without
	// a read that only proves it (keptSessionTrust), because inspect retries through reprove. Not a retry
	// after a failed inspection: there the BMC's inventory is the likelier culprit than the session, and
	// reprove would log out and open a new session on every retry.
	s.trustKept = s.state.State == metal3v1.StateInspecting && !h.InspectionDisabled() && h.Status.ErrorType != metal3v1.InspectionError
	if wait := r.settled.wait(client.ObjectKeyFromObject(h), h.ResourceVersion); wait > 0 {
		// The last pass found this very version settled and the power poll is not due: another read of
		// the BMC would tell nothing new.
		s.powerSettled = true
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if res, err := r.connect(ctx, s); err != nil || s.bmc == nil {
		return res, err
	}
	// A closure: reprove may replace s.bmc during the pass (or leave none when the BMC refuses it).
	defer func() {
		if s.bmc != nil {
			r.sessions.put(client.ObjectKeyFromObject(h), s.bmcKey, s.bmc, s.bmcProvenAt)
		}
	}()
	switch s.state.State {
	case metal3v1.StateRegistering:
		s.endOperation(metal3v1.StateRegistering)
		s.host.UpdateGoodCredentials(s.secret())
		// Enrolment is explicit: no window is opened here (EKFingerprintAnnotation or EnrolmentWindowAnnotation).
		// Each state is recorded before its work starts, so a restart resumes inside the right one.
		s.transition(metal3v1.StateInspecting)
		return ctrl.Result{}, nil // the patch of the new state triggers the next pass
	case metal3v1.StateInspecting:
		return r.inspect(ctx, s)
	case metal3v1.StateAvailable, metal3v1.StateReady, metal3v1.StatePreparing, metal3v1.StateMatchProfile:
		s.transition(metal3v1.StateAvailable)
		if h.NeedsProvisioning() {
			s.transition(metal3v1.StateProvisioning)
			s.state.Attempt, s.state.BootRequestedAt, s.state.BootSentAt, s.state.RetryAt = 0, nil, nil, nil
			return ctrl.Result{}, nil // the patch of the new state triggers the next pass
		}
		if h.Status.HardwareDetails == nil && !h.InspectionDisabled() {
			// Status lost (clusterctl move): read the inventory again, it costs no boot.
			return r.inspect(ctx, s)
		}
		return r.reconcilePower(ctx, s)
	case metal3v1.StateProvisioning:
		return r.provision(ctx, s)
	case metal3v1.StateProvisioned:
		if deployWithdrawn(h, s.state) {
			s.transition(metal3v1.StateDeprovisioning)
			return ctrl.Result{}, nil // the patch of the new state triggers the next pass
		}
		if h.Status.HardwareDetails == nil && !h.InspectionDisabled() {
			// Status lost (clusterctl move): read the inventory again, it costs no boot.
			return r.inspect(ctx, s)
		}
		return r.reconcilePower(ctx, s)
	case metal3v1.StateDeprovisioning:
		return r.deprovision(ctx, s)
	default:
		msg := fmt.Sprintf("provisioning state %q is not one Yonder drives", s.state.State)
		s.setError(metal3v1.RegistrationError, msg, false)
		return ctrl.Result{}, nil
	}
}

func (s *scope) secret() corev1.Secret {
	return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.host.Namespace, Name: s.host.Spec.BMC.CredentialsName, ResourceVersion: s.credVersion}}
}

// connect reads the credentials and opens the BMC connection, pinning its certificate on first contact.
// Every failure becomes the BMCAccessible condition and a registration error, with a retry after
// RetryInterval: a BMC sends no events.
func (r *Reconciler) connect(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	fail := func(reason, msg string) (ctrl.Result, error) {
		setCondition(h, BareMetalHostBMCAccessibleCondition, false, reason, msg)
		errType := metal3v1.RegistrationError
		if h.Status.Provisioning.State == metal3v1.StateProvisioned {
			errType = metal3v1.ProvisionedRegistrationError
		}
		s.setError(errType, msg, false)
		ctrl.LoggerFrom(ctx).Info("BMC not accessible", "reason", reason, "message", msg)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	addr, err := redfish.ParseAddress(h.Spec.BMC.Address)
	if err != nil {
		return fail(BareMetalHostInvalidAddressReason, err.Error()+": fix spec.bmc.address")
	}
	if h.Spec.BMC.CredentialsName == "" {
		return fail(BareMetalHostCredentialsMissingReason, "spec.bmc.credentialsName is empty: name a Secret with keys username and password")
	}
	sec := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.BMC.CredentialsName}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return fail(BareMetalHostCredentialsMissingReason, fmt.Sprintf("Secret %s/%s (spec.bmc.credentialsName) does not exist: create it with keys username and password", h.Namespace, h.Spec.BMC.CredentialsName))
		}
		return ctrl.Result{}, fmt.Errorf("failed to read BMC credentials of %s: %w", klog.KObj(h), err)
	}
	if err := r.ownCredentials(ctx, h, sec); err != nil {
		return ctrl.Result{}, err
	}
	user, pass := string(sec.Data["username"]), string(sec.Data["password"])
	if user == "" || pass == "" {
		return fail(BareMetalHostCredentialsMissingReason, fmt.Sprintf("Secret %s/%s lacks username or password", h.Namespace, sec.Name))
	}
	h.UpdateTriedCredentials(*sec)
	s.credVersion = sec.ResourceVersion
	pin := h.Annotations[CertPinAnnotation]
	if h.Spec.BMC.DisableCertificateVerification {
		pin = ""
	} else if pin == "" {
		// First contact: read the certificate without credentials and make the pin durable (a write that
		// fails if this pass read an outdated host) before the credentials are sent to that BMC.
		seen, err := redfish.ProbeCertificate(ctx, addr, 0)
		if err != nil {
			return fail(BareMetalHostBMCUnreachableReason, err.Error())
		}
		if seen != "" {
			h.Annotations[CertPinAnnotation] = seen
			if err := r.persist(ctx, s); err != nil {
				return ctrl.Result{}, err
			}
			ctrl.LoggerFrom(ctx).Info("Pinned BMC certificate", "sha256", seen)
			pin = seen
		}
	}
	cfg := redfish.Config{Address: addr, Username: user, Password: pass, BasicAuth: r.BasicAuth, PinnedCertSHA256: pin}
	s.bmcKey = sessionKey(cfg)
	// The session of an earlier pass, if the BMC still honours it; else a new one.
	c, provenAt := r.sessions.take(client.ObjectKeyFromObject(h), s.bmcKey)
	if c != nil && s.trustKept && time.Since(provenAt) < keptSessionTrust {
		// Proven moments ago: the pass's first request proves it again, and any failure of that request
		// goes through reprove, which does what the read skipped here would have done.
		s.bmcProvenAt, s.bmcUnproven = provenAt, true
		r.bmcAccessible(s, c)
		return ctrl.Result{}, nil
	}
	if c != nil {
		if _, err := c.System(ctx); err != nil {
			ctrl.LoggerFrom(ctx).V(4).Info("Kept Redfish session no longer works, opening a new one", "error", err.Error())
			c.Close()
			c = nil
		}
	}
	if c == nil {
		c, err = r.Dial(ctx, cfg)
		if err == nil {
			// Sessions prove the credentials at connect; basic auth only on the first real request.
			if _, err = c.System(ctx); err != nil {
				c.Close()
			}
		}
	}
	switch {
	case errors.Is(err, redfish.ErrCertificateMismatch):
		return fail(BareMetalHostCertificateChangedReason, fmt.Sprintf("the BMC presented a different TLS certificate than the one pinned at registration (%v). "+
			"If the BMC's certificate was replaced on purpose, remove annotation %s to pin the new one; otherwise something else answers at %s", err, CertPinAnnotation, h.Spec.BMC.Address))
	case errors.Is(err, redfish.ErrUnauthorized):
		return fail(BareMetalHostCredentialsRejectedReason, fmt.Sprintf("the BMC rejected the credentials in Secret %s/%s: fix the Secret", h.Namespace, sec.Name))
	case err != nil:
		return fail(BareMetalHostBMCUnreachableReason, err.Error())
	}
	s.bmcProvenAt, s.bmcUnproven = time.Now(), false
	r.bmcAccessible(s, c)
	return ctrl.Result{}, nil
}

// keptSessionTrust is how long after a successful request a kept session is used without a read that
// only proves it. Trusting a session the BMC did end costs nothing: the first request fails where the
// proving read would have, and reprove opens a new session as connect would. What the window bounds is
// how old the system document may be that the inventory's identity fields (manufacturer, model, serial,
// BIOS version, hostname) come from: read by the registering pass instead of the inspecting one. Long
// enough for the queue between those passes when thousands of hosts register at once (each pass of each
// host requeues it behind all the others: ~1 min per round for 2,000 hosts on a loaded 2-core machine),
// and under the session timeout BMCs commonly default to (30 min; Redfish allows 30 s to 24 h).
const keptSessionTrust = 10 * time.Minute

// bmcAccessible records that the host's BMC answers with c, which the pass uses from now on.
func (r *Reconciler) bmcAccessible(s *scope, c redfish.Client) {
	h := s.host
	setCondition(h, BareMetalHostBMCAccessibleCondition, true, BareMetalHostRegisteredReason, "")
	if h.Status.OperationalStatus == metal3v1.OperationalStatusDiscovered {
		h.Status.OperationalStatus = metal3v1.OperationalStatusOK
	}
	if h.Status.ErrorType == metal3v1.RegistrationError || h.Status.ErrorType == metal3v1.ProvisionedRegistrationError {
		s.clearError()
	}
	s.bmc = c
}

// reprove handles the failure of the first request on a kept client connect trusted without reading the
// system (keptSessionTrust): the BMC may have ended the session (timeout, BMC reboot), so the client is
// logged out and connect runs again, opening and proving a new session as the skipped read's failure
// would have made it do. Called only while s.bmcUnproven. retry is true when the pass has a new, proven
// client to repeat its request on, once; otherwise res and err are connect's (the host's registration
// error, as before the skipped read), and the request's own failure is not to be reported.
func (r *Reconciler) reprove(ctx context.Context, s *scope, failed error) (retry bool, res ctrl.Result, err error) {
	ctrl.LoggerFrom(ctx).V(4).Info("Kept Redfish session failed its first request, opening a new one", "error", failed.Error())
	s.bmc.Close()
	s.bmc, s.bmcUnproven, s.trustKept = nil, false, false
	if res, err := r.connect(ctx, s); err != nil || s.bmc == nil {
		return false, res, err
	}
	return true, ctrl.Result{}, nil
}

func (r *Reconciler) inspect(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	if h.InspectionDisabled() {
		if h.Status.HardwareDetails == nil {
			setCondition(h, BareMetalHostInspectedCondition, false, BareMetalHostInspectionDisabledReason,
				"spec.inspectionMode (or annotation "+metal3v1.InspectAnnotationPrefix+") is disabled; annotation "+metal3v1.HardwareDetailsAnnotation+" may give status.hardware")
		}
		s.endOperation(metal3v1.StateInspecting)
		s.transition(metal3v1.StateAvailable)
		return ctrl.Result{}, nil // the patch of the new state triggers the next pass
	}
	inv, err := s.bmc.Inventory(ctx)
	if err != nil && s.bmcUnproven {
		retry, res, rerr := r.reprove(ctx, s, err)
		if !retry {
			return res, rerr
		}
		inv, err = s.bmc.Inventory(ctx)
	}
	if err != nil {
		msg := fmt.Sprintf("failed to read the Redfish inventory: %v", err)
		setCondition(h, BareMetalHostInspectedCondition, false, BareMetalHostInspectionFailedReason, msg)
		s.setError(metal3v1.InspectionError, msg, false)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	s.bmcProvenAt, s.bmcUnproven = time.Now(), false
	h.Status.HardwareDetails = hardwareDetails(inv)
	if len(inv.GPUs) > 0 {
		h.Annotations[GPUsAnnotation] = gpusJSON(inv.GPUs)
	} else {
		delete(h.Annotations, GPUsAnnotation)
	}
	// The labels are written in the same metadata patch as the move to available, so a host is never
	// claimable before a selector can tell whether it has GPUs.
	setGPULabels(h, inv.GPUs)
	setCondition(h, BareMetalHostInspectedCondition, true, BareMetalHostInventoryReadReason,
		fmt.Sprintf("%d CPUs, %d MiB, %d NICs, %d disks, %d GPUs", inv.CPU.Count, inv.MemoryMiB, len(inv.NICs), len(inv.Disks), len(inv.GPUs)))
	if h.Status.ErrorType == metal3v1.InspectionError {
		s.clearError()
	}
	if s.state.State == metal3v1.StateInspecting {
		s.endOperation(metal3v1.StateInspecting)
		s.transition(metal3v1.StateAvailable)
		ctrl.LoggerFrom(ctx).Info("Host inspected, available", "cpus", inv.CPU.Count, "memoryMiB", inv.MemoryMiB)
		// One more pass settles power for the available host.
		return ctrl.Result{}, nil // the patch of the new state triggers the next pass
	}
	return ctrl.Result{}, nil
}

// ensurePower brings the host to the wanted power state and records it.
func (r *Reconciler) ensurePower(ctx context.Context, s *scope, on bool) (ctrl.Result, error) {
	h := s.host
	if !on && h.Spec.DisablePowerOff {
		on = true
	}
	sys, err := s.bmc.System(ctx)
	if err != nil {
		s.setError(metal3v1.PowerManagementError, err.Error(), false)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	// Settled when the BMC already had the power as wanted; after a power action the next poll checks it.
	s.powerSettled = sys.PoweredOn == on
	if sys.PoweredOn != on {
		action := redfish.PowerOff
		if on {
			action = redfish.PowerOn
		}
		ctrl.LoggerFrom(ctx).Info("Changing host power", "action", string(action))
		if err := s.bmc.Power(ctx, action); err != nil {
			s.setError(metal3v1.PowerManagementError, fmt.Sprintf("failed to power the host %s: %v", map[bool]string{true: "on", false: "off"}[on], err), true)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		}
		sys.PoweredOn = on
	}
	h.Status.PoweredOn = sys.PoweredOn
	if h.Status.ErrorType == metal3v1.PowerManagementError {
		s.clearError()
	}
	return ctrl.Result{RequeueAfter: r.PowerPollInterval}, nil
}

func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	s.transition(metal3v1.StateDeleting)
	r.forgetBoot(h)
	// Power off best effort: an unreachable BMC must not keep a host object forever.
	if !h.Spec.DisablePowerOff {
		if _, err := r.connect(ctx, s); err == nil && s.bmc != nil {
			if err := s.bmc.Power(ctx, redfish.PowerOff); err != nil {
				ctrl.LoggerFrom(ctx).Info("Could not power off deleted host", "error", err.Error())
			}
			s.bmc.Close() // connect took the kept client: this logs its session out
		}
	}
	r.sessions.drop(client.ObjectKeyFromObject(h))
	controllerutil.RemoveFinalizer(h, Finalizer)
	return ctrl.Result{}, nil
}

// releaseMoved lets go of a host clusterctl move is deleting from this cluster (it lives on in the
// target): its boot table entry and BMC session are dropped and, once it is being deleted, the finalizer
// is removed. The host itself is not touched.
func (r *Reconciler) releaseMoved(ctx context.Context, h *metal3v1.BareMetalHost) error {
	r.forgetBoot(h)
	r.sessions.drop(client.ObjectKeyFromObject(h))
	if h.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(h, Finalizer) {
		return nil
	}
	orig := h.DeepCopy()
	controllerutil.RemoveFinalizer(h, Finalizer)
	if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to release %s for clusterctl move: %w", klog.KObj(h), err)
	}
	ctrl.LoggerFrom(ctx).Info("Host moved by clusterctl: released without powering it off")
	return nil
}

func (r *Reconciler) forgetBoot(h *metal3v1.BareMetalHost) {
	if r.NetBoot == nil || h.Spec.BootMACAddress == "" {
		return
	}
	if mac, err := net.ParseMAC(h.Spec.BootMACAddress); err == nil {
		r.NetBoot.DeleteHost(mac, h.Namespace+"/"+h.Name)
	}
}

// setEKTrust reports on the host whether the boot services that provision it verify EK certificates and
// sign the bootstrap data they release.
func (r *Reconciler) setEKTrust(h *metal3v1.BareMetalHost) {
	if r.NetBoot == nil {
		meta.RemoveStatusCondition(&h.Status.Conditions, BareMetalHostEKTrustCondition)
		meta.RemoveStatusCondition(&h.Status.Conditions, BareMetalHostBootDataSignedCondition)
		return
	}
	if r.UnsignedBootData {
		setCondition(h, BareMetalHostBootDataSignedCondition, false, BareMetalHostInsecureUnsignedBootDataReason,
			"the manager runs with --insecure-unsigned-boot-data: a rogue server on the boot LAN can make this host's boot image run its own data")
	} else {
		setCondition(h, BareMetalHostBootDataSignedCondition, true, BareMetalHostSigningKeyConfiguredReason,
			"released bootstrap data is signed with the provider's key; the boot image refuses anything else")
	}
	if r.InsecureAcceptAnyEK {
		setCondition(h, BareMetalHostEKTrustCondition, false, BareMetalHostInsecureAcceptAnyEKReason,
			"the manager runs with --insecure-accept-any-ek: TPMs whose EK has no certificate, or no configured vendor roots to verify it, are accepted, so a software TPM inside an open enrolment window can pin itself and receive this host's bootstrap data")
		return
	}
	if r.EKRoots == nil {
		setCondition(h, BareMetalHostEKTrustCondition, true, BareMetalHostEKRootsConfiguredReason, "TPM EK certificates must chain to the configured vendor roots")
		return
	}
	roots, problem := r.EKRoots.State()
	if roots == 0 {
		setCondition(h, BareMetalHostEKTrustCondition, false, BareMetalHostEKRootsNotLoadedReason, fmt.Sprintf(
			"the manager holds no TPM vendor root yet (%s): this host cannot attest (EKRootsNotConfigured) unless its EK is registered out of band "+
				"(annotation %s); add the vendor's root CA to ConfigMap %s (a key ending in .pem or .crt)", problem, EKFingerprintAnnotation, r.EKRoots.ConfigMap))
		return
	}
	msg := fmt.Sprintf("TPM EK certificates must chain to the configured vendor roots (%d loaded)", roots)
	if problem != "" {
		msg += "; " + problem
	}
	setCondition(h, BareMetalHostEKTrustCondition, true, BareMetalHostEKRootsConfiguredReason, msg)
}

// deployWithdrawn reports whether a provisioned host's consumer removed or changed what it deployed (its
// image, or its custom deploy): the host is to be deprovisioned, and provisioned again if the spec asks.
func deployWithdrawn(h *metal3v1.BareMetalHost, st HostState) bool {
	if st.CustomDeploy != nil {
		return h.Spec.CustomDeploy == nil || h.Spec.CustomDeploy.Method != st.CustomDeploy.Method || hasImage(h)
	}
	return !hasImage(h) || (st.Image != nil && h.Spec.Image.URL != st.Image.URL)
}

// leaseHost is h's boot table entry without a boot configuration: its name, boot MAC, hostname and
// reserved address (BootAddressAnnotation; invalid when it has none).
func leaseHost(h *metal3v1.BareMetalHost) (inventory.Host, error) {
	mac, err := net.ParseMAC(h.Spec.BootMACAddress)
	if err != nil {
		return inventory.Host{}, fmt.Errorf("spec.bootMACAddress %q is not a MAC address", h.Spec.BootMACAddress)
	}
	ih := inventory.Host{Name: h.Namespace + "/" + h.Name, MAC: mac, Hostname: h.Name}
	if a := h.Annotations[BootAddressAnnotation]; a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil || !addr.Is4() {
			return inventory.Host{}, fmt.Errorf("annotation %s=%q is not an IPv4 address", BootAddressAnnotation, a)
		}
		ih.Address = addr
	}
	return ih, nil
}

func bootHost(h *metal3v1.BareMetalHost, cfg inventory.BootConfig) (inventory.Host, error) {
	ih, err := leaseHost(h)
	if err != nil {
		return inventory.Host{}, err
	}
	ih.Boot = cfg
	// The image is not on the kernel command line: it travels in the released instructions, sealed to
	// the host's TPM and signed by the provider, so nobody on the boot LAN can change what a host writes.
	// A URL or checksum with blanks or control characters is still refused before the host boots: it is
	// a mistake (or an attack) that would only fail later, in the ramdisk.
	if img := h.Spec.Image; img != nil {
		for _, v := range []struct{ field, value string }{
			{"spec.image.url", img.URL}, {"spec.image.checksum", img.Checksum}, {"spec.image.checksumType", string(img.ChecksumType)},
		} {
			if err := inventory.CheckBootValue(v.field, v.value); err != nil {
				return inventory.Host{}, err
			}
		}
	}
	if err := ih.Boot.Check(); err != nil {
		return inventory.Host{}, err
	}
	return ih, nil
}

func setConditionRaw(h *metal3v1.BareMetalHost, c metav1.Condition) {
	c.ObservedGeneration = h.Generation
	meta.SetStatusCondition(&h.Status.Conditions, c)
}

// MoveLabel is clusterctl's label for objects that `clusterctl move` carries whatever their owners.
const MoveLabel = "clusterctl.cluster.x-k8s.io/move"

// ownCredentials makes `clusterctl move` carry the host's BMC credentials Secret along with the host,
// without making the host an owner of it: an owner reference would let the garbage collector delete a
// Secret the provider does not own (one that may serve several hosts, or that the user manages) when the
// host is deleted. The Secret gets clusterctl's move label instead, and an owner reference an earlier
// version added is removed. The patch is only sent when something changes, so it costs nothing on later
// reconciles.
func (r *Reconciler) ownCredentials(ctx context.Context, h *metal3v1.BareMetalHost, sec *corev1.Secret) error {
	_, labelled := sec.Labels[MoveLabel]
	refs := slices.DeleteFunc(slices.Clone(sec.OwnerReferences), func(ref metav1.OwnerReference) bool {
		return ref.UID == h.UID && ref.Kind == "BareMetalHost"
	})
	if labelled && len(refs) == len(sec.OwnerReferences) {
		return nil
	}
	p := client.MergeFromWithOptions(sec.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	sec.Labels[MoveLabel] = ""
	sec.OwnerReferences = refs
	if err := r.Client.Patch(ctx, sec, p); err != nil {
		return fmt.Errorf("failed to label the BMC credentials Secret %s of %s for clusterctl move: %w", klog.KObj(sec), klog.KObj(h), err)
	}
	return nil
}
