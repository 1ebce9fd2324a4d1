// Package node reconciles Nodes: it assigns each Node to a Site (the network.yonder.dev/site label) and,
// where the Site has pod CIDR pools and the cluster has not set one, allocates the Node's pod CIDRs.
package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/assign"
	"github.com/yonder-dev/yonder/network/internal/ipam"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=network.yonder.dev,resources=sites,verbs=get;list;watch

// Reconciler assigns Nodes to Sites and allocates their pod CIDRs.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the apiserver.
	Client client.Client
	// Recorder records Site assignments and pod CIDR allocations on the Node (the manager's when nil).
	Recorder record.EventRecorder
	// Nodes, when set, is the manager's Node informer store: allocation scans it in place instead of
	// listing (a List copies every Node; with thousands joining at once that dominated the CPU).
	Nodes toolscache.Store

	// mu serialises allocations: two workers must not hand out the same block.
	mu sync.Mutex
	// reserved are blocks handed out whose Node the cache has not shown with them yet (the cache lags our
	// own writes; without this a second allocation could pick the same block). cidr → node.
	reserved map[string]string

	reconciles atomic.Int64
}

// Reconciles is the number of completed reconciles (tests wait on it instead of sleeping).
func (r *Reconciler) Reconciles() int64 { return r.reconciles.Load() }

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	r.reserved = map[string]string{}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor(netv1.ControllerName) //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}
	if r.Nodes == nil {
		inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{})
		if err != nil {
			return fmt.Errorf("failed to get the Node informer: %w", err)
		}
		// The controller-runtime informer is client-go's shared informer; its store is read in place.
		if si, ok := inf.(toolscache.SharedIndexInformer); ok {
			r.Nodes = si.GetStore()
		}
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("network-node").
		For(&corev1.Node{}, builder.WithPredicates(nodeChanged())).
		// A Site change can move any Node; a deleted Node frees a block a waiting Node may take.
		// Only spec changes: status patches of Sites (the route plan reconciler's) must not wake every Node.
		Watches(&netv1.Site{}, handler.EnqueueRequestsFromMapFunc(r.allNodes), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, handler.Funcs{DeleteFunc: r.waitingNodes}).
		WithOptions(opts).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the node reconciler: %w", err)
	}
	return nil
}

// nodeChanged lets through only changes that can alter the Site or the need for a pod CIDR, so the
// kubelet's status updates of thousands of Nodes do not wake the reconciler.
func nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			return !mapsEqual(o.Labels, n.Labels) || len(o.Spec.PodCIDRs) != len(n.Spec.PodCIDRs) ||
				!addressesEqual(o.Status.Addresses, n.Status.Addresses)
		},
	}
}

func (r *Reconciler) allNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list Nodes")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(nodes.Items))
	for i := range nodes.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: nodes.Items[i].Name}})
	}
	return reqs
}

func (r *Reconciler) waitingNodes(ctx context.Context, _ event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list Nodes")
		return
	}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR == "" {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: n.Name}})
		}
	}
}

// Reconcile assigns one Node: its Site label (assignSite) and, when its Site has pools and it has no pod
// CIDR, one block per family (allocatePodCIDRs), written in one optimistic-locked patch (patchNode).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	defer func() {
		if rerr == nil {
			r.reconciles.Add(1)
		}
	}()
	n := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, n); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !n.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	base := n.DeepCopy()
	site, err := r.assignSite(ctx, n)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.allocatePodCIDRs(ctx, site, n); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.patchNode(ctx, base, n)
}

