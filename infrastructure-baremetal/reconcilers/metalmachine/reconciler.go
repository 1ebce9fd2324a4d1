// Package metalmachine reconciles YonderMetalMachines the way CAPM3 reconciles Metal3Machines: claim a
// free, available Metal3 BareMetalHost (spec.consumerRef written with optimistic concurrency before
// anything else), hand it the image and the Machine's bootstrap data once CAPI has them, report the host
// provisioned with providerID yonder-metal://<namespace>/<host>, and on delete withdraw the image, wait
// for the host to be deprovisioned (cleaned) and available again, then clear the claim. The
// BareMetalHost is inventory: it is never created or deleted here.
package metalmachine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/workload"
)

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "yonder-metal://"

// BlockMoveAnnotation makes clusterctl move wait (clusterctl.cluster.x-k8s.io/block-move).
const BlockMoveAnnotation = "clusterctl.cluster.x-k8s.io/block-move"

// ConsumerUIDIndex indexes BareMetalHosts by the UID in their consumerRef (YonderMetalMachines only).
const ConsumerUIDIndex = "metal.infrastructure.yonder.dev/consumer-uid"

// conflictRetry is how soon a pass that lost a race (a claim, a reservation) tries again.
const conflictRetry = 20 * time.Millisecond

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachines;yondermetalmachines/status;yondermetalmachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles YonderMetalMachines.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: a claim is decided on the host's latest resourceVersion, never on a
	// cache that may lag behind another replica's write.
	APIReader client.Reader
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string

	// claimMu serialises host choices within this replica, and recent remembers the claims it made that
	// the cache may not show yet, so that Machines created together spread over failure domains instead
	// of all choosing from the same stale picture. (Across replicas spreading is best effort; double
	// claims are prevented by optimistic concurrency, not by this lock.)
	claimMu sync.Mutex
	recent  map[client.ObjectKey]recentClaim
}

type recentClaim struct {
	cluster string
	// readVersion is the host's resourceVersion this replica read just before claiming it: a cache that
	// still shows it has not seen the claim yet.
	readVersion string
	at          time.Time
}

// recentClaimTTL bounds how long a claim is remembered; the cache shows it long before.
const recentClaimTTL = time.Minute

// overlayRecent marks hosts this replica claimed recently as claimed in a cached list that does not
// show the claim yet (same resourceVersion as read before the claim), and forgets the others.
func (r *Reconciler) overlayRecent(hosts []metal3v1.BareMetalHost) {
	now := time.Now()
	for k, c := range r.recent {
		if now.Sub(c.at) > recentClaimTTL {
			delete(r.recent, k)
		}
	}
	for i := range hosts {
		h := &hosts[i]
		c, ok := r.recent[client.ObjectKeyFromObject(h)]
		if !ok {
			continue
		}
		if h.ResourceVersion != c.readVersion {
			delete(r.recent, client.ObjectKeyFromObject(h))
			continue
		}
		h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: ConsumerKind}
		if h.Labels == nil {
			h.Labels = map[string]string{}
		}
		h.Labels[ClusterLabel] = c.cluster
	}
}

// SetupWithManager registers the reconciler and the consumer index on BareMetalHosts.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	log := ctrl.LoggerFrom(ctx)
	if err := mgr.GetFieldIndexer().IndexField(ctx, &metal3v1.BareMetalHost{}, ConsumerUIDIndex, consumerUID); err != nil {
		return fmt.Errorf("failed to index BareMetalHosts by consumer: %w", err)
	}
	gvk := infrav1.GroupVersion.WithKind(ConsumerKind)
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.YonderMetalMachineList{}, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("failed to create Cluster mapper: %w", err)
	}
	// The watch filter applies to Cluster API objects only: BareMetalHosts are inventory that operators
	// label for their host controller, not for a CAPI shard.
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.YonderMetalMachine{}, builder.WithPredicates(filter)).
		WithOptions(opts).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(gvk)), builder.WithPredicates(filter)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(filter, predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log))).
		// Host status matters here (provisioning state, errors): every change of a host wakes its consumer.
		Watches(&metal3v1.BareMetalHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToMachines)).
		Complete(r)
}

