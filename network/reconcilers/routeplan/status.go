package routeplan

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/pkg/condevents"
)

const (
	availableReason  = "Available"
	consistentReason = "Consistent"
	maxListed        = 10
)

// reportStatus writes status on Sites, GatewayPools and SitePeerings where it changed.
func (r *Reconciler) reportStatus(ctx context.Context, out *plan.Output, in *snapshot) error {
	var errs []error
	sites := make(map[string]bool, len(in.sites))
	for i := range in.sites {
		sites[in.sites[i].Name] = true
	}
	forgetDeletedSites(func(site string) bool { return sites[site] })
	for i := range in.sites {
		s := &in.sites[i]
		next := s.DeepCopy()
		siteStatus(next, out.Sites[s.Name])
		written, err := r.patchStatus(ctx, s, next, !equality.Semantic.DeepEqual(s.Status, next.Status))
		if written {
			condevents.Record(r.Recorder, next, condevents.Policy{}, s.Status.Conditions, next.Status.Conditions)
		}
		errs = append(errs, err)
	}
	for i := range in.pools {
		p := &in.pools[i]
		next := p.DeepCopy()
		poolStatus(next, out.Pools[p.Name])
		changed := !equality.Semantic.DeepEqual(p.Status, next.Status)
		prev := r.liveStatus(ctx, p, changed)
		written, err := r.patchStatus(ctx, p, next, changed)
		if written {
			recordGatewayEvents(r.Recorder, next, prev.Gateways, next.Status.Gateways)
			condevents.Record(r.Recorder, next, condevents.Policy{}, prev.Conditions, next.Status.Conditions)
		}
		errs = append(errs, err)
	}
	for i := range in.peerings {
		p := &in.peerings[i]
		next := p.DeepCopy()
		peeringStatus(next, out.Peerings[p.Name])
		written, err := r.patchStatus(ctx, p, next, !equality.Semantic.DeepEqual(p.Status, next.Status))
		if written {
			condevents.Record(r.Recorder, next, condevents.Policy{}, p.Status.Conditions, next.Status.Conditions)
		}
		errs = append(errs, err)
	}
	return kerrors.NewAggregate(errs)
}

// patchStatus writes next's status when it changed and reports whether the API server really changed the
// object (only then are Events recorded).
// liveStatus is the status a pool's elections are compared with before a write (changed): the cached pool
// can predate this controller's own last status write (a Node event requeues at once), and comparing with
// it would report and count the same election or failover twice; so it is read from the apiserver. The
// cached status serves when nothing is written or the read fails (the write then fails or counts anyway).
func (r *Reconciler) liveStatus(ctx context.Context, cached *netv1.GatewayPool, changed bool) netv1.GatewayPoolStatus {
	if !changed || r.APIReader == nil {
		return cached.Status
	}
	live := &netv1.GatewayPool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), live); err != nil {
		return cached.Status
	}
	return live.Status
}

func (r *Reconciler) patchStatus(ctx context.Context, old, next client.Object, changed bool) (bool, error) {
	if !changed {
		return false, nil
	}
	before := next.GetResourceVersion()
	if err := r.Client.Status().Patch(ctx, next, client.MergeFrom(old)); err != nil {
		return false, client.IgnoreNotFound(fmt.Errorf("failed to patch status of %T %s: %w", next, next.GetName(), err))
	}
	// A cache that lags our own last patch makes the same change look new; the API server then applies
	// an empty change and keeps the resourceVersion. Only real changes count as writes.
	if next.GetResourceVersion() == before {
		return false, nil
	}
	r.writes.Add(1)
	return true, nil
}

func cond(gen int64, t string, ok bool, reason, msg string) metav1.Condition {
	c := metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen}
	if !ok {
		c.Status = metav1.ConditionFalse
	}
	return c
}

func capList(s []string) []string {
	if len(s) > maxListed {
		return s[:maxListed]
	}
	return s
}

