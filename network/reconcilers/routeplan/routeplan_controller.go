// Package routeplan computes the cluster's route plan and publishes it: one RoutePlan per Site and the
// Sites' PeerSlices, written only where they differ from what is published. It also reports status on
// Sites, GatewayPools and SitePeerings. The whole plan is one reconcile key, so bursts of events collapse
// into one pass and the pure computation always sees a consistent snapshot of the cache.
package routeplan

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
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
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.yonder.dev,resources=sites;gatewaypools;sitepeerings;nodenetworks,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.yonder.dev,resources=sites/status;gatewaypools/status;sitepeerings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=network.yonder.dev,resources=routeplans;peerslices,verbs=get;list;watch;create;update;patch;delete

// key is the single reconcile key of the plan.
var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "route-plan"}}

// Reconciler publishes the route plan.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the apiserver.
	Client client.Client
	// SliceSize is the maximum number of peers per PeerSlice (plan.DefaultSliceSize when 0).
	SliceSize int
	// Recorder records gateway elections, failovers and condition changes (the manager's when nil).
	Recorder record.EventRecorder
	// APIReader reads a GatewayPool's status past the cache before an election is reported (the
	// manager's when nil; see liveStatus).
	APIReader client.Reader

	// planner and publisher carry the last pass into the next: a node change recomputes its Site only and
	// compares only the objects that were recomputed (one worker: no locking).
	planner   plan.Planner
	publisher Publisher

	passes         atomic.Int64
	writes         atomic.Int64
	lastPassWrites atomic.Int64
}

// Passes is the number of completed passes (tests wait on it instead of sleeping).
func (r *Reconciler) Passes() int64 { return r.passes.Load() }

// Writes is the number of plan objects created, updated or deleted and status patches since start.
func (r *Reconciler) Writes() int64 { return r.writes.Load() }

// LastPassWrites is the number of writes of the last pass: 0 means the published state matched the cache
// at that pass (converged, unless events are pending); -1 means no pass has completed or the last failed.
func (r *Reconciler) LastPassWrites() int64 { return r.lastPassWrites.Load() }

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager, opts controller.Options) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} })
	r.lastPassWrites.Store(-1)
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor(netv1.ControllerName) //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}
	// One key: more than one worker would only contend.
	opts.MaxConcurrentReconciles = 1
	err := ctrl.NewControllerManagedBy(mgr).
		Named("network-routeplan").
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodeRelevant())).
		Watches(&netv1.NodeNetwork{}, all).
		Watches(&netv1.Site{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&netv1.GatewayPool{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&netv1.SitePeering{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Published objects are watched so that a deleted or hand-edited one is repaired.
		Watches(&netv1.RoutePlan{}, all).
		Watches(&netv1.PeerSlice{}, all).
		WithOptions(opts).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the route plan reconciler: %w", err)
	}
	return nil
}

// nodeRelevant drops Node updates that cannot change the plan (most kubelet status updates).
func nodeRelevant() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		po, pn := plan.FromNode(o, nil), plan.FromNode(n, nil)
		return po.Site != pn.Site || po.Ready != pn.Ready || po.Unschedulable != pn.Unschedulable || po.Deleting != pn.Deleting ||
			fmt.Sprint(po.PodCIDRs, po.Addresses, o.Labels) != fmt.Sprint(pn.PodCIDRs, pn.Addresses, n.Labels)
	}}
}

// staleRequeue is how soon a pass that met a conflict runs again: the cache was behind our own last
// writes, and catches up within milliseconds. A fixed short delay rather than an error keeps the
// exponential backoff of the rate limiter (which grows to minutes) out of the normal write path.
const staleRequeue = 200 * time.Millisecond