func consumerUID(o client.Object) []string {
	h, ok := o.(*metal3v1.BareMetalHost)
	if !ok || h.Spec.ConsumerRef == nil || h.Spec.ConsumerRef.Kind != ConsumerKind {
		return nil
	}
	return []string{string(h.Spec.ConsumerRef.UID)}
}

// hostToMachines wakes the consumer of a host and, when the host is free, the machines still waiting
// for one.
func (r *Reconciler) hostToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	h, ok := o.(*metal3v1.BareMetalHost)
	if !ok {
		return nil
	}
	if ref := h.Spec.ConsumerRef; ref != nil {
		if ref.Kind != ConsumerKind {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: h.Namespace, Name: ref.Name}}}
	}
	if !Available(h) {
		return nil
	}
	list := &infrav1.YonderMetalMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(h.Namespace)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		m := &list.Items[i]
		if m.Annotations[infrav1.HostAnnotation] == "" && m.DeletionTimestamp.IsZero() &&
			(r.WatchFilterValue == "" || m.Labels[clusterv1.WatchLabel] == r.WatchFilterValue) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		}
	}
	return reqs
}

type scope struct {
	m       *infrav1.YonderMetalMachine
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
	helper  *patch.Helper
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	log := ctrl.LoggerFrom(ctx)
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
	m := &infrav1.YonderMetalMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, m.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get owner Machine of YonderMetalMachine %s: %w", klog.KObj(m), err)
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
		return ctrl.Result{}, fmt.Errorf("failed to create patch helper for YonderMetalMachine %s: %w", klog.KObj(m), err)
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
	// clusterctl move must wait while a host is being provisioned or deprovisioned: the hand-off is in
	// flight between this machine and the host.
	claimed := m.Annotations[infrav1.HostAnnotation] != "" || m.Annotations[infrav1.ReservedHostAnnotation] != ""
	if (claimed && !ptr.Deref(m.Status.Initialization.Provisioned, false)) || (claimed && !m.DeletionTimestamp.IsZero()) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[BlockMoveAnnotation] = "true"
	} else {
		delete(m.Annotations, BlockMoveAnnotation)
	}
	owned := []string{infrav1.HostClaimedCondition, infrav1.HostProvisionedCondition, infrav1.HostReleasedCondition, clusterv1.ReadyCondition, clusterv1.PausedCondition}
	// A pass that lost a claim race sets no condition yet; summarising nothing is an error in CAPI's
	// conditions package.
	if conditions.Has(m, infrav1.HostClaimedCondition) || conditions.Has(m, infrav1.HostProvisionedCondition) {
		if err := conditions.SetSummaryCondition(m, m, clusterv1.ReadyCondition,
			conditions.ForConditionTypes{infrav1.HostClaimedCondition, infrav1.HostProvisionedCondition},
			conditions.IgnoreTypesIfMissing{infrav1.HostClaimedCondition, infrav1.HostProvisionedCondition}); err != nil {
			return fmt.Errorf("failed to summarise conditions of YonderMetalMachine %s: %w", klog.KObj(m), err)
		}
	}
	if err := s.helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: owned}); err != nil {
		return fmt.Errorf("failed to patch YonderMetalMachine %s: %w", klog.KObj(m), err)
	}
	return nil
}

func setCond(m *infrav1.YonderMetalMachine, t string, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(m, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg})
}

