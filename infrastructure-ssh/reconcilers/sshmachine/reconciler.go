// Package sshmachine reconciles YonderSSHMachines: claim a free YonderSSHHost (recorded on the host
// before any SSH work), run the Machine's cloud-init bootstrap data on it over SSH as a run tracked on
// the host, set providerID, and on delete clean the host and release it back to the inventory.
package sshmachine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/claim"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/workload"
)

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "yonder-ssh://"

// SSHTimeout bounds the SSH work of one reconcile (cleanup commands included).
const SSHTimeout = 5 * time.Minute

// BlockMoveAnnotation makes clusterctl move wait (clusterctl.cluster.x-k8s.io/block-move).
const BlockMoveAnnotation = "clusterctl.cluster.x-k8s.io/block-move"

// ClaimIDAnnotation records the identity a YonderSSHMachine claims its host and runs its bootstrap under:
// its UID when it first reserved a host. `clusterctl move` recreates the object with a new UID but keeps
// annotations, so the moved Machine still recognises its claim (the host's spec.consumerRef.uid) and the
// run record on the host, instead of seeing a lost claim or bootstrapping a provisioned host again.
const ClaimIDAnnotation = "ssh.infrastructure.yonder.dev/claim-id"

// claimID is the identity m claims and bootstraps under (see ClaimIDAnnotation).
func claimID(m *infrav1.YonderSSHMachine) types.UID {
	if id := m.Annotations[ClaimIDAnnotation]; id != "" {
		return types.UID(id)
	}
	return m.UID
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachines;yondersshmachines/status;yondersshmachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles YonderSSHMachines.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: looking up an existing claim must not trust a cache that may lag behind
	// this controller's own last write.
	APIReader client.Reader
	// Dialer opens SSH connections.
	Dialer sshexec.Dialer
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
	// PollInterval is how often a running bootstrap is checked (default 10s).
	PollInterval time.Duration
	// RetryInterval is the first wait after an SSH failure; it doubles per attempt up to 5m (default 15s).
	RetryInterval time.Duration
	// CleanupRetries bounds cleanup attempts on delete before the operator must act (default 5).
	CleanupRetries int32
	// DefaultBootstrapTimeout applies when spec.bootstrapTimeout is empty (default 30m).
	DefaultBootstrapTimeout time.Duration
}

func (r *Reconciler) defaults() {
	if r.PollInterval == 0 {
		r.PollInterval = 10 * time.Second
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = 15 * time.Second
	}
	if r.CleanupRetries == 0 {
		r.CleanupRetries = 5
	}
	if r.DefaultBootstrapTimeout == 0 {
		r.DefaultBootstrapTimeout = 30 * time.Minute
	}
	if r.Dialer == nil {
		r.Dialer = sshexec.SSHDialer{}
	}
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	r.defaults()
	log := ctrl.LoggerFrom(ctx)
	gvk := infrav1.GroupVersion.WithKind("YonderSSHMachine")
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.YonderSSHMachineList{}, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("failed to create Cluster mapper: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.YonderSSHMachine{}).
		WithOptions(opts).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(gvk))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log))).
		// Only spec, label and annotation changes of hosts matter here (claims, releases, keys); the
		// host controller's frequent status writes would otherwise wake machines for nothing.
		Watches(&infrav1.YonderSSHHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToMachines),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Complete(r)
}

// hostToMachines wakes the consumer of a host and, when the host is free, the machines still waiting
// for one.
func (r *Reconciler) hostToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	h, ok := o.(*infrav1.YonderSSHHost)
	if !ok {
		return nil
	}
	if h.Spec.ConsumerRef != nil {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.ConsumerRef.Name}}}
	}
	if !claim.Available(h) {
		return nil
	}
	list := &infrav1.YonderSSHMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(h.Namespace)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		m := &list.Items[i]
		if m.Annotations[infrav1.HostAnnotation] == "" && m.DeletionTimestamp.IsZero() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		}
	}
	return reqs
}