// Reconcile computes the plan and publishes what changed.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	in, err := r.snapshot(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := r.writes.Load()
	out := r.planner.Compute(in.Input)
	var errs []error
	if err := r.publish(ctx, out, in); err != nil {
		errs = append(errs, err)
	}
	if err := r.reportStatus(ctx, out, in); err != nil {
		errs = append(errs, err)
	}
	if err := kerrors.NewAggregate(errs); err != nil {
		r.lastPassWrites.Store(-1)
		if onlyStale(err) {
			ctrl.LoggerFrom(ctx).V(4).Info("Cache behind our own writes, retrying", "err", err.Error())
			return ctrl.Result{RequeueAfter: staleRequeue}, nil
		}
		return ctrl.Result{}, err
	}
	r.lastPassWrites.Store(r.writes.Load() - before)
	r.passes.Add(1)
	return ctrl.Result{}, nil
}

// onlyStale reports whether every error is a conflict or already-exists: the signature of a cache that has
// not seen our previous writes yet.
func onlyStale(err error) bool {
	var agg kerrors.Aggregate
	if !errors.As(err, &agg) {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}
	for _, e := range agg.Errors() {
		if !onlyStale(e) {
			return false
		}
	}
	return true
}

type snapshot struct {
	plan.Input
	sites    []netv1.Site
	pools    []netv1.GatewayPool
	peerings []netv1.SitePeering
	plans    []netv1.RoutePlan
}

func (r *Reconciler) snapshot(ctx context.Context) (*snapshot, error) {
	var (
		sites    netv1.SiteList
		pools    netv1.GatewayPoolList
		peerings netv1.SitePeeringList
		nns      netv1.NodeNetworkList
		nodes    corev1.NodeList
		plans    netv1.RoutePlanList
		slices   netv1.PeerSliceList
	)
	managed := client.MatchingLabels{netv1.ManagedByLabel: netv1.ControllerName}
	for _, l := range []struct {
		list client.ObjectList
		opts []client.ListOption
	}{
		{&sites, nil}, {&pools, nil}, {&peerings, nil}, {&nns, nil}, {&nodes, nil},
		{&plans, []client.ListOption{managed}}, {&slices, []client.ListOption{managed}},
	} {
		// Read-only snapshot: no deep copies of thousands of Nodes per pass. Everything derived from it
		// that is written is deep-copied first (status patches, plan updates).
		if err := r.Client.List(ctx, l.list, append(l.opts, client.UnsafeDisableDeepCopy)...); err != nil {
			return nil, fmt.Errorf("failed to list %T: %w", l.list, err)
		}
	}
	nnByName := make(map[string]*netv1.NodeNetwork, len(nns.Items))
	for i := range nns.Items {
		nnByName[nns.Items[i].Name] = &nns.Items[i]
	}
	compiled, _ := assign.Compile(sites.Items)
	in := plan.Input{Sites: sites.Items, Pools: pools.Items, Peerings: peerings.Items, Previous: slices.Items, SliceSize: r.SliceSize}
	in.Nodes = make([]plan.Node, 0, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		pn := plan.FromNode(n, nnByName[n.Name])
		// Membership comes from the Sites, never from the Node's network.yonder.dev/site label alone: a
		// kubelet can change labels on its own Node, and the plan must not follow a node that relabels
		// itself into another Site. A Node is placed only where the label and the Sites agree, so it joins
		// once the node reconciler has labelled it and given it pod CIDRs (one write of its slice), and a
		// forged label takes it out of the plan until the node reconciler puts the label back.
		site, matched := assign.Assign(compiled, n.Labels, plan.InternalIPs(n))
		if pn.Site != site {
			pn.Site = ""
		}
		if len(matched) > 1 {
			pn.Conflicts = matched[1:]
		}
		in.Nodes = append(in.Nodes, pn)
	}
	return &snapshot{Input: in, sites: sites.Items, pools: pools.Items, peerings: peerings.Items, plans: plans.Items}, nil
}

// publish writes the differences and counts them.
func (r *Reconciler) publish(ctx context.Context, out *plan.Output, in *snapshot) error {
	n, err := r.publisher.Publish(ctx, r.Client, out, in.plans, in.Previous)
	r.writes.Add(int64(n))
	return err
}