// claimedHost returns the host m has claimed, or nil. The annotations are hints (the claimed host, or
// the one reserved just before a crash); the host's consumerRef is the truth. Without a hint the
// consumer index finds a claim whose recording on m was lost.
func (r *Reconciler) claimedHost(ctx context.Context, m *infrav1.YonderMetalMachine) (*metal3v1.BareMetalHost, error) {
	for _, a := range []string{infrav1.HostAnnotation, infrav1.ReservedHostAnnotation} {
		name := m.Annotations[a]
		if name == "" {
			continue
		}
		h := &metal3v1.BareMetalHost{}
		// The reservation is read uncached: the claim may have been written by the previous pass.
		var reader client.Reader = r.Client
		if a == infrav1.ReservedHostAnnotation {
			reader = r.APIReader
		}
		err := reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, h)
		if err == nil && IsClaimedBy(h, m.UID) {
			return h, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("failed to get BareMetalHost %s: %w", klog.KRef(m.Namespace, name), err)
		}
	}
	list := &metal3v1.BareMetalHostList{}
	if err := r.Client.List(ctx, list, client.InNamespace(m.Namespace), client.MatchingFields{ConsumerUIDIndex: string(m.UID)}); err != nil {
		return nil, fmt.Errorf("failed to list BareMetalHosts claimed by %s: %w", klog.KObj(m), err)
	}
	for i := range list.Items {
		if IsClaimedBy(&list.Items[i], m.UID) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	host, err := r.claimedHost(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host == nil && m.Annotations[infrav1.HostAnnotation] != "" {
		// The claimed host is gone or was released by someone else: never silently claim another one
		// under a Machine that may already run a Node.
		setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.HostLostReason,
			fmt.Sprintf("BareMetalHost %s is gone or no longer claimed by this machine; delete the Machine so Cluster API replaces it", m.Annotations[infrav1.HostAnnotation]))
		return ctrl.Result{}, nil
	}
	if host == nil {
		if !ptr.Deref(s.cluster.Status.Initialization.InfrastructureProvisioned, false) {
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.WaitingForClusterInfrastructureReason, "Waiting for the Cluster's infrastructure to be provisioned")
			return ctrl.Result{}, nil
		}
		var retry bool
		if host, retry, err = r.claim(ctx, s); err != nil || host == nil {
			if retry {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, err
		}
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[infrav1.HostAnnotation] = host.Name
	delete(m.Annotations, infrav1.ReservedHostAnnotation)
	m.Status.HostRef = host.Name
	m.Status.HostState = string(host.Status.Provisioning.State)
	setCond(m, infrav1.HostClaimedCondition, metav1.ConditionTrue, infrav1.HostClaimedReason, "")
	ctx = ctrl.LoggerInto(ctx, log.WithValues("BareMetalHost", klog.KObj(host)))
	return r.reconcileHost(ctx, s, host)
}

// claim chooses a host and records the claim: first the choice on m (optimistic lock on m: only one
// replica's choice sticks), then the consumerRef on the host (optimistic lock on the host: only one
// Machine's claim sticks). retry is true when a race was lost and the next pass should come soon.
func (r *Reconciler) claim(ctx context.Context, s *scope) (host *metal3v1.BareMetalHost, retry bool, _ error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	if r.recent == nil {
		r.recent = map[client.ObjectKey]recentClaim{}
	}
	name := m.Annotations[infrav1.ReservedHostAnnotation]
	if name == "" {
		hosts := &metal3v1.BareMetalHostList{}
		if err := r.Client.List(ctx, hosts, client.InNamespace(m.Namespace)); err != nil {
			return nil, false, fmt.Errorf("failed to list BareMetalHosts in namespace %s: %w", m.Namespace, err)
		}
		r.overlayRecent(hosts.Items)
		fd := s.machine.Spec.FailureDomain
		cands, err := Candidates(hosts.Items, m.Spec.HostSelector.LabelSelector(), fd, s.cluster.Name)
		if err != nil {
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.InvalidHostSelectorReason, err.Error())
			return nil, false, nil
		}
		if len(cands) == 0 {
			setCond(m, infrav1.HostClaimedCondition, metav1.ConditionFalse, infrav1.NoHostAvailableReason,
				fmt.Sprintf("None of the %d BareMetalHosts in namespace %s is free, available (provisioning state available or ready), unpaused, without error and matching spec.hostSelector: register or inspect more hosts, or fix the failing ones", len(hosts.Items), m.Namespace))
			return nil, false, nil
		}
		name = cands[0].Name
		if err := r.setReservation(ctx, m, name); err != nil {
			if apierrors.IsConflict(err) {
				return nil, true, nil
			}
			return nil, false, err
		}
	}
	h := &metal3v1.BareMetalHost{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, h); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("failed to get BareMetalHost %s: %w", klog.KRef(m.Namespace, name), err)
		}
		h = nil
	}
	if h != nil && IsClaimedBy(h, m.UID) {
		return h, false, nil
	}
	if h == nil || !Available(h) || !selects(m, h) {
		// Taken by another Machine, gone or changed between the choice and the claim: choose again.
		log.V(4).Info("Reserved host is no longer available, choosing again", "BareMetalHost", klog.KRef(m.Namespace, name))
		if err := r.setReservation(ctx, m, ""); err != nil && !apierrors.IsConflict(err) {
			return nil, false, err
		}
		return nil, true, nil
	}
	log.Info("Claiming host", "BareMetalHost", klog.KObj(h))
	h.Spec.ConsumerRef = &corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: ConsumerKind, Namespace: m.Namespace, Name: m.Name, UID: m.UID}
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[ClusterLabel] = s.cluster.Name
	// Update carries the resourceVersion just read: of two concurrent claims only one succeeds.
	readVersion := h.ResourceVersion
	if err := r.Client.Update(ctx, h); err != nil {
		if apierrors.IsConflict(err) {
			log.V(4).Info("Lost the race for a host, trying again", "BareMetalHost", klog.KObj(h))
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("failed to claim BareMetalHost %s: %w", klog.KObj(h), err)
	}
	r.recent[client.ObjectKeyFromObject(h)] = recentClaim{cluster: s.cluster.Name, readVersion: readVersion, at: time.Now()}
	return h, false, nil
}