type scope struct {
	m       *infrav1.YonderSSHMachine
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
	helper  *patch.Helper
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	r.defaults()
	log := ctrl.LoggerFrom(ctx)
	m := &infrav1.YonderSSHMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, m.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get owner Machine of YonderSSHMachine %s: %w", klog.KObj(m), err)
	}
	if machine == nil {
		log.V(4).Info("Waiting for the Machine owner reference")
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("Machine", klog.KObj(machine)))
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, machine.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) || errors.Is(err, util.ErrNoCluster) {
			log.V(4).Info("Waiting for the Cluster")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get Cluster of Machine %s: %w", klog.KObj(machine), err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KObj(cluster)))

	if m.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, m, infrav1.MachineFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	} else if !controllerutil.ContainsFinalizer(m, infrav1.MachineFinalizer) {
		return ctrl.Result{}, nil
	}
	h, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create patch helper for YonderSSHMachine %s: %w", klog.KObj(m), err)
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, m); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	s := &scope{m: m, machine: machine, cluster: cluster, helper: h}
	defer func() {
		if err := r.patch(ctx, s); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
		}
	}()
	if !m.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func (r *Reconciler) patch(ctx context.Context, s *scope) error {
	m := s.m
	// clusterctl move must wait while a host is being provisioned or cleaned: the state of that work
	// lives partly on the host and in this controller's status.
	provisioning := m.Annotations[infrav1.HostAnnotation] != "" && !ptr.Deref(m.Status.Initialization.Provisioned, false)
	if provisioning || !m.DeletionTimestamp.IsZero() {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[BlockMoveAnnotation] = "true"
	} else {
		delete(m.Annotations, BlockMoveAnnotation)
	}
	owned := []string{infrav1.HostClaimedCondition, infrav1.BootstrapExecutedCondition, infrav1.HostCleanedCondition, clusterv1.ReadyCondition, clusterv1.PausedCondition}
	// A pass that lost a claim race sets no condition yet; summarising nothing is an error in CAPI's
	// conditions package, and returning it would put the Machine on an ever longer error backoff while
	// controllers race (seen: a Machine idle for minutes with two replicas).
	if conditions.Has(m, infrav1.HostClaimedCondition) || conditions.Has(m, infrav1.BootstrapExecutedCondition) {
		if err := conditions.SetSummaryCondition(m, m, clusterv1.ReadyCondition,
			conditions.ForConditionTypes{infrav1.HostClaimedCondition, infrav1.BootstrapExecutedCondition},
			conditions.IgnoreTypesIfMissing{infrav1.HostClaimedCondition, infrav1.BootstrapExecutedCondition}); err != nil {
			return fmt.Errorf("failed to summarise conditions of YonderSSHMachine %s: %w", klog.KObj(m), err)
		}
	}
	if err := s.helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: owned}); err != nil {
		return fmt.Errorf("failed to patch YonderSSHMachine %s: %w", klog.KObj(m), err)
	}
	return nil
}

// claimedHost returns the host m has claimed, or nil. The annotation is a hint; the host's consumerRef
// is the truth. Without the hint (a claim recorded just before a crash) the hosts are listed
// uncached by the consumer label.
func (r *Reconciler) claimedHost(ctx context.Context, m *infrav1.YonderSSHMachine) (*infrav1.YonderSSHHost, error) {
	if name := m.Annotations[infrav1.HostAnnotation]; name != "" {
		h := &infrav1.YonderSSHHost{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, h)
		if err == nil && claim.IsClaimedBy(h, claimID(m)) {
			return h, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("failed to get YonderSSHHost %s: %w", klog.KRef(m.Namespace, name), err)
		}
	}
	list := &infrav1.YonderSSHHostList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(m.Namespace), client.MatchingLabels{infrav1.ConsumerUIDLabel: string(claimID(m))}); err != nil {
		return nil, fmt.Errorf("failed to list YonderSSHHosts claimed by %s: %w", klog.KObj(m), err)
	}
	for i := range list.Items {
		if claim.IsClaimedBy(&list.Items[i], claimID(m)) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

func setCond(m *infrav1.YonderSSHMachine, t string, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(m, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg})
}

