// Package kubeletserving approves kubelet-serving CSRs in workload clusters, but only for Nodes whose
// Machine Yonder bootstrapped (its bootstrap config is a YonderConfig) and only for the DNS names and IP
// addresses of that Machine. Every other CSR is left untouched: neither approved nor denied, so another
// approver (or an operator) may still act on it.
//
// The reconciler is keyed by Cluster: it watches CSRs in the workload cluster through CAPI's ClusterCache
// and Machines in the management cluster, since a CSR may arrive before CAPI links the Node to its Machine.
package kubeletserving

import (
	"context"
	"errors"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/predicates"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
)

// ApprovalReason is the reason on the Approved condition this reconciler adds.
const ApprovalReason = "YonderMachineAddressesMatch"

// Reconciler approves kubelet-serving CSRs of Yonder-bootstrapped Nodes.
type Reconciler struct {
	// Client reads the management cluster.
	Client client.Client
	// ClusterCache gives clients and watches for workload clusters.
	ClusterCache clustercache.ClusterCache
	// WatchFilterValue limits reconciliation to Clusters labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string

	controller controller.Controller
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "kubeletserving")
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&clusterv1.Cluster{}, builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Named("kubeletserving").
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToCluster),
			builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		WatchesRawSource(r.ClusterCache.GetClusterSource("kubeletserving", func(_ context.Context, o client.Object) []ctrl.Request {
			return []ctrl.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
		})).
		Build(r)
	if err != nil {
		return fmt.Errorf("failed to set up the kubelet-serving CSR approver: %w", err)
	}
	r.controller = c
	return nil
}

func machineToCluster(_ context.Context, o client.Object) []ctrl.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || !ours(m) {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}}}
}

func ours(m *clusterv1.Machine) bool {
	ref := m.Spec.Bootstrap.ConfigRef
	return ref.APIGroup == bootstrapv1.GroupVersion.Group && ref.Kind == "YonderConfig"
}

// Reconcile approves the pending kubelet-serving CSRs of one Cluster's Yonder Machines.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if annotations.IsPaused(cluster, cluster) || !cluster.DeletionTimestamp.IsZero() ||
		!ptr.Deref(cluster.Status.Initialization.ControlPlaneInitialized, false) {
		return ctrl.Result{}, nil
	}
	byNode, hasOurs, err := r.machinesByNode(ctx, cluster)
	if err != nil || !hasOurs {
		// Not a Cluster with Yonder workers: do not open a watch on its CSRs.
		return ctrl.Result{}, err
	}
	key := client.ObjectKeyFromObject(cluster)
	if err := r.watchCSRs(ctx, key); err != nil {
		if errors.Is(err, clustercache.ErrClusterNotConnected) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to watch CSRs of Cluster %s: %w", klog.KObj(cluster), err)
	}
	reader, err := r.ClusterCache.GetReader(ctx, key)
	if err != nil {
		if errors.Is(err, clustercache.ErrClusterNotConnected) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	csrs := &certificatesv1.CertificateSigningRequestList{}
	if err := reader.List(ctx, csrs); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list CSRs of Cluster %s: %w", klog.KObj(cluster), err)
	}
	return ctrl.Result{}, r.approve(ctx, cluster, csrs.Items, byNode)
}

// machinesByNode returns the Cluster's Yonder Machines by the name of their Node, and whether the
// Cluster has Yonder Machines at all.
func (r *Reconciler) machinesByNode(ctx context.Context, cluster *clusterv1.Cluster) (map[string]*clusterv1.Machine, bool, error) {
	machines := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(cluster.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		return nil, false, fmt.Errorf("failed to list Machines of Cluster %s: %w", klog.KObj(cluster), err)
	}
	byNode := map[string]*clusterv1.Machine{}
	hasOurs := false
	for i := range machines.Items {
		m := &machines.Items[i]
		if !ours(m) {
			continue
		}
		hasOurs = true
		if m.Status.NodeRef.IsDefined() {
			byNode[m.Status.NodeRef.Name] = m
		}
	}
	return byNode, hasOurs, nil
}

// watchCSRs watches the pending kubelet-serving CSRs of the workload cluster of the Cluster key.
func (r *Reconciler) watchCSRs(ctx context.Context, key client.ObjectKey) error {
	return r.ClusterCache.Watch(ctx, key, clustercache.NewWatcher(clustercache.WatcherOptions{
		Name:    "kubeletserving-watch-csrs",
		Watcher: r.controller,
		Kind:    &certificatesv1.CertificateSigningRequest{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
			return []ctrl.Request{{NamespacedName: key}}
		}),
		Predicates: []predicate.Predicate{predicate.NewPredicateFuncs(func(o client.Object) bool {
			csr, ok := o.(*certificatesv1.CertificateSigningRequest)
			return ok && IsPendingServing(csr)
		})},
	}))
}

// approve approves the pending kubelet-serving CSRs of Nodes of byNode that pass Check.
func (r *Reconciler) approve(ctx context.Context, cluster *clusterv1.Cluster, csrs []certificatesv1.CertificateSigningRequest, byNode map[string]*clusterv1.Machine) error {
	key := client.ObjectKeyFromObject(cluster)
	log := ctrl.LoggerFrom(ctx)
	var wl client.Client
	for i := range csrs {
		csr := &csrs[i]
		if !IsPendingServing(csr) {
			continue
		}
		m, ok := byNode[NodeName(csr)]
		if !ok {
			// Not a Node of ours, or CAPI has not linked it yet (the Machine update brings us back).
			continue
		}
		if err := Check(csr, m, cluster); err != nil {
			log.Info("Leaving kubelet-serving CSR unapproved", "csr", csr.Name, "Machine", klog.KObj(m), "reason", err.Error())
			continue
		}
		if wl == nil {
			var err error
			if wl, err = r.ClusterCache.GetUncachedClient(ctx, key); err != nil {
				return err
			}
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: ApprovalReason,
			Message:        fmt.Sprintf("Approved by Yonder: node %s of Machine %s requested only its Machine's addresses", m.Status.NodeRef.Name, m.Name),
			LastUpdateTime: metav1.Now(),
		})
		if err := wl.SubResource("approval").Update(ctx, csr); err != nil {
			return fmt.Errorf("failed to approve CSR %s: %w", csr.Name, err)
		}
		log.Info("Approved kubelet-serving CSR", "csr", csr.Name, "Machine", klog.KObj(m))
	}
	return nil
}
