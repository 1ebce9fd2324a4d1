package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Events returns "<type> <reason>: <message>" of every Event about obj (by UID, so a same-named object of
// an earlier test does not count), oldest first.
func Events(ctx context.Context, c client.Client, obj client.Object) ([]string, error) {
	list := &corev1.EventList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("failed to list Events: %w", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.UID == obj.GetUID() {
			out = append(out, e.Type+" "+e.Reason+": "+e.Message)
		}
	}
	return out, nil
}