func selects(m *infrav1.YonderMetalMachine, h *metal3v1.BareMetalHost) bool {
	c, err := Candidates([]metal3v1.BareMetalHost{*h}, m.Spec.HostSelector.LabelSelector(), "", "")
	return err == nil && len(c) == 1
}

// setReservation records (or, with "", clears) the host m is about to claim, with optimistic
// concurrency on m so that concurrent replicas cannot record two different choices.
func (r *Reconciler) setReservation(ctx context.Context, m *infrav1.YonderMetalMachine, host string) error {
	before := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if host == "" {
		delete(m.Annotations, infrav1.ReservedHostAnnotation)
	} else {
		m.Annotations[infrav1.ReservedHostAnnotation] = host
	}
	latest := m.DeepCopy()
	if err := r.Client.Patch(ctx, latest, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		m.Annotations = before.Annotations
		return fmt.Errorf("failed to record the host reservation of YonderMetalMachine %s: %w", klog.KObj(m), err)
	}
	return nil
}

// desiredImage converts the machine's image into Metal3's.
func desiredImage(m *infrav1.YonderMetalMachine) *metal3v1.Image {
	if m.Spec.Image == nil {
		return nil
	}
	img := &metal3v1.Image{URL: m.Spec.Image.URL, Checksum: m.Spec.Image.Checksum, ChecksumType: metal3v1.ChecksumType(m.Spec.Image.ChecksumType)}
	if m.Spec.Image.Format != "" {
		img.DiskFormat = ptr.To(string(m.Spec.Image.Format))
	}
	return img
}

// handOff sets what the host needs to provision for m on h; it reports whether h changed.
func handOff(m *infrav1.YonderMetalMachine, dataSecret string, h *metal3v1.BareMetalHost) bool {
	before := h.Spec.DeepCopy()
	h.Spec.Image = desiredImage(m)
	if m.Spec.CustomDeploy != nil {
		h.Spec.CustomDeploy = &metal3v1.CustomDeploy{Method: m.Spec.CustomDeploy.Method}
	} else {
		h.Spec.CustomDeploy = nil
	}
	// The Machine's bootstrap data Secret is referenced where it is (same namespace, key "value"),
	// not copied: no second copy of a join token to keep in sync and delete.
	h.Spec.UserData = &corev1.SecretReference{Name: dataSecret, Namespace: m.Namespace}
	h.Spec.Online = true
	if m.Spec.AutomatedCleaningMode != "" {
		h.Spec.AutomatedCleaningMode = metal3v1.AutomatedCleaningMode(m.Spec.AutomatedCleaningMode)
	}
	return !equalSpec(before, &h.Spec)
}

