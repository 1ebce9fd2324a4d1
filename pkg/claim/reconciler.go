// Package claim is the one claim reconciler of Yonder's infrastructure providers: an infrastructure
// machine (YonderSSHMachine, YonderMetalMachine) reserves a free inventory host (YonderSSHHost, Metal3
// BareMetalHost) on itself with an optimistic lock, claims it on the host with an optimistic lock, hands
// it off, and on deletion withdraws what it handed over and releases the host back to the pool. The
// inventory is never created or deleted here. Each provider supplies a small Adapter: its kinds, API
// keys and conditions, and its own hand-off (SSH bootstrap, Metal3 image) and withdrawal (SSH cleanup,
// deprovisioning). The shape follows cluster-api-ipam-provider-in-cluster's generic claim reconciler.
//
// Every step is safe to repeat and to be cut off at any line: the state lives on the machine (the
// reservation, claim identity and host annotations) and on the host (its consumer), and a restarted or
// second controller replica resumes from them. Claims survive `clusterctl move` (see ID).
package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	"github.com/yonder-dev/yonder/pkg/condevents"
)

// ConflictRetry is how soon a pass that lost a race (a reservation, a claim) tries again.
const ConflictRetry = 20 * time.Millisecond

// Reconciler reconciles the infrastructure machines of one provider through its Adapter.
type Reconciler[M Machine, H client.Object] struct {
	Client client.Client
	// APIReader reads uncached: a reserved host, a machine's claim confirmation and a fence see the latest
	// writes, never a cache that may lag behind another replica's (or this controller's own last) write. A
	// host chosen from the cache is claimed at the resourceVersion it was chosen at: a claim on an
	// outdated view conflicts instead of landing.
	APIReader client.Reader
	// WatchFilterValue limits reconciliation to Cluster API objects labelled
	// cluster.x-k8s.io/watch-filter=<value>. Hosts are inventory and need no such label.
	WatchFilterValue string
	Adapter          Adapter[M, H]
	// Recorder records Events on machines and hosts (observe.go); SetupWithManager sets the manager's.
	Recorder record.EventRecorder

	// claimMu serialises host choices within this replica; recent remembers its claims the cache may
	// not show yet.
	claimMu sync.Mutex
	recent  recentClaims
	// written is the resourceVersion of this replica's last write of each machine (written.go).
	written WrittenVersions
}

// Scope is one reconcile of one machine.
type Scope[M Machine, H client.Object] struct {
	Machine     M
	CAPIMachine *clusterv1.Machine
	Cluster     *clusterv1.Cluster
	// Host is the claimed host (set for Provision and Withdraw).
	Host H

	patch func(ctx context.Context) error
	// pendingFinalizer is the finalizer added to Machine in memory and not written yet ("" once written):
	// the reservation carries it.
	pendingFinalizer string
	// rebase tells the deferred patch that o (the machine as just written outside it: a reservation) is
	// what the API server holds, so that patch sends only what differs from o.
	rebase func(o client.Object) error
}

// Patch writes the machine now (as the end of the reconcile will), e.g. to record that slow external
// work is about to start before starting it.
func (s *Scope[M, H]) Patch(ctx context.Context) error { return s.patch(ctx) }

// DataSecretName returns the Machine's bootstrap data Secret ("" until the bootstrap provider set it).
func (s *Scope[M, H]) DataSecretName() string {
	if n := s.CAPIMachine.Spec.Bootstrap.DataSecretName; n != nil {
		return *n
	}
	return ""
}

// ClaimID returns the machine's claim identity.
func (s *Scope[M, H]) ClaimID(keys Keys) string { return string(ID(s.Machine, keys.ClaimID)) }

// consumerIndex is the field index of hosts by the claim identity of their consumer.
func (r *Reconciler[M, H]) consumerIndex() string {
	return "claim.yonder.dev/" + r.Adapter.Spec().MachineKind + "-claim-id"
}

