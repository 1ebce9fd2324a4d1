package claim

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// reserve records on m (or, with host "", clears) the host m is about to claim. The patch carries m's
// resourceVersion (optimistic lock), so of several controller replicas deciding for one machine at once
// only one records a choice: a machine can never end up holding two hosts, and a controller that dies
// between the reservation and the claim resumes with the same host. The claim identity is made durable
// in the same write, before any claim reaches a host under it, and so is finalizer, when not "" (added
// to m in memory and not written yet). It returns m as written.
func reserve(ctx context.Context, w client.Writer, kind string, m client.Object, keys Keys, host, finalizer string) (client.Object, error) {
	before := m.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of m has m's type
	if finalizer != "" {
		controllerutil.RemoveFinalizer(before, finalizer)
	}
	annotations := m.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	if host == "" {
		delete(annotations, keys.ReservedHost)
	} else {
		annotations[keys.ReservedHost] = host
		annotations[keys.ClaimID] = string(ID(m, keys.ClaimID))
	}
	m.SetAnnotations(annotations)
	latest := m.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of m has m's type
	if err := w.Patch(ctx, latest, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		m.SetAnnotations(before.GetAnnotations())
		return nil, fmt.Errorf("failed to record the host reservation of %s %s: %w", kind, klog.KObj(m), err)
	}
	return latest, nil
}

// recordClaimUnchanged writes the claim of host onto the machine (annotateClaimed) under the
// resourceVersion this pass's reservation left it at, and reports whether it landed. A write that lands
// shows the machine unchanged since its reservation: the same object (no other of its name), not being
// deleted, still reserving host. When the machine changed (a deletion, someone's label) the write is
// refused, m is left as it was, and the caller reads the machine to decide (confirmClaim).
func (r *Reconciler[M, H]) recordClaimUnchanged(ctx context.Context, s *Scope[M, H], host string) bool {
	m := s.Machine
	before := m.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of m has m's type
	r.annotateClaimed(m, host)
	latest := m.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of m has m's type
	if err := r.Client.Patch(ctx, latest, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		ctrl.LoggerFrom(ctx).V(4).Info("The machine changed since its reservation, reading it", "err", err)
		m.SetAnnotations(before.GetAnnotations())
		return false
	}
	r.written.Record(latest)
	// The annotations are written: the deferred patch sends only what changes after this. (A deletion
	// changes the resourceVersion, so a machine written here is not deleting; should it show one anyway,
	// the caller's read decides.)
	return s.rebase(latest) == nil && latest.GetDeletionTimestamp().IsZero()
}

// annotateClaimed records on m (in memory) that it holds host: the host and the claim identity, no
// reservation, and clusterctl's block-move annotation as the deferred patch sets it.
func (r *Reconciler[M, H]) annotateClaimed(m M, host string) {
	keys := r.Adapter.Spec().Keys
	ann := m.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[keys.Host] = host
	ann[keys.ClaimID] = string(ID(m, keys.ClaimID))
	delete(ann, keys.ReservedHost)
	m.SetAnnotations(ann)
	r.setBlockMove(m)
}
