// Package sshhost reconciles the YonderSSHHost inventory: it probes hosts over SSH (recording the host
// key on first use when allowed), gathers facts, keeps a claimed host from being deleted, carries the
// clusterctl move label on hosts and their credential Secrets, and reports each host's phase.
package sshhost

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/predicates"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts;yondersshhosts/status;yondersshhosts/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;patch

// Reconciler reconciles YonderSSHHosts.
type Reconciler struct {
	Client client.Client
	Dialer sshexec.Dialer
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
	// ProbeInterval is how often a host is probed over SSH (default 5m).
	ProbeInterval time.Duration

	// written is the resourceVersion of this controller's last write of each host. A pass writes a host's
	// metadata and status apart, and every write of the host or of its machine wakes it again, often while
	// the cache still shows the host from before the write: such a pass would probe over SSH again and
	// send status from what it already replaced (refused as a Conflict, then rewritten by the patch
	// helper's fallback, an older phase included), three to eight status writes for one step. It is
	// skipped instead.
	written claim.WrittenVersions
	// handOffs is when each host was first found waiting for its machine to record a new claim
	// (claimUnrecorded): the wait ends after HandOffWait even if that record never comes.
	handOffs sync.Map
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.ProbeInterval == 0 {
		r.ProbeInterval = 5 * time.Minute
	}
	if r.Dialer == nil {
		r.Dialer = sshexec.SSHDialer{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.YonderSSHHost{}).
		WithOptions(opts).
		WithEventFilter(predicates.ResourceNotPausedAndHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), r.WatchFilterValue)).
		Watches(&infrav1.YonderSSHMachine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if name := o.GetAnnotations()[infrav1.HostAnnotation]; name != "" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
			}
			return nil
		})).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	h := &infrav1.YonderSSHHost{}
	if err := r.Client.Get(ctx, req.NamespacedName, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if annotations.HasPaused(h) {
		return ctrl.Result{}, nil
	}
	if r.written.Stale(h) {
		// The watch event of this controller's last write is on its way and wakes the host again; this
		// cache would have the pass probe again and rewrite status from an older base.
		ctrl.LoggerFrom(ctx).V(4).Info("Waiting for the cache to show this controller's last write")
		return ctrl.Result{RequeueAfter: claim.StaleRetry}, nil
	}
	if r.claimUnrecorded(ctx, h) {
		// The machine's pass that claimed h is still handing it off; its status write at the end of that
		// pass wakes h. The phase written now (Claimed) would be replaced by Provisioning a moment later.
		return ctrl.Result{RequeueAfter: HandOffWait}, nil
	}
	// base is the host as read; the deferred write sends what this pass changed, status with its
	// conditions in one request (only this controller writes a host's status).
	base := h.DeepCopy()
	defer func() {
		if err := conditions.SetSummaryCondition(h, h, clusterv1.ReadyCondition, conditions.ForConditionTypes{infrav1.YonderSSHHostReachableCondition},
			conditions.IgnoreTypesIfMissing{infrav1.YonderSSHHostReachableCondition}); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
		}
		if err := claim.PatchObject(ctx, claim.RecordingClient{Client: r.Client, Written: &r.written, Only: isHost}, base, h, []string{infrav1.YonderSSHHostReachableCondition, clusterv1.ReadyCondition}); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, fmt.Errorf("failed to patch YonderSSHHost %s: %w", klog.KObj(h), err)})
		}
	}()
	if !h.DeletionTimestamp.IsZero() {
		if h.Spec.ConsumerRef != nil {
			// Deleting a claimed host would leak its Machine's infrastructure: wait for the release.
			conditions.Set(h, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.YonderSSHHostDeletionBlockedReason,
				Message: fmt.Sprintf("Host is claimed by YonderSSHMachine %s; delete that Machine first", h.Spec.ConsumerRef.Name)})
			return ctrl.Result{}, nil
		}
		controllerutil.RemoveFinalizer(h, infrav1.HostFinalizer)
		return ctrl.Result{}, nil
	}
	controllerutil.AddFinalizer(h, infrav1.HostFinalizer)
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	if _, ok := h.Labels[clusterctlv1.ClusterctlMoveLabel]; !ok {
		h.Labels[clusterctlv1.ClusterctlMoveLabel] = ""
	}
	var res ctrl.Result
	if h.Status.LastProbeTime == nil || time.Since(h.Status.LastProbeTime.Time) >= r.ProbeInterval {
		// Secrets are read uncached, so their move label is checked with the probe, not on every event.
		if err := r.labelSecrets(ctx, h); err != nil {
			return ctrl.Result{}, err
		}
		r.probe(ctx, h)
	}
	res.RequeueAfter = r.ProbeInterval
	if h.Status.LastProbeTime != nil {
		if left := r.ProbeInterval - time.Since(h.Status.LastProbeTime.Time); left > 0 {
			res.RequeueAfter = left
		}
	}
	if err := r.setPhase(ctx, h); err != nil {
		return ctrl.Result{}, err
	}
	return res, nil
}

