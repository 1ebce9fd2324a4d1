package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// recordClaim writes consumer c onto h. The update carries the resourceVersion h was read at, so of two
// machines (or two controller replicas) racing for one host exactly one update succeeds; the other gets
// a conflict (apierrors.IsConflict sees through the wrapping) and chooses again.
func recordClaim[H client.Object](ctx context.Context, w client.Writer, inv Inventory[H], h H, c Consumer) error {
	inv.SetConsumer(h, c)
	if err := w.Update(ctx, h); err != nil {
		return fmt.Errorf("failed to claim %s %s: %w", inv.HostKind(), klog.KObj(h), err)
	}
	return nil
}

// UpdateClaimed applies change to h and writes it, as long as the machine named name with claim identity
// id still holds h. A conflict (host controllers write their hosts all the time) is retried on a fresh
// uncached read through r. change reports whether it changed anything; nothing is written otherwise. It
// returns the host as last read or written.
func UpdateClaimed[H client.Object](ctx context.Context, w client.Writer, r client.Reader, inv Inventory[H], h H, name string, id types.UID, change func(H) bool) (H, error) {
	cur := h.DeepCopyObject().(H) //nolint:forcetypeassert // DeepCopyObject of H is an H
	first := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			cur = inv.NewHost()
			if err := r.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
				return err
			}
		}
		first = false
		if !inv.ConsumerOf(cur).Owns(name, id) || !change(cur) {
			return nil
		}
		// Returned unwrapped so RetryOnConflict recognises a conflict.
		return w.Update(ctx, cur)
	})
	if err != nil {
		return cur, fmt.Errorf("failed to update %s %s: %w", inv.HostKind(), klog.KObj(h), err)
	}
	return cur, nil
}

// Release clears the claim of the machine named name with identity id on host h (nothing when the host
// is gone or no longer held by it); onRelease, when set, changes the host further in the same update.
func Release[H client.Object](ctx context.Context, w client.Writer, r client.Reader, inv Inventory[H], h H, name string, id types.UID, onRelease func(H)) error {
	_, err := UpdateClaimed(ctx, w, r, inv, h, name, id, func(cur H) bool {
		inv.ClearConsumer(cur)
		if onRelease != nil {
			onRelease(cur)
		}
		return true
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to release %s %s: %w", inv.HostKind(), klog.KObj(h), err)
	}
	return nil
}
