// Package infracluster is the one reconciler of the infrastructure cluster kinds of Yonder's
// host-inventory providers (YonderSSHCluster, YonderMetalCluster): the control plane endpoint is passed
// through as given (the control plane is external, see YonderControlPlane), failure domains come from the
// host inventory (and, where the kind has them, from spec), and the infrastructure is provisioned at once:
// the hosts exist already. Each provider supplies its kind names and host inventory; its cluster kind implements Cluster.
package infracluster

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	"github.com/yonder-dev/yonder/pkg/claim"
)

// MaxFailureDomains bounds status.failureDomains.
const MaxFailureDomains = 100

// Cluster is an infrastructure cluster object whose failure domains come from a host inventory: it says
// which hosts (and which extra failure domains) it offers, and records what the reconciler computed.
type Cluster interface {
	client.Object
	conditions.Setter
	// InventoryFailureDomains returns spec.hostSelector (the hosts whose failure domains the cluster
	// offers) and the failure domains the spec names besides the inventory's.
	InventoryFailureDomains() (hostSelector *metav1.LabelSelector, extra []string)
	// SetProvisioned writes status.failureDomains and status.initialization.provisioned.
	SetProvisioned(failureDomains []clusterv1.FailureDomain)
}

// Spec is a provider's infrastructure cluster kind and the reasons of its Ready condition.
type Spec struct {
	// ClusterKind is the kind of the clusters.
	ClusterKind string
	// ComputedReason: the failure domains were computed (Ready=True).
	ComputedReason string
	// InvalidHostSelectorReason: spec.hostSelector does not parse (Ready=False).
	InvalidHostSelectorReason string
}

// Reconciler reconciles the infrastructure clusters of one provider: clusters of kind C over hosts of
// kind H.
type Reconciler[C Cluster, H client.Object] struct {
	Client client.Client
	// WatchFilterValue limits reconciliation to Cluster API objects labelled
	// cluster.x-k8s.io/watch-filter=<value> (hosts are inventory and need no such label).
	WatchFilterValue string
	// Inventory is the provider's view of its hosts.
	Inventory claim.Inventory[H]
	// Spec names the kind and its reasons.
	Spec Spec
}

// newCluster returns an empty C.
func (r *Reconciler[C, H]) newCluster() C {
	var zero C
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(C) //nolint:forcetypeassert // C is a pointer type
}

// SetupWithManager registers the reconciler.
func (r *Reconciler[C, H]) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	gvk, err := mgr.GetClient().GroupVersionKindFor(r.newCluster())
	if err != nil {
		return fmt.Errorf("failed to find the kind of %s: %w", r.Spec.ClusterKind, err)
	}
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)
	// Only new, deleted and relabelled hosts, and hosts whose spec changed, can change the failure
	// domains; host status is written often.
	hostChanges := predicate.Or[client.Object](predicate.LabelChangedPredicate{}, predicate.GenerationChangedPredicate{}, predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true }, DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(event.UpdateEvent) bool { return false }, GenericFunc: func(event.GenericEvent) bool { return false },
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(r.newCluster(), builder.WithPredicates(filter)).
		WithOptions(opts).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx, gvk, mgr.GetClient(), r.newCluster())),
			builder.WithPredicates(filter, predicates.ClusterPausedTransitions(mgr.GetScheme(), log))).
		Watches(r.Inventory.NewHost(), handler.EnqueueRequestsFromMapFunc(r.hostToClusters), builder.WithPredicates(hostChanges)).
		Complete(r)
}

func (r *Reconciler[C, H]) hostToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	cs, err := claim.List(ctx, r.Client, r.newCluster(), client.InNamespace(o.GetNamespace()))
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(cs))
	for _, c := range cs {
		if r.WatchFilterValue == "" || c.GetLabels()[clusterv1.WatchLabel] == r.WatchFilterValue {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return reqs
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler[C, H]) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	log := ctrl.LoggerFrom(ctx)
	c := r.newCluster()
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, metav1.ObjectMeta{Namespace: c.GetNamespace(), OwnerReferences: c.GetOwnerReferences()})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get owner Cluster of %s %s: %w", r.Spec.ClusterKind, klog.KObj(c), err)
	}
	if cluster == nil {
		log.V(4).Info("Waiting for the Cluster owner reference")
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("Cluster", klog.KObj(cluster)))
	h, err := patch.NewHelper(c, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create patch helper for %s %s: %w", r.Spec.ClusterKind, klog.KObj(c), err)
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, c); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := h.Patch(ctx, c, patch.WithOwnedConditions{Conditions: []string{clusterv1.ReadyCondition, clusterv1.PausedCondition}}); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, fmt.Errorf("failed to patch %s %s: %w", r.Spec.ClusterKind, klog.KObj(c), err)})
		}
	}()
	if !c.GetDeletionTimestamp().IsZero() {
		// Nothing to tear down: the hosts are inventory and are released by their machines.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.reconcileNormal(ctx, c)
}

// reconcileNormal computes the failure domains and marks the infrastructure provisioned.
func (r *Reconciler[C, H]) reconcileNormal(ctx context.Context, c C) error {
	spec := r.Spec
	selector, extra := c.InventoryFailureDomains()
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		conditions.Set(c, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionFalse, Reason: spec.InvalidHostSelectorReason, Message: err.Error()})
		return nil
	}
	hosts, err := claim.List(ctx, r.Client, r.Inventory.NewHost(), client.InNamespace(c.GetNamespace()))
	if err != nil {
		return fmt.Errorf("failed to list %ss in namespace %s: %w", r.Inventory.HostKind(), c.GetNamespace(), err)
	}
	names := claim.FailureDomains(r.Inventory, hosts, sel, extra, MaxFailureDomains)
	fds := make([]clusterv1.FailureDomain, 0, len(names))
	for _, n := range names {
		// Hosts are workers: no domain is offered to control plane machines.
		fds = append(fds, clusterv1.FailureDomain{Name: n, ControlPlane: ptr.To(false)})
	}
	c.SetProvisioned(fds)
	conditions.Set(c, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: spec.ComputedReason,
		Message: fmt.Sprintf("%d failure domains from spec and the %s inventory", len(fds), r.Inventory.HostKind())})
	return nil
}