func (r *Reconciler) labelSecrets(ctx context.Context, h *infrav1.YonderSSHHost) error {
	refs := []string{h.Spec.CredentialsSecretRef.Name}
	if h.Spec.Bastion != nil {
		refs = append(refs, h.Spec.Bastion.CredentialsSecretRef.Name)
	}
	for _, name := range refs {
		s := &corev1.Secret{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name}, s); err != nil {
			continue // reported by the probe
		}
		_, move := s.Labels[clusterctlv1.ClusterctlMoveLabel]
		_, creds := s.Labels[infrav1.CredentialsLabel]
		if move && creds {
			continue
		}
		p := client.MergeFrom(s.DeepCopy())
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[clusterctlv1.ClusterctlMoveLabel] = ""
		s.Labels[infrav1.CredentialsLabel] = ""
		if err := r.Client.Patch(ctx, s, p); err != nil {
			return fmt.Errorf("failed to label Secret %s as moved with its host and as SSH credentials: %w", klog.KObj(s), err)
		}
	}
	return nil
}

func (r *Reconciler) probe(ctx context.Context, h *infrav1.YonderSSHHost) {
	log := ctrl.LoggerFrom(ctx)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		recorded ssh.PublicKey
	)
	record := func(k ssh.PublicKey) { mu.Lock(); recorded = k; mu.Unlock() }
	h.Status.LastProbeTime = ptr.To(metav1.Now())
	fail := func(err error) {
		reason, msg := hostconn.Reason(err, h)
		conditions.Set(h, metav1.Condition{Type: infrav1.YonderSSHHostReachableCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
		log.Info("Probe failed", "reason", reason)
	}
	t, err := hostconn.Target(ctx, r.Client, h, record)
	if err != nil {
		fail(err)
		return
	}
	e, err := r.Dialer.Dial(ctx, t)
	if err != nil {
		fail(err)
		return
	}
	defer func() { _ = e.Close() }()
	facts, err := remote.Probe(ctx, e)
	if err != nil {
		fail(err)
		return
	}
	mu.Lock()
	if recorded != nil && h.Spec.HostKey == "" {
		// Trust on first use is spent: the recorded key is pinned from now on, so clearing it later
		// re-arms trust on first use only through an explicit policy change (see the host webhook).
		h.Spec.HostKey = sshexec.FormatHostKey(recorded)
		h.Spec.HostKeyPolicy = infrav1.HostKeyPolicyPinned
		log.Info("Recorded host key on first use", "fingerprint", ssh.FingerprintSHA256(recorded))
	}
	mu.Unlock()
	h.Status.Facts = &infrav1.HostFacts{Hostname: facts.Hostname, OS: facts.OS, Kernel: facts.Kernel, Arch: facts.Arch,
		CPUs: int32(facts.CPUs), MemoryBytes: facts.MemoryBytes, GPUs: facts.GPUs, Agent: facts.Agent} //nolint:gosec // CPU counts fit
	setGPULabels(h, facts)
	conditions.Set(h, metav1.Condition{Type: infrav1.YonderSSHHostReachableCondition, Status: metav1.ConditionTrue, Reason: infrav1.YonderSSHHostProbedReason})
}

// setGPULabels sets GPUCountLabel and GPUVendorLabel from the probe's GPUs, removing them from a host that
// has none (or, for the vendor, GPUs of several vendors or of unknown ones). The labels go out with the
// pass's metadata patch; a claim racing it on the same host conflicts on the resourceVersion and retries.
func setGPULabels(h *infrav1.YonderSSHHost, facts remote.Facts) {
	if len(facts.GPUs) == 0 {
		delete(h.Labels, infrav1.GPUCountLabel)
		delete(h.Labels, infrav1.GPUVendorLabel)
		return
	}
	h.Labels[infrav1.GPUCountLabel] = strconv.Itoa(len(facts.GPUs))
	vendor := ""
	if len(facts.GPUVendors) == len(facts.GPUs) {
		vendor = facts.GPUVendors[0]
		for _, v := range facts.GPUVendors[1:] {
			if v != vendor {
				vendor = ""
			}
		}
	}
	if errs := validation.IsValidLabelValue(vendor); vendor == "" || len(errs) > 0 {
		delete(h.Labels, infrav1.GPUVendorLabel)
		return
	}
	h.Labels[infrav1.GPUVendorLabel] = vendor
}

// HandOffWait is how long a host's status may lag a claim its machine has not recorded in its status
// yet (claimUnrecorded): the machine's write normally wakes the host within its pass; a machine that
// does not write (paused, failing) leaves the host to write its status after this.
const HandOffWait = 10 * time.Second

// claimUnrecorded reports whether h's consumer is new to h's status while the claiming machine's status
// does not name h yet: its pass is between the claim and its status write. Nothing of this host's own
// pass is due then (a claimed host has its finalizer and was probed before it was free), so the pass
// waits for that write instead of writing status twice for one hand-off, for HandOffWait at most.
func (r *Reconciler) claimUnrecorded(ctx context.Context, h *infrav1.YonderSSHHost) bool {
	key := client.ObjectKeyFromObject(h)
	ref := h.Spec.ConsumerRef
	waiting := ref != nil && h.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(h, infrav1.HostFinalizer) &&
		(h.Status.ConsumerRef == nil || *h.Status.ConsumerRef != *ref)
	if waiting {
		m := &infrav1.YonderSSHMachine{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: ref.Name}, m)
		waiting = err == nil && m.Status.HostRef != h.Name && m.DeletionTimestamp.IsZero()
	}
	if !waiting {
		r.handOffs.Delete(key)
		return false
	}
	since, _ := r.handOffs.LoadOrStore(key, time.Now())
	if time.Since(since.(time.Time)) >= HandOffWait { //nolint:forcetypeassert // only times are stored
		r.handOffs.Delete(key)
		return false
	}
	return true
}

