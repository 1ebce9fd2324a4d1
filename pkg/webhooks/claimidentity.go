package webhooks

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/claim"
)

// ClaimIdentity adds pkg/claim's checks of a machine's claim identity (annotation key) to v, the
// webhook of an infrastructure machine kind whose hosts inv describes: on update IdentityChange (only
// the controller sets it, to the machine's own UID, and only clusterctl move's delete-for-move patch
// removes it), on create IdentityOnCreate (a machine is created with one only by clusterctl move, and
// then a host of its namespace records the claim under its name). Without these a machine given another
// machine's identity would adopt that machine's host. hosts reads the namespace's hosts uncached (a claim
// recorded a moment ago must count); newList returns an empty list of them. Checks v already has run
// first.
func ClaimIdentity[T, H client.Object](v *Validator[T], inv claim.Inventory[H], key string, hosts client.Reader, newList func() client.ObjectList) *Validator[T] {
	change, create := v.Change, v.Create
	v.Change = func(ctx context.Context, old, m T) field.ErrorList {
		var errs field.ErrorList
		if change != nil {
			errs = change(ctx, old, m)
		}
		return append(errs, claim.IdentityChange(old, m, key)...)
	}
	v.Create = func(ctx context.Context, m T) field.ErrorList {
		var errs field.ErrorList
		if create != nil {
			errs = create(ctx, m)
		}
		if m.GetAnnotations()[key] == "" {
			return errs // nothing to match: the common case reads no hosts
		}
		hs, err := listHosts[H](ctx, hosts, newList(), m.GetNamespace())
		if err != nil {
			return append(errs, field.InternalError(field.NewPath("metadata", "annotations").Key(key),
				fmt.Errorf("failed to list the %ss of namespace %s: %w", inv.HostKind(), m.GetNamespace(), err)))
		}
		return append(errs, claim.IdentityOnCreate(inv, m, key, hs)...)
	}
	return v
}

// listHosts lists the objects of namespace ns into list and returns its items as H.
func listHosts[H client.Object](ctx context.Context, r client.Reader, list client.ObjectList, ns string) ([]H, error) {
	if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]H, 0, len(items))
	for _, it := range items {
		if h, ok := it.(H); ok {
			out = append(out, h)
		}
	}
	return out, nil
}
