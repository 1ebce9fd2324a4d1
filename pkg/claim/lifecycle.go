package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/pkg/workload"
)

// claimedHost returns the host m holds, or nil. The annotations are hints (the claimed host, or the one
// reserved just before a crash); the host's consumer is the truth. Without a hint the consumer index
// finds a claim whose recording on m was lost.
func (r *Reconciler[M, H]) claimedHost(ctx context.Context, m M) (H, bool, error) {
	a := r.Adapter
	keys := a.Spec().Keys
	var none H
	for _, key := range []string{keys.Host, keys.ReservedHost} {
		name := m.GetAnnotations()[key]
		if name == "" {
			continue
		}
		k := client.ObjectKey{Namespace: m.GetNamespace(), Name: name}
		// The cache may not show a claim this controller wrote a moment ago: a host that does not name
		// m in the cache is read again uncached before it counts as lost.
		// The reservation is read uncached only: the claim may have been written by the previous pass.
		readers := []client.Reader{r.Client, r.APIReader}
		if key == keys.ReservedHost {
			readers = readers[1:]
		}
		for _, reader := range readers {
			h := a.NewHost()
			err := reader.Get(ctx, k, h)
			if err == nil && HeldBy(a, h, m, keys.ClaimID) {
				return h, true, nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return none, false, fmt.Errorf("failed to get %s %s: %w", a.HostKind(), klog.KRef(k.Namespace, k.Name), err)
			}
		}
	}
	hosts, err := List(ctx, r.Client, a.NewHost(), client.InNamespace(m.GetNamespace()), client.MatchingFields{r.consumerIndex(): string(ID(m, keys.ClaimID))})
	if err != nil {
		return none, false, fmt.Errorf("failed to list %ss claimed by %s %s: %w", a.HostKind(), a.Spec().MachineKind, klog.KObj(m), err)
	}
	for _, h := range hosts {
		if HeldBy(a, h, m, keys.ClaimID) {
			return h, true, nil
		}
	}
	return none, false, nil
}

