// Package metalcluster reconciles YonderMetalClusters: the control plane endpoint is passed through as
// given (the control plane is external, see YonderControlPlane), failure domains come from spec and from
// the failure-domain label of the BareMetalHost inventory, and the cluster infrastructure is provisioned
// at once (the hosts exist already).
package metalcluster

import (
	"context"
	"fmt"
	"sort"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclusters;yondermetalclusters/status;yondermetalclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclustertemplates;yondermetalmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// Reconciler reconciles YonderMetalClusters.
type Reconciler struct {
	Client client.Client
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	// The watch filter applies to Cluster API objects only (BareMetalHosts are inventory).
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.YonderMetalCluster{}, builder.WithPredicates(filter)).
		WithOptions(opts).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("YonderMetalCluster"), mgr.GetClient(), &infrav1.YonderMetalCluster{})),
			builder.WithPredicates(filter, predicates.ClusterPausedTransitions(mgr.GetScheme(), log))).
		// Only label changes of hosts can change the failure domains; status writes are frequent.
		Watches(&metal3v1.BareMetalHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToClusters),
			builder.WithPredicates(predicate.Or[client.Object](predicate.LabelChangedPredicate{}, predicate.Funcs{
				CreateFunc: func(e event.CreateEvent) bool { return true }, DeleteFunc: func(e event.DeleteEvent) bool { return true },
				UpdateFunc: func(event.UpdateEvent) bool { return false }, GenericFunc: func(event.GenericEvent) bool { return false },
			}))).
		Complete(r)
}

func (r *Reconciler) hostToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	list := &infrav1.YonderMetalClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		if r.WatchFilterValue != "" && list.Items[i].Labels[clusterv1.WatchLabel] != r.WatchFilterValue {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	log := ctrl.LoggerFrom(ctx)
	c := &infrav1.YonderMetalCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, c.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get owner Cluster of YonderMetalCluster %s: %w", klog.KObj(c), err)
	}
	if cluster == nil {
		log.V(4).Info("Waiting for the Cluster owner reference")
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("Cluster", klog.KObj(cluster)))
	h, err := patch.NewHelper(c, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create patch helper for YonderMetalCluster %s: %w", klog.KObj(c), err)
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, c); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := h.Patch(ctx, c, patch.WithOwnedConditions{Conditions: []string{clusterv1.ReadyCondition, clusterv1.PausedCondition}}); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, fmt.Errorf("failed to patch YonderMetalCluster %s: %w", klog.KObj(c), err)})
		}
	}()
	if !c.DeletionTimestamp.IsZero() {
		// Nothing to tear down: the hosts are inventory and are released by their machines.
		return ctrl.Result{}, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Spec.HostSelector.LabelSelector())
	if err != nil {
		conditions.Set(c, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "InvalidHostSelector", Message: err.Error()})
		return ctrl.Result{}, nil
	}
	hosts := &metal3v1.BareMetalHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(c.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list BareMetalHosts in namespace %s: %w", c.Namespace, err)
	}
	c.Status.FailureDomains = FailureDomains(c.Spec.FailureDomains, hosts.Items, sel)
	c.Status.Initialization.Provisioned = ptr.To(true)
	conditions.Set(c, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.FailureDomainsReadyReason,
		Message: fmt.Sprintf("%d failure domains from spec and the host inventory", len(c.Status.FailureDomains))})
	return ctrl.Result{}, nil
}

// FailureDomains returns the sorted union of extra and the failure-domain labels of the hosts matching
// sel (at most 100). Hosts are workers, so no domain is offered to control plane machines.
func FailureDomains(extra []string, hosts []metal3v1.BareMetalHost, sel labels.Selector) []clusterv1.FailureDomain {
	seen := map[string]bool{}
	for _, fd := range extra {
		seen[fd] = true
	}
	for i := range hosts {
		if fd := hosts[i].Labels[infrav1.FailureDomainLabel]; fd != "" && sel.Matches(labels.Set(hosts[i].Labels)) {
			seen[fd] = true
		}
	}
	names := make([]string, 0, len(seen))
	for fd := range seen {
		names = append(names, fd)
	}
	sort.Strings(names)
	if len(names) > 100 {
		names = names[:100]
	}
	out := make([]clusterv1.FailureDomain, 0, len(names))
	for _, n := range names {
		out = append(out, clusterv1.FailureDomain{Name: n, ControlPlane: ptr.To(false)})
	}
	return out
}
