package claim

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
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
