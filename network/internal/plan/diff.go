package plan

import (
	"k8s.io/apimachinery/pkg/api/equality"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Changes are the writes that turn the published objects into the desired ones. Objects to update carry
// the existing object's metadata (resourceVersion for optimistic concurrency) with the desired spec.
type Changes[T any] struct {
	// Create are objects that do not exist yet.
	Create []T
	// Update are existing objects with the desired spec and labels.
	Update []T
	// Delete are published objects no longer desired.
	Delete []T
}

// Len is the number of writes.
func (c Changes[T]) Len() int { return len(c.Create) + len(c.Update) + len(c.Delete) }

// DiffPlans compares desired RoutePlans with the published ones.
func DiffPlans(desired, existing []netv1.RoutePlan) Changes[netv1.RoutePlan] {
	return DiffPlansKnown(desired, existing, nil)
}

// DiffPlansKnown is DiffPlans that takes the word of known (when not nil) that a published object equals
// the desired one instead of comparing them: a publisher that remembers what it published and what
// changed since spares comparing the whole plan after each event.
func DiffPlansKnown(desired, existing []netv1.RoutePlan, known func(d, e *netv1.RoutePlan) bool) Changes[netv1.RoutePlan] {
	return diff(desired, existing, known,
		func(o *netv1.RoutePlan) string { return o.Name },
		func(d, e *netv1.RoutePlan) bool {
			return equality.Semantic.DeepEqual(d.Spec, e.Spec) && labelsContain(e.Labels, d.Labels)
		},
		func(d, e *netv1.RoutePlan) netv1.RoutePlan {
			u := *e.DeepCopy()
			u.Spec = *d.Spec.DeepCopy()
			u.Labels = mergeLabels(u.Labels, d.Labels)
			return u
		})
}

// DiffSlices compares desired PeerSlices with the published ones.
func DiffSlices(desired, existing []netv1.PeerSlice) Changes[netv1.PeerSlice] {
	return DiffSlicesKnown(desired, existing, nil)
}

// DiffSlicesKnown is DiffSlices with known, as DiffPlansKnown.
func DiffSlicesKnown(desired, existing []netv1.PeerSlice, known func(d, e *netv1.PeerSlice) bool) Changes[netv1.PeerSlice] {
	return diff(desired, existing, known,
		func(o *netv1.PeerSlice) string { return o.Name },
		func(d, e *netv1.PeerSlice) bool {
			return equality.Semantic.DeepEqual(d.Spec, e.Spec) && labelsContain(e.Labels, d.Labels)
		},
		func(d, e *netv1.PeerSlice) netv1.PeerSlice {
			u := *e.DeepCopy()
			u.Spec = *d.Spec.DeepCopy()
			u.Labels = mergeLabels(u.Labels, d.Labels)
			return u
		})
}

func diff[T any](desired, existing []T, known func(d, e *T) bool, name func(*T) string, equal func(d, e *T) bool, update func(d, e *T) T) Changes[T] {
	var c Changes[T]
	byName := make(map[string]*T, len(existing))
	for i := range existing {
		byName[name(&existing[i])] = &existing[i]
	}
	want := make(map[string]bool, len(desired))
	for i := range desired {
		d := &desired[i]
		want[name(d)] = true
		e := byName[name(d)]
		switch {
		case e == nil:
			c.Create = append(c.Create, *d)
		case known != nil && known(d, e):
		case !equal(d, e):
			c.Update = append(c.Update, update(d, e))
		}
	}
	for i := range existing {
		if !want[name(&existing[i])] {
			c.Delete = append(c.Delete, existing[i])
		}
	}
	return c
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func mergeLabels(have, want map[string]string) map[string]string {
	out := make(map[string]string, len(have)+len(want))
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}