// SetupWithManager registers the reconciler, the host index by consumer and the watches: the
// infrastructure machines, their Machines and Clusters (watch-filtered), and the hosts (a host's change
// wakes its consumer; a host that becomes free wakes the machines still waiting for one, so nothing
// polls for free hosts).
func (r *Reconciler[M, H]) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor(r.Adapter.Spec().ControllerName) //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}
	r.countInventory(mgr.GetClient())
	a := r.Adapter
	if err := mgr.GetFieldIndexer().IndexField(ctx, a.NewHost(), r.consumerIndex(), r.indexConsumer); err != nil {
		return fmt.Errorf("failed to index %ss by consumer: %w", a.HostKind(), err)
	}
	log := ctrl.LoggerFrom(ctx)
	gvk, err := mgr.GetClient().GroupVersionKindFor(a.NewMachine())
	if err != nil {
		return fmt.Errorf("failed to find the kind of %s: %w", a.Spec().MachineKind, err)
	}
	list, err := mgr.GetScheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return fmt.Errorf("failed to find the list kind of %s: %w", a.Spec().MachineKind, err)
	}
	machines, ok := list.(client.ObjectList)
	if !ok {
		return fmt.Errorf("%sList is not a list", a.Spec().MachineKind)
	}
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), machines, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("failed to create the Cluster mapper of %ss: %w", a.Spec().MachineKind, err)
	}
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)
	return ctrl.NewControllerManagedBy(mgr).
		For(a.NewMachine(), builder.WithPredicates(filter)).
		WithOptions(opts).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(gvk)), builder.WithPredicates(filter)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(filter, predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log))).
		Watches(a.NewHost(), handler.EnqueueRequestsFromMapFunc(r.hostToMachines), builder.WithPredicates(a.Spec().HostPredicates...)).
		Complete(r)
}

func (r *Reconciler[M, H]) indexConsumer(o client.Object) []string {
	h, ok := o.(H)
	if !ok {
		return nil
	}
	if c := r.Adapter.ConsumerOf(h); c != nil && c.ID != "" {
		return []string{string(c.ID)}
	}
	return nil
}

// hostToMachines wakes the consumer of a host and, when the host is free to claim, the machines of its
// namespace still waiting for one.
func (r *Reconciler[M, H]) hostToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	h, ok := o.(H)
	if !ok {
		return nil
	}
	if c := r.Adapter.ConsumerOf(h); c != nil {
		if c.Name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: h.GetNamespace(), Name: c.Name}}}
	}
	if !r.Adapter.Available(h) {
		return nil
	}
	ms, err := List(ctx, r.Client, r.Adapter.NewMachine(), client.InNamespace(h.GetNamespace()))
	if err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, m := range ms {
		if m.GetAnnotations()[r.Adapter.Spec().Keys.Host] == "" && m.GetDeletionTimestamp().IsZero() &&
			(r.WatchFilterValue == "" || m.GetLabels()[clusterv1.WatchLabel] == r.WatchFilterValue) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		}
	}
	return reqs
}

// Reconcile implements reconcile.Reconciler with CAPI's infrastructure machine skeleton: owner Machine,
// Cluster, finalizer, pause, a deferred patch, then normal or delete.
func (r *Reconciler[M, H]) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
	a := r.Adapter
	log := ctrl.LoggerFrom(ctx)
	m := a.NewMachine()
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Forget(req.NamespacedName)
			return ctrl.Result{}, r.releaseOrphans(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if r.written.Stale(m) {
		// The watch event of this replica's last write is on its way and wakes the machine again.
		log.V(4).Info("Waiting for the cache to show this controller's last write")
		return ctrl.Result{RequeueAfter: StaleRetry}, nil
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, metav1.ObjectMeta{Namespace: m.GetNamespace(), OwnerReferences: m.GetOwnerReferences()})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get owner Machine of %s %s: %w", a.Spec().MachineKind, klog.KObj(m), err)
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
	// The machine's writes go through writer, which remembers the versions written (written.go).
	writer := RecordingClient{Client: r.Client, Written: &r.written}
	isPaused := ptr.Deref(cluster.Spec.Paused, false) || annotations.HasPaused(m)
	deferFinalizer := false
	if m.GetDeletionTimestamp().IsZero() {
		if !controllerutil.ContainsFinalizer(m, a.Spec().Finalizer) && !isPaused && r.unclaimed(m) {
			// The finalizer goes out with this pass's first write (the reservation, or the patch at its
			// end) instead of in a write and a pass of its own: a machine that never reserved a host
			// holds nothing a deletion would have to release, and the reservation carries it before any
			// claim reaches a host.
			deferFinalizer = true
		} else if added, err := finalizers.EnsureFinalizer(ctx, writer, m, a.Spec().Finalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	} else if !controllerutil.ContainsFinalizer(m, a.Spec().Finalizer) {
		return ctrl.Result{}, nil
	}
	// base is the machine as the API server holds it; each write sends what m changed since.
	base := m.DeepCopyObject().(M) //nolint:forcetypeassert // a copy of m has m's type
	s := &Scope[M, H]{Machine: m, CAPIMachine: machine, Cluster: cluster}
	if deferFinalizer {
		controllerutil.AddFinalizer(m, a.Spec().Finalizer)
		s.pendingFinalizer = a.Spec().Finalizer
	}
	if !isPaused {
		// Not paused: the condition (as CAPI's paused package words it) goes out with this pass's one
		// status patch, instead of in a write of its own that only wakes the machine for another pass.
		// EnsurePausedCondition then finds it set and writes nothing.
		conditions.Set(m, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason, ObservedGeneration: m.GetGeneration()})
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, writer, cluster, m); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	s.patch = func(ctx context.Context) error {
		if err := r.patch(ctx, writer, base, m); err != nil {
			return err
		}
		// The next patch of this pass (Scope.Patch before slow work, then the deferred one) starts from
		// what was just written, instead of sending all of it again.
		base = m.DeepCopyObject().(M) //nolint:forcetypeassert // a copy of m has m's type
		s.pendingFinalizer = ""
		return nil
	}
	s.rebase = func(o client.Object) error {
		written, ok := o.DeepCopyObject().(M)
		if !ok {
			return fmt.Errorf("%s %s was written as %T", a.Spec().MachineKind, klog.KObj(m), o)
		}
		// m stands for o plus this pass's changes: at o's version, and with the managed fields the server
		// recorded for that write, so no patch carries a stale version or sends the old managed fields back.
		m.SetResourceVersion(o.GetResourceVersion())
		m.SetManagedFields(o.GetManagedFields())
		base = written
		s.pendingFinalizer = ""
		return nil
	}
	before := slices.Clone(m.GetConditions())
	defer func() {
		if err := s.patch(ctx); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
			return
		}
		condevents.Record(r.recorder(), m, conditionEvents(a.Spec().Conditions), before, m.GetConditions())
	}()
	if !m.GetDeletionTimestamp().IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// patch writes m: clusterctl's block-move annotation (setBlockMove), the Ready summary, and the