// Publish writes the differences between the desired plan and the published objects and returns the
// number of writes: creations first, then updates, deletions last, so a daemon never sees a node missing
// from every slice while it moves between them. Updates carry the published resourceVersion: if someone
// else changed an object, the conflict sends the caller round again with a fresh view.
func Publish(ctx context.Context, c client.Client, out *plan.Output, plans []netv1.RoutePlan, slices []netv1.PeerSlice) (int, error) {
	return (&Publisher{}).Publish(ctx, c, out, plans, slices)
}

// Publisher publishes plan after plan. It remembers the resourceVersion of each object it found equal to
// the desired one or wrote, so that an object the Planner did not recompute (plan.Output.Fresh) whose
// published resourceVersion is still the one it remembers is known to be right without comparing it:
// after one node change, only that node's slice is compared. Anything unexpected (an error, an object
// someone else changed) is compared as Publish always did. The zero value is ready to use.
type Publisher struct {
	known map[string]string // plan.PlanKey/plan.SliceKey → resourceVersion known to hold the desired object
}

// Publish is the package's Publish, remembering what it saw and wrote for the next call.
func (p *Publisher) Publish(ctx context.Context, c client.Client, out *plan.Output, plans []netv1.RoutePlan, slices []netv1.PeerSlice) (int, error) {
	known := p.known
	p.known = nil // until this pass has succeeded
	pc := plan.DiffPlansKnown(out.Plans, plans, func(d, e *netv1.RoutePlan) bool {
		k := plan.PlanKey(d.Name)
		return !out.IsFresh(k) && known[k] != "" && known[k] == e.ResourceVersion
	})
	sc := plan.DiffSlicesKnown(out.Slices, slices, func(d, e *netv1.PeerSlice) bool {
		k := plan.SliceKey(d.Name)
		return !out.IsFresh(k) && known[k] != "" && known[k] == e.ResourceVersion
	})
	if pc.Len()+sc.Len() > 0 {
		ctrl.LoggerFrom(ctx).Info("Publishing route plan", "planWrites", pc.Len(), "sliceWrites", sc.Len())
	}
	var objs [3][]client.Object
	for i := range pc.Create {
		objs[0] = append(objs[0], &pc.Create[i])
	}
	for i := range sc.Create {
		objs[0] = append(objs[0], &sc.Create[i])
	}
	for i := range pc.Update {
		objs[1] = append(objs[1], &pc.Update[i])
	}
	for i := range sc.Update {
		objs[1] = append(objs[1], &sc.Update[i])
	}
	for i := range sc.Delete {
		objs[2] = append(objs[2], &sc.Delete[i])
	}
	for i := range pc.Delete {
		objs[2] = append(objs[2], &pc.Delete[i])
	}
	var errs []error
	writes := 0
	for phase, list := range objs {
		for _, o := range list {
			var err error
			switch phase {
			case 0:
				err = c.Create(ctx, o)
			case 1:
				err = c.Update(ctx, o)
			case 2:
				err = client.IgnoreNotFound(c.Delete(ctx, o, client.Preconditions{ResourceVersion: ptr(o.GetResourceVersion())}))
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to publish %T %s: %w", o, o.GetName(), err))
				continue
			}
			writes++
		}
	}
	if err := kerrors.NewAggregate(errs); err != nil {
		return writes, err
	}
	// Every published object now holds the desired one: those written at the version the apiserver
	// returned, the others at the version they had.
	next := make(map[string]string, len(out.Plans)+len(out.Slices))
	for i := range plans {
		next[plan.PlanKey(plans[i].Name)] = plans[i].ResourceVersion
	}
	for i := range slices {
		next[plan.SliceKey(slices[i].Name)] = slices[i].ResourceVersion
	}
	for _, o := range objs[0] {
		next[objectKey(o)] = o.GetResourceVersion()
	}
	for _, o := range objs[1] {
		next[objectKey(o)] = o.GetResourceVersion()
	}
	for _, o := range objs[2] {
		delete(next, objectKey(o))
	}
	p.known = next
	return writes, nil
}

func objectKey(o client.Object) string {
	if _, ok := o.(*netv1.RoutePlan); ok {
		return plan.PlanKey(o.GetName())
	}
	return plan.SliceKey(o.GetName())
}

func ptr[T any](v T) *T { return &v }