// withdraw removes what m handed to h and asks for it to be powered off; it reports whether h changed.
func withdraw(h *metal3v1.BareMetalHost) bool {
	before := h.Spec.DeepCopy()
	h.Spec.Image, h.Spec.UserData, h.Spec.CustomDeploy, h.Spec.Online = nil, nil, nil, false
	return !equalSpec(before, &h.Spec)
}

// updateHost applies change to the latest h and writes it; a conflict (the host controller writes all
// the time) is retried on a fresh uncached read, as long as h is still claimed by uid.
func (r *Reconciler) updateHost(ctx context.Context, h *metal3v1.BareMetalHost, change func(*metal3v1.BareMetalHost) bool) (*metal3v1.BareMetalHost, error) {
	uid := h.Spec.ConsumerRef.UID
	cur := h.DeepCopy()
	first := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			cur = &metal3v1.BareMetalHost{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
				return err
			}
			if !IsClaimedBy(cur, uid) {
				return nil
			}
		}
		first = false
		if !change(cur) {
			return nil
		}
		return r.Client.Update(ctx, cur)
	})
	if err != nil {
		return nil, fmt.Errorf("failed to update BareMetalHost %s: %w", klog.KObj(h), err)
	}
	return cur, nil
}

func (r *Reconciler) reconcileHost(ctx context.Context, s *scope, host *metal3v1.BareMetalHost) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	if _, ok := host.Annotations[metal3v1.PausedAnnotation]; ok && !ptr.Deref(m.Status.Initialization.Provisioned, false) {
		setCond(m, infrav1.HostProvisionedCondition, metav1.ConditionFalse, infrav1.HostPausedReason,
			fmt.Sprintf("BareMetalHost %s carries %s; remove it to continue", host.Name, metal3v1.PausedAnnotation))
		return ctrl.Result{}, nil
	}
	if s.machine.Spec.Bootstrap.DataSecretName == nil {
		setCond(m, infrav1.HostProvisionedCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("BareMetalHost %s is claimed; waiting for the bootstrap provider to set Machine.spec.bootstrap.dataSecretName before handing it the image", host.Name))
		return ctrl.Result{}, nil
	}
	if !ptr.Deref(m.Status.Initialization.Provisioned, false) {
		data := *s.machine.Spec.Bootstrap.DataSecretName
		if handOff(m, data, host.DeepCopy()) {
			log.Info("Handing image and bootstrap data to host")
			var err error
			if host, err = r.updateHost(ctx, host, func(h *metal3v1.BareMetalHost) bool { return handOff(m, data, h) }); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	st := host.Status.Provisioning.State
	m.Status.HostState = string(st)
	if host.Status.ErrorType != "" {
		setCond(m, infrav1.HostProvisionedCondition, metav1.ConditionFalse, infrav1.HostErrorReason,
			fmt.Sprintf("BareMetalHost %s reports %s: %s. Fix the host (see its status and events); a MachineHealthCheck or deleting the Machine releases it", host.Name, host.Status.ErrorType, host.Status.ErrorMessage))
		return ctrl.Result{}, nil
	}
	if st != metal3v1.StateProvisioned {
		if !ptr.Deref(m.Status.Initialization.Provisioned, false) {
			setCond(m, infrav1.HostProvisionedCondition, metav1.ConditionFalse, infrav1.HostProvisioningReason,
				fmt.Sprintf("BareMetalHost %s is %q", host.Name, st))
		}
		return ctrl.Result{}, nil
	}
	m.Status.Addresses = Addresses(host)
	if m.Spec.ProviderID == "" {
		m.Spec.ProviderID = ProviderID(m.Namespace, host.Name)
		log.Info("Host provisioned", "providerID", m.Spec.ProviderID)
	}
	m.Status.Initialization.Provisioned = ptr.To(true)
	setCond(m, infrav1.HostProvisionedCondition, metav1.ConditionTrue, infrav1.HostProvisionedReason, "")
	return ctrl.Result{}, nil
}

// ProviderID names the host, so the Node a reused host registers again carries the same providerID.
func ProviderID(namespace, host string) string { return ProviderIDPrefix + namespace + "/" + host }

func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.m
	host, err := r.claimedHost(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host == nil {
		controllerutil.RemoveFinalizer(m, infrav1.MachineFinalizer)
		delete(m.Annotations, infrav1.ReservedHostAnnotation)
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("BareMetalHost", klog.KObj(host)))
	log = ctrl.LoggerFrom(ctx)
	if withdraw(host.DeepCopy()) {
		log.Info("Deprovisioning host")
		if host, err = r.updateHost(ctx, host, withdraw); err != nil {
			return ctrl.Result{}, err
		}
	}
	m.Status.HostState = string(host.Status.Provisioning.State)
	if _, ok := host.Annotations[metal3v1.PausedAnnotation]; ok {
		setCond(m, infrav1.HostReleasedCondition, metav1.ConditionFalse, infrav1.HostPausedReason,
			fmt.Sprintf("BareMetalHost %s carries %s; remove it so the host can be deprovisioned and released", host.Name, metal3v1.PausedAnnotation))
		return ctrl.Result{}, nil
	}
	if !Released(host) {
		if host.Status.ErrorType != "" {
			setCond(m, infrav1.HostReleasedCondition, metav1.ConditionFalse, infrav1.HostErrorReason,
				fmt.Sprintf("BareMetalHost %s failed to deprovision (%s: %s); fix the host, it is released once it is available again", host.Name, host.Status.ErrorType, host.Status.ErrorMessage))
			return ctrl.Result{}, nil
		}
		setCond(m, infrav1.HostReleasedCondition, metav1.ConditionFalse, infrav1.DeprovisioningReason,
			fmt.Sprintf("Waiting for BareMetalHost %s to be deprovisioned (cleaning: %s); it is %q", host.Name, cleaningMode(host), host.Status.Provisioning.State))
		return ctrl.Result{}, nil
	}
	// CAPI skips Node deletion while the Cluster is deleted, assuming the workload cluster goes with it;
	// an attached one stays, and the host's next Machine would find its Node's providerID taken. The host
	// is deprovisioned (powered off) by now, so no kubelet registers the Node again.
	if s.cluster.DeletionTimestamp != nil && m.Spec.ProviderID != "" {
		workload.DeleteStaleNodes(ctx, r.Client, client.ObjectKeyFromObject(s.cluster), m.Spec.ProviderID, "yonder-metal-manager")
	}
	if err := r.release(ctx, host); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Released host")
	setCond(m, infrav1.HostReleasedCondition, metav1.ConditionTrue, infrav1.ReleasedReason, "")
	controllerutil.RemoveFinalizer(m, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}

func cleaningMode(h *metal3v1.BareMetalHost) string {
	if h.Spec.AutomatedCleaningMode == "" {
		return string(metal3v1.CleaningModeMetadata)
	}
	return string(h.Spec.AutomatedCleaningMode)
}

// release clears the claim on host (no-op once it is no longer claimed by the same consumer).
func (r *Reconciler) release(ctx context.Context, host *metal3v1.BareMetalHost) error {
	_, err := r.updateHost(ctx, host, func(h *metal3v1.BareMetalHost) bool {
		withdraw(h)
		h.Spec.ConsumerRef = nil
		delete(h.Labels, ClusterLabel)
		return true
	})
	if err != nil {
		return fmt.Errorf("failed to release BareMetalHost %s: %w", klog.KObj(host), err)
	}
	return nil
}