func (r *Reconciler) backoff(attempt int32) time.Duration {
	d := r.RetryInterval
	for i := int32(1); i < attempt && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	host, err := r.claimedHost(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host == nil && m.Annotations[infrav1.HostAnnotation] != "" {
		// The claimed host is gone or was released by someone else: never silently re-provision.
		setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.HostDeletedReason,
			fmt.Sprintf("YonderSSHHost %s is no longer claimed by this machine; delete the Machine so Cluster API replaces it", m.Annotations[infrav1.HostAnnotation]))
		return ctrl.Result{}, nil
	}
	if host == nil {
		if !ptr.Deref(s.cluster.Status.Initialization.InfrastructureProvisioned, false) {
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, "WaitingForClusterInfrastructure", "Waiting for the Cluster's infrastructure to be provisioned")
			return ctrl.Result{}, nil
		}
		if s.machine.Spec.Bootstrap.DataSecretName == nil {
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapDataReason, "Waiting for the bootstrap provider to set Machine.spec.bootstrap.dataSecretName")
			setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapDataReason, "Waiting for bootstrap data")
			return ctrl.Result{}, nil
		}
		var conflict bool
		if host, conflict, err = r.claim(ctx, s); err != nil || host == nil {
			if conflict {
				return ctrl.Result{RequeueAfter: 20 * time.Millisecond}, nil
			}
			return ctrl.Result{RequeueAfter: r.RetryInterval}, err
		}
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[infrav1.HostAnnotation] = host.Name
	m.Annotations[ClaimIDAnnotation] = string(claimID(m))
	m.Status.HostRef = host.Name
	setCond(m, infrav1.HostClaimedCondition, metav1.ConditionTrue, infrav1.HostClaimedReason, "")
	m.Status.Addresses = addresses(host)
	if ptr.Deref(m.Status.Initialization.Provisioned, false) && m.Spec.ProviderID != "" {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("YonderSSHHost", klog.KObj(host)))
	return r.reconcileBootstrap(ctx, s, host)
}

func (r *Reconciler) claim(ctx context.Context, s *scope) (*infrav1.YonderSSHHost, bool, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	cons := claim.Consumer{Name: m.Name, UID: claimID(m), ClusterName: s.cluster.Name}
	name := m.Annotations[infrav1.ReservedHostAnnotation]
	if name == "" {
		hosts := &infrav1.YonderSSHHostList{}
		if err := r.Client.List(ctx, hosts, client.InNamespace(m.Namespace)); err != nil {
			return nil, false, fmt.Errorf("failed to list YonderSSHHosts in namespace %s: %w", m.Namespace, err)
		}
		fd := ptr.Deref(&s.machine.Spec.FailureDomain, "")
		cands, err := claim.Candidates(hosts.Items, m.Spec.HostSelector.LabelSelector(), fd, cons)
		if err != nil {
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.NoHostAvailableReason, err.Error())
			return nil, false, nil
		}
		if len(cands) == 0 {
			msg := "No free YonderSSHHost matches spec.hostSelector"
			if fd != "" {
				msg += " in failure domain " + fd
			}
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.NoHostAvailableReason, msg+": register more hosts, or release or clean existing ones")
			return nil, false, nil
		}
		name = cands[0].Name
		// Reserve first: a conflict means another replica is deciding for this Machine right now.
		if err := r.setReservation(ctx, m, name); err != nil {
			if apierrors.IsConflict(err) {
				return nil, true, nil
			}
			return nil, false, err
		}
	}
	h := &infrav1.YonderSSHHost{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, h); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("failed to get YonderSSHHost %s: %w", klog.KRef(m.Namespace, name), err)
		}
		h = nil
	}
	if h != nil && claim.IsClaimedBy(h, claimID(m)) {
		return h, false, nil
	}
	if h == nil || !claim.Available(h) {
		// Taken by another Machine (or gone) between the choice and the claim: choose again.
		log.V(4).Info("Reserved host is no longer available, choosing again", "YonderSSHHost", klog.KRef(m.Namespace, name))
		if err := r.setReservation(ctx, m, ""); err != nil && !apierrors.IsConflict(err) {
			return nil, false, err
		}
		return nil, true, nil
	}
	log.Info("Claiming host", "YonderSSHHost", klog.KObj(h))
	if err := claim.Claim(ctx, r.Client, h, cons); err != nil {
		if apierrors.IsConflict(err) {
			// Another claim or a status write raced us on the host; the next pass re-reads it.
			log.V(4).Info("Lost the race for a host, trying again", "YonderSSHHost", klog.KObj(h))
			return nil, true, nil
		}
		return nil, false, err
	}
	claimed := h.DeepCopy()
	claimed.Spec.ConsumerRef = cons.Ref()
	return claimed, false, nil
}

