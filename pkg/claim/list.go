package claim

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// List lists the objects of obj's kind (its list kind is found through c's scheme) and returns them
// typed.
func List[T client.Object](ctx context.Context, c client.Client, obj T, opts ...client.ListOption) ([]T, error) {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return nil, fmt.Errorf("failed to find the kind of %T: %w", obj, err)
	}
	o, err := c.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, fmt.Errorf("failed to find the list kind of %s: %w", gvk.Kind, err)
	}
	list, ok := o.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%sList is not a list", gvk.Kind)
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("failed to list %ss: %w", gvk.Kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("failed to read the list of %ss: %w", gvk.Kind, err)
	}
	out := make([]T, 0, len(items))
	for _, it := range items {
		if t, ok := it.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}