func siteStatus(s *netv1.Site, r *plan.SiteReport) {
	if r == nil {
		r = &plan.SiteReport{}
	}
	st := &s.Status
	st.Nodes, st.ReadyNodes, st.Gateways, st.ActiveGateways = r.Nodes, r.ReadyNodes, r.Gateways, r.Active
	st.PodCIDRs = netv1.PodCIDRUsage{Allocated: r.Allocated, Capacity: r.Capacity}
	st.MTUMismatches, st.ConflictingNodes = capList(r.MTUMismatches), capList(r.Conflicts)
	st.NodesBehindNAT = r.NodesBehindNAT
	st.ObservedGeneration = s.Generation
	g := s.Generation

	var conds []metav1.Condition
	if r.WaitingForPodCIDR > 0 && r.Capacity > 0 && r.Allocated >= r.Capacity {
		conds = append(conds, cond(g, netv1.SitePodCIDRsAvailableCondition, false, netv1.SitePoolExhaustedReason,
			fmt.Sprintf("%d Node(s) wait for a pod CIDR: all %d blocks of spec.podCIDRPools are allocated; add a pool or remove Nodes", r.WaitingForPodCIDR, r.Capacity)))
	} else {
		conds = append(conds, cond(g, netv1.SitePodCIDRsAvailableCondition, true, availableReason, ""))
	}
	if len(r.GatewayLinksWithoutGate) > 0 {
		conds = append(conds, cond(g, netv1.SiteGatewaysAvailableCondition, false, netv1.SiteNoActiveGatewayReason,
			fmt.Sprintf("No active gateway carries the links to Site(s) %s: check the GatewayPools' status.gateways", strings.Join(r.GatewayLinksWithoutGate, ", "))))
	} else {
		conds = append(conds, cond(g, netv1.SiteGatewaysAvailableCondition, true, availableReason, ""))
	}
	if len(r.MTUMismatches) > 0 {
		conds = append(conds, cond(g, netv1.SiteMTUConsistentCondition, false, netv1.SiteMTUMismatchReason,
			fmt.Sprintf("%d Node(s) report an underlay MTU below spec.mtu %d (see status.mtuMismatches): lower spec.mtu or fix the interfaces", len(r.MTUMismatches), plan.SiteMTU(s))))
	} else {
		conds = append(conds, cond(g, netv1.SiteMTUConsistentCondition, true, consistentReason, ""))
	}
	ready := cond(g, netv1.ReadyCondition, true, netv1.ReadyReason, "")
	for _, c := range conds {
		if c.Status == metav1.ConditionFalse && ready.Status == metav1.ConditionTrue {
			ready = cond(g, netv1.ReadyCondition, false, c.Reason, c.Message)
		}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if ready.Status == metav1.ConditionTrue && len(r.Conflicts) > 0 {
		// Still working (the first Site by name wins), but the operator should fix the selectors.
		ready.Reason, ready.Message = netv1.SiteNodeConflictReason, fmt.Sprintf("%d Node(s) match several Sites (see status.conflictingNodes): make the selectors disjoint", len(r.Conflicts))
	}
	meta.SetStatusCondition(&st.Conditions, ready)
}

func poolStatus(p *netv1.GatewayPool, r *plan.PoolReport) {
	if r == nil {
		r = &plan.PoolReport{}
	}
	st := &p.Status
	st.Gateways = r.Gateways
	if len(st.Gateways) > 64 {
		st.Gateways = st.Gateways[:64]
	}
	st.Candidates, st.Active = int32(len(r.Gateways)), r.Active //nolint:gosec // bounded by the node count.
	st.ObservedGeneration = p.Generation
	var c metav1.Condition
	switch {
	case !r.SiteFound:
		c = cond(p.Generation, netv1.ReadyCondition, false, netv1.GatewayPoolSiteNotFoundReason, fmt.Sprintf("Site %q does not exist: create it or fix spec.site", p.Spec.Site))
	case r.Active == 0:
		c = cond(p.Generation, netv1.ReadyCondition, false, netv1.GatewayPoolNoActiveGatewayReason,
			fmt.Sprintf("None of %d candidate(s) is healthy (see status.gateways[].reason); label healthy Nodes to match spec.nodeSelector", len(r.Gateways)))
	default:
		c = cond(p.Generation, netv1.ReadyCondition, true, netv1.ReadyReason, "")
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func peeringStatus(p *netv1.SitePeering, r *plan.PeeringReport) {
	if r == nil {
		r = &plan.PeeringReport{}
	}
	st := &p.Status
	st.Links = r.Links
	if len(st.Links) > 256 {
		st.Links = st.Links[:256]
	}
	st.ObservedGeneration = p.Generation
	var down []string
	for _, l := range r.Links {
		if !l.Up {
			down = append(down, strings.Join(l.Sites, "↔"))
		}
	}
	var c metav1.Condition
	switch {
	case len(r.MissingSites) > 0:
		c = cond(p.Generation, netv1.ReadyCondition, false, netv1.SitePeeringSiteNotFoundReason, fmt.Sprintf("Site(s) %s do not exist", strings.Join(r.MissingSites, ", ")))
	case len(r.NoPath) > 0:
		c = cond(p.Generation, netv1.ReadyCondition, false, netv1.SitePeeringNoRelayReason,
			fmt.Sprintf("Link(s) %s have no path: both ends are behind NAT and no Site peered with both can relay (set spec.relay on a reachable Site or GatewayPool, use topology Gateway, or pin a Site's spec.reachability)", strings.Join(capList(r.NoPath), ", ")))
	case len(down) > 0:
		c = cond(p.Generation, netv1.ReadyCondition, false, netv1.SitePeeringLinkDownReason,
			fmt.Sprintf("Link(s) %s have no active gateway at one end: check the Sites' GatewaysAvailable condition", strings.Join(capList(down), ", ")))
	default:
		c = cond(p.Generation, netv1.ReadyCondition, true, netv1.ReadyReason, "")
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