// setReservation records (or, with "", clears) the host m is about to claim, with optimistic
// concurrency on m so that concurrent replicas cannot record two different choices.
func (r *Reconciler) setReservation(ctx context.Context, m *infrav1.YonderSSHMachine, host string) error {
	before := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if host == "" {
		delete(m.Annotations, infrav1.ReservedHostAnnotation)
	} else {
		m.Annotations[infrav1.ReservedHostAnnotation] = host
		// Durable before the claim is written to the host, so a claim is never made under an identity
		// that a move could lose.
		m.Annotations[ClaimIDAnnotation] = string(claimID(m))
	}
	latest := m.DeepCopy()
	if err := r.Client.Patch(ctx, latest, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		m.Annotations = before.Annotations
		return fmt.Errorf("failed to record the host reservation of YonderSSHMachine %s: %w", klog.KObj(m), err)
	}
	return nil
}

func addresses(h *infrav1.YonderSSHHost) []clusterv1.MachineAddress {
	t := clusterv1.MachineInternalDNS
	if _, err := netip.ParseAddr(h.Spec.Address); err == nil {
		t = clusterv1.MachineInternalIP
	}
	out := []clusterv1.MachineAddress{{Type: t, Address: h.Spec.Address}}
	if h.Status.Facts != nil && h.Status.Facts.Hostname != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: h.Status.Facts.Hostname})
	}
	return out
}

func (r *Reconciler) connect(ctx context.Context, m *infrav1.YonderSSHMachine, host *infrav1.YonderSSHHost, condType string) (sshexec.Executor, string, string) {
	t, err := hostconn.Target(ctx, r.Client, host, nil)
	if err == nil {
		var e sshexec.Executor
		if e, err = r.Dialer.Dial(ctx, t); err == nil {
			return e, "", ""
		}
	}
	reason, msg := hostconn.Reason(err, host)
	setCond(m, condType, metav1.ConditionFalse, reason, msg)
	return nil, reason, msg
}

func (r *Reconciler) reconcileBootstrap(ctx context.Context, s *scope, host *infrav1.YonderSSHHost) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	if b := m.Status.Bootstrap; b != nil && b.Phase == infrav1.BootstrapPhaseFailed {
		// Terminal: the run is not repeated blindly; remediation replaces the Machine.
		return ctrl.Result{}, nil
	}
	// No SSH step may hold a worker for long: a hung remote command is cut off and retried.
	sctx, cancel := context.WithTimeout(ctx, SSHTimeout)
	defer cancel()
	e, reason, _ := r.connect(sctx, m, host, infrav1.BootstrapExecutedCondition)
	if e == nil {
		log.Info("Cannot reach host, retrying", "reason", reason)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	defer func() { _ = e.Close() }()
	runID := string(claimID(m))
	st, err := remote.State(sctx, e, runID)
	if err != nil {
		setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, infrav1.SSHUnreachableReason, err.Error())
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	if !st.Started {
		return r.startBootstrap(sctx, s, host, e)
	}
	if m.Status.Bootstrap == nil {
		// Status was lost (restart mid-write, or moved): the host's record is authoritative.
		m.Status.Bootstrap = &infrav1.BootstrapStatus{RunID: runID, Phase: infrav1.BootstrapPhaseRunning, StartedTime: ptr.To(metav1.Now())}
	}
	b := m.Status.Bootstrap
	if !st.Finished {
		timeout := r.DefaultBootstrapTimeout
		if m.Spec.BootstrapTimeout != nil {
			timeout = m.Spec.BootstrapTimeout.Duration
		}
		if b.StartedTime != nil && time.Since(b.StartedTime.Time) > timeout {
			return r.bootstrapFailed(sctx, s, host, e, fmt.Sprintf("did not finish within %s", timeout))
		}
		setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, infrav1.BootstrapRunningReason,
			fmt.Sprintf("Bootstrap is running on YonderSSHHost %s (log: %s/%s/log)", host.Name, remote.RunsDir, runID))
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	b.ExitCode = ptr.To(int32(st.ExitCode)) //nolint:gosec // exit codes are 0-255
	if st.ExitCode != 0 || !st.Sentinel {
		msg := fmt.Sprintf("exited with status %d", st.ExitCode)
		if !st.Sentinel {
			msg += " without writing " + remote.SentinelPath
		}
		return r.bootstrapFailed(sctx, s, host, e, msg)
	}
	if err := remote.Finish(sctx, e, runID); err != nil {
		log.Info("Failed to remove the bootstrap script from the host", "err", err.Error())
	}
	b.Phase = infrav1.BootstrapPhaseSucceeded
	b.FinishedTime = ptr.To(metav1.Now())
	m.Spec.ProviderID = providerID(m, host)
	m.Status.Initialization.Provisioned = ptr.To(true)
	setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionTrue, infrav1.BootstrapSucceededReason, "")
	log.Info("Provisioned host", "providerID", m.Spec.ProviderID)
	return ctrl.Result{}, nil
}

