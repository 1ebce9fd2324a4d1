package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A claim is two writes on two objects — the reservation on the machine, then the consumer on the host —
// and the API server has no transaction across them. While a machine is deleted, a claim for it may still
// be on its way to the host: sent by a replica whose cache does not show the deletion yet, or sent by a
// controller that died a moment ago and reaching the API server after its death. Had the deletion let the
// machine go on a read of the host that came before that write, the host would stay claimed by a machine
// that no longer exists. Two measures close this:
//
//   - The deletion fences the reserved host before it lets the machine go (fenceReservation): a write on
//     the host under the resourceVersion of a read that showed no claim (a mark set, then a second write
//     removes it), so that every claim based on an earlier read of the host fails with a conflict. This
//     covers the writes of dead controllers, which read nothing after.
//   - A claim is confirmed after it landed (confirmClaim): the machine is read from the API server, and a
//     claim for a machine that is gone or being deleted is released at once. This covers live replicas
//     that read the host after the fence: their confirmation reads the machine after the deletion began.

// FenceAnnotation is set on a host and removed again by a deletion that fences the host against a claim
// still on its way (fenceReservation); the host is left without it.
const FenceAnnotation = "claim.yonder.dev/fence"

// fenceAttempts bounds the conflicts a fence retries before it gives up for this pass.
const fenceAttempts = 10

// fenceReservation makes sure that no claim of machine m reaches the host it reserved (name) after this
// returns, unless it is already there: it returns the host and true when m holds it. Otherwise it writes
// the host (FenceAnnotation added, then removed) under the resourceVersion of a read that showed no claim
// of m, so that any claim based on an older read conflicts, and leaves the host as it found it.
func (r *Reconciler[M, H]) fenceReservation(ctx context.Context, m M, name string) (H, bool, error) {
	a := r.Adapter
	keys := a.Spec().Keys
	k := client.ObjectKey{Namespace: m.GetNamespace(), Name: name}
	var none H
	fenced := false
	for range fenceAttempts {
		h := a.NewHost()
		if err := r.APIReader.Get(ctx, k, h); err != nil {
			if apierrors.IsNotFound(err) {
				return none, false, nil
			}
			return none, false, fmt.Errorf("failed to get %s %s: %w", a.HostKind(), klog.KRef(k.Namespace, k.Name), err)
		}
		held := HeldBy(a, h, m, keys.ClaimID)
		ann := h.GetAnnotations()
		_, marked := ann[FenceAnnotation]
		switch {
		case held && !marked:
			return h, true, nil
		case fenced && !marked:
			return none, false, nil
		case marked:
			delete(ann, FenceAnnotation)
		default:
			if ann == nil {
				ann = map[string]string{}
			}
			ann[FenceAnnotation] = string(ID(m, keys.ClaimID))
		}
		h.SetAnnotations(ann)
		if err := r.Client.Update(ctx, h); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return none, false, fmt.Errorf("failed to fence %s %s against a late claim: %w", a.HostKind(), klog.KObj(h), err)
		}
		fenced = true
	}
	return none, false, fmt.Errorf("failed to fence %s %s against a late claim: it changed %d times while being written", a.HostKind(), klog.KRef(k.Namespace, k.Name), fenceAttempts)
}

// confirmClaim reads machine m from the API server after its claim of h landed. A machine that is gone,
// is being deleted, or was replaced by another of its name does not get the host: the claim is released
// at once, and confirmClaim reports false. A machine it cannot read is treated the same way: the claim is
// made again on the machine's next pass, whereas a claim kept for a machine that is gone is lost for good.
func (r *Reconciler[M, H]) confirmClaim(ctx context.Context, m M, h H) (bool, error) {
	a := r.Adapter
	keys := a.Spec().Keys
	id := ID(m, keys.ClaimID)
	cur := a.NewMachine()
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), cur)
	if err == nil && cur.GetDeletionTimestamp().IsZero() && ID(cur, keys.ClaimID) == id {
		return true, nil
	}
	reason := "it is being deleted"
	switch {
	case apierrors.IsNotFound(err):
		reason = "it is gone"
	case err != nil:
		reason = "it could not be read: " + err.Error()
	case ID(cur, keys.ClaimID) != id:
		reason = "another machine of its name replaced it"
	}
	ctrl.LoggerFrom(ctx).Info("Releasing the host just claimed: "+reason, a.HostKind(), klog.KObj(h))
	if err := Release(ctx, r.Client, r.APIReader, a, h, m.GetName(), id, nil); err != nil {
		return false, err
	}
	return false, nil
}