// assignSite sets (or removes) the Node's Site label from the Sites' selectors and node CIDRs and returns
// its Site (nil for none).
func (r *Reconciler) assignSite(ctx context.Context, n *corev1.Node) (*netv1.Site, error) {
	log := ctrl.LoggerFrom(ctx)
	sites := &netv1.SiteList{}
	if err := r.Client.List(ctx, sites); err != nil {
		return nil, fmt.Errorf("failed to list Sites: %w", err)
	}
	compiled, err := assign.Compile(sites.Items)
	if err != nil {
		// An invalid Site (the webhook normally prevents it) must not stop the others from working.
		log.Error(err, "Ignoring invalid Sites")
	}
	siteName, matched := assign.Assign(compiled, n.Labels, plan.InternalIPs(n))
	if len(matched) > 1 {
		log.V(4).Info("Node matches several Sites, the first by name wins", "sites", matched)
	}
	if siteName == "" {
		delete(n.Labels, netv1.SiteLabel)
		return nil, nil
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[netv1.SiteLabel] = siteName
	for i := range sites.Items {
		if sites.Items[i].Name == siteName {
			return &sites.Items[i], nil
		}
	}
	return nil, nil
}

// allocatePodCIDRs gives a Node without pod CIDRs blocks from its Site's pools. An exhausted pool is not
// an error: it is terminal until a pool grows or a Node goes away (both watched), and the Site's
// PodCIDRsAvailable condition tells the operator.
func (r *Reconciler) allocatePodCIDRs(ctx context.Context, site *netv1.Site, n *corev1.Node) error {
	if site == nil || len(site.Spec.PodCIDRPools) == 0 || len(n.Spec.PodCIDRs) > 0 || n.Spec.PodCIDR != "" {
		return nil
	}
	// Only the choice is serialised; the reservation it records keeps other workers off the block while
	// this one patches the Node.
	r.mu.Lock()
	cidrs, err := r.allocate(ctx, site, n.Name)
	r.mu.Unlock()
	switch {
	case errors.Is(err, ipam.ErrExhausted):
		ctrl.LoggerFrom(ctx).Info("Waiting for a free pod CIDR", "Site", klog.KObj(site), "reason", err.Error())
		r.Recorder.Eventf(n, corev1.EventTypeWarning, netv1.PodCIDRPoolExhaustedEvent, "Waiting for a pod CIDR: %v (grow a pool of Site %s or remove a Node)", err, site.Name)
	case err != nil:
		return err
	default:
		n.Spec.PodCIDRs = cidrs
		n.Spec.PodCIDR = cidrs[0]
	}
	return nil
}

// patchNode writes the Node's new label and pod CIDRs when they changed. The optimistic lock makes a
// concurrent writer of podCIDRs (kube-controller-manager's allocator) win cleanly: we get a conflict and
// re-read instead of overwriting its choice; a failed patch releases the reservation.
func (r *Reconciler) patchNode(ctx context.Context, base, n *corev1.Node) error {
	if mapsEqual(base.Labels, n.Labels) && len(base.Spec.PodCIDRs) == len(n.Spec.PodCIDRs) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Assigning Node", "site", n.Labels[netv1.SiteLabel], "podCIDRs", n.Spec.PodCIDRs)
	if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if len(n.Spec.PodCIDRs) > 0 && len(base.Spec.PodCIDRs) == 0 {
			r.mu.Lock()
			for _, c := range n.Spec.PodCIDRs {
				delete(r.reserved, c)
			}
			r.mu.Unlock()
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		// Conflicts too are returned: the retry re-reads the Node with the rate limiter's backoff.
		return fmt.Errorf("failed to patch Node %s: %w", n.Name, err)
	}
	r.recordAssignment(base, n)
	return nil
}

// recordAssignment records what patchNode changed on the Node, once it is written.
func (r *Reconciler) recordAssignment(base, n *corev1.Node) {
	was, is := base.Labels[netv1.SiteLabel], n.Labels[netv1.SiteLabel]
	switch {
	case was == is:
	case is == "":
		r.Recorder.Eventf(n, corev1.EventTypeNormal, netv1.SiteUnassignedEvent, "Left Site %s: the Node matches no Site", was)
	case was == "":
		r.Recorder.Eventf(n, corev1.EventTypeNormal, netv1.SiteAssignedEvent, "Assigned to Site %s", is)
	default:
		r.Recorder.Eventf(n, corev1.EventTypeNormal, netv1.SiteAssignedEvent, "Moved from Site %s to Site %s", was, is)
	}
	if len(base.Spec.PodCIDRs) == 0 && len(n.Spec.PodCIDRs) > 0 {
		r.Recorder.Eventf(n, corev1.EventTypeNormal, netv1.PodCIDRsAllocatedEvent, "Allocated pod CIDRs %s from Site %s", strings.Join(n.Spec.PodCIDRs, ", "), is)
	}
}

// allocate picks blocks for a Node from the Site's pools, given every Node's current CIDRs and the
// reservations the cache has not caught up with. The Node list is read without deep copies (read-only
// here): with thousands of Nodes joining at once, copying every Node for every allocation is what would
// make allocation quadratic in memory traffic.
func (r *Reconciler) allocate(ctx context.Context, site *netv1.Site, node string) ([]string, error) {
	alloc, err := ipam.New(site.Spec.PodCIDRPools)
	if err != nil {
		return nil, fmt.Errorf("failed to parse pod CIDR pools of Site %s: %w", site.Name, err)
	}
	nodes, err := r.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(nodes))
	exists := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		exists[n.Name] = true
		if len(n.Spec.PodCIDRs) > 0 {
			seen[n.Name] = true
		}
		for _, c := range n.Spec.PodCIDRs {
			alloc.MarkUsed(c)
		}
	}
	for c, owner := range r.reserved {
		// Forget a reservation once the cache shows its Node with a CIDR (then MarkUsed covers it) or
		// the Node is gone.
		if seen[owner] || !exists[owner] {
			delete(r.reserved, c)
			continue
		}
		if owner != node {
			alloc.MarkUsed(c)
		}
	}
	cidrs, err := alloc.Allocate()
	if err != nil {
		return nil, err
	}
	for _, c := range cidrs {
		r.reserved[c] = node
	}
	return cidrs, nil
}

// listNodes returns every cached Node, read-only: from the informer store when available, else a List
// without deep copies.
func (r *Reconciler) listNodes(ctx context.Context) ([]*corev1.Node, error) {
	if r.Nodes != nil {
		items := r.Nodes.List()
		out := make([]*corev1.Node, 0, len(items))
		for _, o := range items {
			if n, ok := o.(*corev1.Node); ok {
				out = append(out, n)
			}
		}
		return out, nil
	}
	list := &corev1.NodeList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list Nodes: %w", err)
	}
	out := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func addressesEqual(a, b []corev1.NodeAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