func (r *Reconciler) bootstrapFailed(ctx context.Context, s *scope, host *infrav1.YonderSSHHost, e sshexec.Executor, why string) (ctrl.Result, error) {
	m := s.m
	b := m.Status.Bootstrap
	b.Phase = infrav1.BootstrapPhaseFailed
	b.FinishedTime = ptr.To(metav1.Now())
	if t, err := remote.LogTail(ctx, e, b.RunID, 2048); err == nil {
		b.OutputTail = t
	}
	setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason,
		fmt.Sprintf("Bootstrap on YonderSSHHost %s %s; see status.bootstrap.outputTail and %s/%s/log on the host; delete the Machine (or let a MachineHealthCheck remediate it) to release and clean the host",
			host.Name, why, remote.RunsDir, b.RunID))
	ctrl.LoggerFrom(ctx).Info("Bootstrap failed", "reason", why)
	return ctrl.Result{}, nil
}

func (r *Reconciler) startBootstrap(ctx context.Context, s *scope, host *infrav1.YonderSSHHost, e sshexec.Executor) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	if b := m.Status.Bootstrap; b != nil && b.Phase != "" {
		// We recorded a start, yet the host has no run: it was cleaned or reinstalled under us.
		return r.bootstrapFailed(ctx, s, host, e, "run record disappeared from the host")
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: m.Namespace, Name: *s.machine.Spec.Bootstrap.DataSecretName}
	if err := r.Client.Get(ctx, key, secret); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get bootstrap data Secret %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	if f, ok := secret.Data["format"]; ok && string(f) != "cloud-config" {
		setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, infrav1.BootstrapDataUnsupportedReason,
			fmt.Sprintf("Bootstrap data Secret %s has format %q; only cloud-config is executed over SSH", key.Name, string(f)))
		return ctrl.Result{}, nil
	}
	hostname := host.Name
	if out, _, err := e.Run(ctx, "hostname", nil); err == nil && len(out) > 0 {
		hostname = string(trimNL(out))
	}
	cfg, err := cloudinit.Parse(secret.Data["value"], cloudinit.Options{Hostname: hostname})
	if err != nil {
		var u *cloudinit.UnsupportedError
		reason := infrav1.BootstrapFailedReason
		if errors.As(err, &u) {
			reason = infrav1.BootstrapDataUnsupportedReason
		}
		setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, reason,
			fmt.Sprintf("Bootstrap data Secret %s cannot be executed: %v. Use a bootstrap provider that emits write_files and runcmd only", key.Name, err))
		return ctrl.Result{}, nil
	}
	runID := string(claimID(m))
	m.Status.Bootstrap = &infrav1.BootstrapStatus{RunID: runID, Phase: infrav1.BootstrapPhaseRunning, StartedTime: ptr.To(metav1.Now())}
	setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, infrav1.BootstrapRunningReason,
		fmt.Sprintf("Bootstrap is running on YonderSSHHost %s (log: %s/%s/log)", host.Name, remote.RunsDir, runID))
	// Record the start BEFORE starting: a machine without status.bootstrap has never run anything on
	// its host, which lets deletion release such a host without SSH.
	if err := r.patch(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Starting bootstrap on host")
	script := remote.ProviderIDPrelude(providerID(m, host)) + cfg.Script()
	if _, err := remote.Start(ctx, e, runID, script); err != nil {
		reason, msg := hostconn.Reason(err, host)
		setCond(m, infrav1.BootstrapExecutedCondition, metav1.ConditionFalse, reason, msg)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// providerID names the host, so the Node a reused host registers again carries the same providerID.
func providerID(m *infrav1.YonderSSHMachine, host *infrav1.YonderSSHHost) string {
	return ProviderIDPrefix + m.Namespace + "/" + host.Name
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.DeletingReason, "")
	host, err := r.claimedHost(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host == nil {
		controllerutil.RemoveFinalizer(m, infrav1.MachineFinalizer)
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("YonderSSHHost", klog.KObj(host)))
	log = ctrl.LoggerFrom(ctx)
	needsCleanup := ""
	switch {
	case m.Annotations[infrav1.SkipCleanupAnnotation] == "true":
		log.Info("Releasing host without cleanup, as the operator asked")
		needsCleanup = m.Name
		setCond(m, infrav1.HostCleanedCondition, metav1.ConditionFalse, infrav1.CleanupSkippedReason, "Released without cleanup by "+infrav1.SkipCleanupAnnotation)
	case m.Status.Bootstrap == nil:
		// Nothing ever ran on the host (the start is recorded before it happens).
		log.V(4).Info("Releasing host that never ran a bootstrap")
	case conditions.IsTrue(m, infrav1.HostCleanedCondition):
		// Cleaned already; only the release failed last time.
	default:
		if res, done := r.cleanup(ctx, m, host); !done {
			return res, nil
		}
	}
	if needsCleanup == "" && m.Status.Bootstrap != nil && s.cluster.DeletionTimestamp != nil {
		// CAPI skips Node deletion while the Cluster is deleted; the attached workload cluster stays.
		workload.DeleteStaleNodes(ctx, r.Client, client.ObjectKeyFromObject(s.cluster), m.Spec.ProviderID, "yonder-ssh-manager")
	}
	if err := claim.Release(ctx, r.Client, r.APIReader, host, claimID(m), needsCleanup); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to release YonderSSHHost %s: %w", klog.KObj(host), err)
	}
	log.Info("Released host")
	controllerutil.RemoveFinalizer(m, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}

func (r *Reconciler) cleanup(ctx context.Context, m *infrav1.YonderSSHMachine, host *infrav1.YonderSSHHost) (ctrl.Result, bool) {
	log := ctrl.LoggerFrom(ctx)
	if m.Annotations[infrav1.RetryCleanupAnnotation] != "" {
		delete(m.Annotations, infrav1.RetryCleanupAnnotation)
		m.Status.CleanupAttempts = 0
	}
	if m.Status.CleanupAttempts >= r.CleanupRetries {
		// Retries are exhausted: the condition says what to do; the annotation wakes us up.
		return ctrl.Result{}, false
	}
	sctx, cancel := context.WithTimeout(ctx, SSHTimeout)
	defer cancel()
	e, _, msg := r.connect(sctx, m, host, infrav1.HostCleanedCondition)
	var err error
	if e != nil {
		log.Info("Cleaning host")
		err = remote.Cleanup(sctx, e, string(claimID(m)), host.Spec.Cleanup.Commands)
		_ = e.Close()
		if err == nil {
			setCond(m, infrav1.HostCleanedCondition, metav1.ConditionTrue, infrav1.CleanedReason, "")
			return ctrl.Result{}, true
		}
		msg = err.Error()
	}
	m.Status.CleanupAttempts++
	full := fmt.Sprintf("Cleanup of YonderSSHHost %s failed (attempt %d of %d): %s", host.Name, m.Status.CleanupAttempts, r.CleanupRetries, msg)
	if m.Status.CleanupAttempts >= r.CleanupRetries {
		full += fmt.Sprintf(". Retries exhausted: fix the host and set annotation %s=true on this YonderSSHMachine to try again, or set %s=true to release the host WITHOUT cleanup (the host is then marked %s and stays out of the pool until you remove that annotation)", infrav1.RetryCleanupAnnotation, infrav1.SkipCleanupAnnotation, infrav1.NeedsCleanupAnnotation)
	}
	setCond(m, infrav1.HostCleanedCondition, metav1.ConditionFalse, infrav1.CleanupFailedReason, full)
	log.Info("Cleanup failed", "attempt", m.Status.CleanupAttempts)
	if m.Status.CleanupAttempts >= r.CleanupRetries {
		return ctrl.Result{}, false
	}
	return ctrl.Result{RequeueAfter: r.backoff(m.Status.CleanupAttempts)}, false
}