// reconcileNormal finds or makes the claim, records it on the machine and lets the provider hand off.
func (r *Reconciler[M, H]) reconcileNormal(ctx context.Context, s *Scope[M, H]) (ctrl.Result, error) {
	a := r.Adapter
	keys, conds := a.Spec().Keys, a.Spec().Conditions
	m := s.Machine
	host, found, err := r.claimedHost(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !found && m.GetAnnotations()[keys.Host] != "" {
		// The claimed host is gone or was released by someone else: never silently claim another one
		// under a Machine that may already run a Node.
		SetCondition(m, conds.Claimed, metav1.ConditionFalse, conds.HostLostReason,
			fmt.Sprintf("%s %s is gone or no longer claimed by this machine; delete the Machine so Cluster API replaces it", a.HostKind(), m.GetAnnotations()[keys.Host]))
		return ctrl.Result{}, nil
	}
	if !found {
		if !r.readyToClaim(s) {
			return ctrl.Result{}, nil
		}
		var out outcome
		host, out, err = r.claim(ctx, s)
		countAttempt(a.Spec().MachineKind, out, err)
		if err != nil || out == noHost {
			return ctrl.Result{}, err
		}
		if out == raceLost {
			return ctrl.Result{RequeueAfter: ConflictRetry}, nil
		}
	}
	r.annotateClaimed(m, host.GetName())
	a.RecordHost(m, host)
	SetCondition(m, conds.Claimed, metav1.ConditionTrue, ClaimedReason, "")
	s.Host = host
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues(a.HostKind(), klog.KObj(host)))
	if s.pendingFinalizer != "" {
		// A claim found without a reservation on m (none written by this controller): the finalizer is
		// written before the provider touches the host.
		if err := s.Patch(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	return a.Provision(ctx, s)
}

// readyToClaim reports whether a host may be claimed for the machine: its Cluster's infrastructure is
// provisioned and its bootstrap data exists (no host is held idle while the bootstrap provider works).
// The Cluster and Machine watches wake the machine when that changes.
func (r *Reconciler[M, H]) readyToClaim(s *Scope[M, H]) bool {
	conds := r.Adapter.Spec().Conditions
	m := s.Machine
	if !ptr.Deref(s.Cluster.Status.Initialization.InfrastructureProvisioned, false) {
		SetCondition(m, conds.Claimed, metav1.ConditionFalse, clusterv1.WaitingForClusterInfrastructureReadyReason, "Waiting for the Cluster's infrastructure to be provisioned")
		return false
	}
	if s.DataSecretName() == "" {
		SetCondition(m, conds.Claimed, metav1.ConditionFalse, clusterv1.WaitingForBootstrapDataReason, "Waiting for the bootstrap provider to set Machine.spec.bootstrap.dataSecretName")
		SetCondition(m, conds.Provisioned, metav1.ConditionFalse, clusterv1.WaitingForBootstrapDataReason, "Waiting for bootstrap data")
		return false
	}
	return true
}

// outcome is how a claim attempt ended.
type outcome int

const (
	// claimed: the machine holds the host.
	claimed outcome = iota
	// raceLost: another replica or machine won a race; the next pass should come soon.
	raceLost
	// noHost: no host qualifies (the Claimed condition says why); a host event wakes the machine.
	noHost
)

// claim chooses a host and records the claim: first the choice on m (optimistic lock on m: only one
// replica's choice sticks), then the consumer on the host (optimistic lock on the host: only one
// machine's claim sticks).
func (r *Reconciler[M, H]) claim(ctx context.Context, s *Scope[M, H]) (H, outcome, error) {
	a := r.Adapter
	keys := a.Spec().Keys
	log := ctrl.LoggerFrom(ctx)
	m := s.Machine
	var none H
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	if r.recent == nil {
		r.recent = recentClaims{}
	}
	name := m.GetAnnotations()[keys.ReservedHost]
	// h is the host to claim as last read. A host this pass chose is taken as the cache showed it a moment
	// ago: the claim's optimistic lock refuses a view the cache had not caught up with (a conflict, and
	// the next pass reads the reserved host uncached), so reading it again first would buy nothing.
	h := a.NewHost()
	chosenNow := false
	if name == "" {
		chosen, ok, err := r.choose(ctx, s)
		if err != nil || !ok {
			return none, noHost, err
		}
		written, err := reserve(ctx, r.Client, a.Spec().MachineKind, m, keys, chosen.GetName(), s.pendingFinalizer)
		if err != nil {
			if apierrors.IsConflict(err) {
				// Another replica is deciding for this machine right now.
				return none, raceLost, nil
			}
			return none, noHost, err
		}
		r.written.Record(written)
		if err := s.rebase(written); err != nil {
			return none, noHost, err
		}
		name, h, chosenNow = chosen.GetName(), chosen, true
	}
	exists := true
	if !chosenNow {
		// Reserved by an earlier pass (or another replica): what became of the host since is read from
		// the API server.
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: name}, h); err != nil {
			if !apierrors.IsNotFound(err) {
				return none, noHost, fmt.Errorf("failed to get %s %s: %w", a.HostKind(), klog.KRef(m.GetNamespace(), name), err)
			}
			exists = false
		}
	}
	if exists && HeldBy(a, h, m, keys.ClaimID) {
		return h, claimed, nil
	}
	if !exists || !a.Available(h) || !r.selects(m, h) {
		// Taken by another machine, gone or changed between the choice and the claim: choose again.
		log.V(4).Info("Reserved host is no longer available, choosing again", a.HostKind(), klog.KRef(m.GetNamespace(), name))
		written, err := reserve(ctx, r.Client, a.Spec().MachineKind, m, keys, "", s.pendingFinalizer)
		if err != nil && !apierrors.IsConflict(err) {
			return none, noHost, err
		}
		if err == nil {
			r.written.Record(written)
			if err := s.rebase(written); err != nil {
				return none, noHost, err
			}
		}
		return none, raceLost, nil
	}
	log.Info("Claiming host", a.HostKind(), klog.KObj(h))
	readVersion := h.GetResourceVersion()
	c := Consumer{Name: m.GetName(), ID: ID(m, keys.ClaimID), Cluster: s.Cluster.Name}
	if err := recordClaim(ctx, r.Client, a, h, c); err != nil {
		if apierrors.IsConflict(err) {
			// Another claim or a host controller's write raced us; the next pass re-reads the host.
			log.V(4).Info("Lost the race for a host, trying again", a.HostKind(), klog.KObj(h))
			return none, raceLost, nil
		}
		return none, noHost, err
	}
	// The machine must still be the one that reserved the host, and not deleting (confirmClaim). A
	// reservation this pass wrote is confirmed by recording the claim on the machine under the
	// reservation's resourceVersion: the write the machine needs anyway, instead of a read of its own.
	if !chosenNow || !r.recordClaimUnchanged(ctx, s, h.GetName()) {
		if ok, err := r.confirmClaim(ctx, m, h); err != nil || !ok {
			return none, raceLost, err
		}
	}
	r.recent.remember(h, readVersion, s.Cluster.Name)
	r.recordClaimed(m, h, s.Cluster.Name)
	return h, claimed, nil
}