func (r *Reconciler) setPhase(ctx context.Context, h *infrav1.YonderSSHHost) error {
	h.Status.ConsumerRef = h.Spec.ConsumerRef
	if ref := h.Spec.ConsumerRef; ref != nil {
		h.Status.Phase = infrav1.HostPhaseClaimed
		m := &infrav1.YonderSSHMachine{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: ref.Name}, m); err != nil {
			return client.IgnoreNotFound(err)
		}
		switch {
		case !m.DeletionTimestamp.IsZero():
			h.Status.Phase = infrav1.HostPhaseReleasing
		case ptr.Deref(m.Status.Initialization.Provisioned, false):
			h.Status.Phase = infrav1.HostPhaseProvisioned
		case m.Status.Bootstrap != nil && m.Status.Bootstrap.Phase == infrav1.BootstrapPhaseFailed:
			h.Status.Phase = infrav1.HostPhaseError
		case m.Status.Bootstrap != nil:
			h.Status.Phase = infrav1.HostPhaseProvisioning
		}
		return nil
	}
	c := conditions.Get(h, infrav1.YonderSSHHostReachableCondition)
	switch {
	case h.Annotations[infrav1.NeedsCleanupAnnotation] != "":
		h.Status.Phase = infrav1.HostPhaseError
	case c != nil && c.Status == metav1.ConditionFalse && c.Reason == infrav1.SSHUnreachableReason:
		h.Status.Phase = infrav1.HostPhaseUnreachable
	case c != nil && c.Status == metav1.ConditionFalse:
		h.Status.Phase = infrav1.HostPhaseError
	default:
		h.Status.Phase = infrav1.HostPhaseAvailable
	}
	return nil
}

// isHost reports whether o is a YonderSSHHost (the pass also writes Secrets, which may share a host's name).
func isHost(o client.Object) bool {
	_, ok := o.(*infrav1.YonderSSHHost)
	return ok
}