// conditions this controller owns (PatchObject: status and conditions in one request).
func (r *Reconciler[M, H]) patch(ctx context.Context, c client.Client, base, m M) error {
	a := r.Adapter
	conds := a.Spec().Conditions
	r.setBlockMove(m)
	// A pass that lost a claim race sets no condition yet; summarising nothing is an error in CAPI's
	// conditions package, and returning it would put the machine on an ever longer error backoff while
	// controllers race.
	summarised := []string{conds.Claimed, conds.Provisioned}
	if conditions.Has(m, conds.Claimed) || conditions.Has(m, conds.Provisioned) {
		if err := conditions.SetSummaryCondition(m, m, clusterv1.ReadyCondition,
			conditions.ForConditionTypes(summarised), conditions.IgnoreTypesIfMissing(summarised)); err != nil {
			return fmt.Errorf("failed to summarise conditions of %s %s: %w", a.Spec().MachineKind, klog.KObj(m), err)
		}
	}
	owned := []string{conds.Claimed, conds.Provisioned, conds.Released, clusterv1.ReadyCondition, clusterv1.PausedCondition}
	if err := PatchObject(ctx, c, base, m, owned); err != nil {
		return fmt.Errorf("failed to patch %s %s: %w", a.Spec().MachineKind, klog.KObj(m), err)
	}
	return nil
}

// setBlockMove sets clusterctl's block-move annotation on m while a hand-off or withdrawal is in flight
// (reserved or claimed and not provisioned, or deleting with a claim), and removes it otherwise.
func (r *Reconciler[M, H]) setBlockMove(m M) {
	a := r.Adapter
	keys := a.Spec().Keys
	ann := m.GetAnnotations()
	claimed := ann[keys.Host] != "" || ann[keys.ReservedHost] != ""
	if claimed && (!a.Facts(m).Provisioned || !m.GetDeletionTimestamp().IsZero()) {
		if ann == nil {
			ann = map[string]string{}
		}
		ann[clusterctlv1.BlockMoveAnnotation] = "true"
	} else {
		delete(ann, clusterctlv1.BlockMoveAnnotation)
	}
	m.SetAnnotations(ann)
}

// SetCondition sets a condition on m.
func SetCondition(m conditions.Setter, t string, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(m, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg})
}

// unclaimed reports whether m never reserved a host: no claim identity, reservation or host recorded.
func (r *Reconciler[M, H]) unclaimed(m M) bool {
	keys := r.Adapter.Spec().Keys
	ann := m.GetAnnotations()
	return ann[keys.ClaimID] == "" && ann[keys.ReservedHost] == "" && ann[keys.Host] == ""
}