// choose picks the best candidate for m from the cached inventory (with this replica's recent claims
// laid over it), as the cache holds it; false when none qualifies, with the Claimed condition saying why.
func (r *Reconciler[M, H]) choose(ctx context.Context, s *Scope[M, H]) (H, bool, error) {
	a := r.Adapter
	conds := a.Spec().Conditions
	m := s.Machine
	var none H
	hosts, err := List(ctx, r.Client, a.NewHost(), client.InNamespace(m.GetNamespace()))
	if err != nil {
		return none, false, fmt.Errorf("failed to list %ss in namespace %s: %w", a.HostKind(), m.GetNamespace(), err)
	}
	overlay(r.recent, a, hosts)
	fd := s.CAPIMachine.Spec.FailureDomain
	cands, err := Candidates(a, hosts, a.Facts(m).HostSelector, fd, Consumer{Name: m.GetName(), ID: ID(m, a.Spec().Keys.ClaimID), Cluster: s.Cluster.Name})
	if err != nil {
		SetCondition(m, conds.Claimed, metav1.ConditionFalse, InvalidHostSelectorReason, err.Error())
		return none, false, nil
	}
	if len(cands) == 0 {
		where := ""
		if fd != "" {
			where = " in failure domain " + fd
		}
		SetCondition(m, conds.Claimed, metav1.ConditionFalse, NoHostAvailableReason,
			fmt.Sprintf("None of the %d %ss in namespace %s is free and matches spec.hostSelector%s: %s", len(hosts), a.HostKind(), m.GetNamespace(), where, a.Spec().NoHostHint))
		return none, false, nil
	}
	return cands[0], true, nil
}

// selects reports whether h still matches m's host selector.
func (r *Reconciler[M, H]) selects(m M, h H) bool {
	c, err := Candidates(r.Adapter, []H{h}, r.Adapter.Facts(m).HostSelector, "", Consumer{})
	return err == nil && len(c) == 1
}

// reconcileDelete withdraws what the provider handed to the host, releases the host and lets the
// machine go.
func (r *Reconciler[M, H]) reconcileDelete(ctx context.Context, s *Scope[M, H]) (ctrl.Result, error) {
	a := r.Adapter
	keys, conds := a.Spec().Keys, a.Spec().Conditions
	log := ctrl.LoggerFrom(ctx)
	m := s.Machine
	SetCondition(m, conds.Claimed, metav1.ConditionFalse, clusterv1.DeletingReason, "")
	host, found, err := r.claimedHost(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !found {
		if name := m.GetAnnotations()[keys.ReservedHost]; name != "" {
			// A claim of the reserved host may still be on its way (fence.go).
			if host, found, err = r.fenceReservation(ctx, m, name); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if !found {
		ann := m.GetAnnotations()
		delete(ann, keys.ReservedHost)
		m.SetAnnotations(ann)
		controllerutil.RemoveFinalizer(m, a.Spec().Finalizer)
		return ctrl.Result{}, nil
	}
	s.Host = host
	ctx = ctrl.LoggerInto(ctx, log.WithValues(a.HostKind(), klog.KObj(host)))
	log = ctrl.LoggerFrom(ctx)
	w, res, err := a.Withdraw(ctx, s)
	if err != nil || !w.Done {
		return res, err
	}
	// CAPI skips Node deletion while the Cluster is deleted, assuming the workload cluster goes with it;
	// an attached one stays, and the host's next Machine would find its Node's providerID taken.
	if w.NodeStopped && s.Cluster.DeletionTimestamp != nil && a.Facts(m).ProviderID != "" {
		workload.DeleteStaleNodes(ctx, r.Client, client.ObjectKeyFromObject(s.Cluster), a.Facts(m).ProviderID, a.Spec().ControllerName)
	}
	if err := Release(ctx, r.Client, r.APIReader, a, s.Host, m.GetName(), ID(m, keys.ClaimID), w.OnRelease); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Released host")
	r.recordReleased(m, s.Host)
	controllerutil.RemoveFinalizer(m, a.Spec().Finalizer)
	return ctrl.Result{}, nil
}
