package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
)

// PatchObject writes what changed on obj since base (obj as last read or written): metadata and spec
// in one merge patch (as CAPI's patch helper sends them), then status WITH its conditions in one merge
// patch. CAPI's patch helper sends the conditions in a request of their own, so that controllers that
// share an object's conditions merge their changes; the objects written here have one writer of their
// status (their controller), so one request does. The status patch carries the resourceVersion at which
// the server's status is known to be base's (base's own, or the one the spec patch returned when that
// showed base's status): the whole conditions list it sends replaces exactly what this pass started
// from, or the patch is refused with a conflict. On a conflict (another replica, a person) the write
// falls back to CAPI's patch helper, which applies this pass's condition changes to the latest object
// (owned conditions win) and the rest of status as a plain merge patch: exactly as before.
//
// When the spec patch raised the generation by one (e.g. spec.providerID set) and nobody else's write
// did, conditions stamped with the old generation are stamped with the new one: they were computed by
// the pass that made the change, and another pass would only write them again to say so.
//
// On success obj carries the resourceVersion and generation written; the caller's next base is a copy.
func PatchObject(ctx context.Context, c client.Client, base, obj client.Object, owned []string) error {
	b, err := runtime.DefaultUnstructuredConverter.ToUnstructured(base)
	if err != nil {
		return fmt.Errorf("failed to convert %s: %w", obj.GetName(), err)
	}
	a, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("failed to convert %s: %w", obj.GetName(), err)
	}
	specData, err := mergePatch(without(b, "status"), without(a, "status"))
	if err != nil {
		return err
	}
	lockRV, serverStatus := base.GetResourceVersion(), b["status"]
	if specData != nil {
		written := obj.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of obj has obj's type
		if err := c.Patch(ctx, written, client.RawPatch(types.MergePatchType, specData)); err != nil {
			return fmt.Errorf("failed to patch spec and metadata: %w", err)
		}
		w, err := runtime.DefaultUnstructuredConverter.ToUnstructured(written)
		if err != nil {
			return fmt.Errorf("failed to convert %s: %w", obj.GetName(), err)
		}
		lockRV, serverStatus = written.GetResourceVersion(), w["status"]
		if g := written.GetGeneration(); g != obj.GetGeneration() {
			if g == obj.GetGeneration()+1 && changesSpec(specData) {
				// This write made the new generation: what this pass computed observed it.
				restampConditions(obj, obj.GetGeneration(), g)
			}
			obj.SetGeneration(g)
			if a, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
				return fmt.Errorf("failed to convert %s: %w", obj.GetName(), err)
			}
		}
		obj.SetResourceVersion(lockRV)
	}
	statusData, err := mergePatch(map[string]any{"status": b["status"]}, map[string]any{"status": a["status"]})
	if err != nil || statusData == nil {
		return err
	}
	if reflect.DeepEqual(serverStatus, b["status"]) {
		err = patchStatusLocked(ctx, c, obj, statusData, lockRV)
		if err == nil || !apierrors.IsConflict(err) {
			return ignoreGone(obj, err)
		}
	}
	// Someone else wrote status since this pass read it: merge as CAPI's patch helper does.
	fallback := base.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of base has base's type
	if specData != nil {
		// The spec and metadata are written already; only status is left to the helper.
		if a, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return fmt.Errorf("failed to convert %s: %w", obj.GetName(), err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(with(a, "status", b["status"]), fallback); err != nil {
			return fmt.Errorf("failed to convert %s: %w", obj.GetName(), err)
		}
	}
	h, err := patch.NewHelper(fallback, c)
	if err != nil {
		return fmt.Errorf("failed to create patch helper: %w", err)
	}
	return ignoreGone(obj, h.Patch(ctx, obj, patch.WithOwnedConditions{Conditions: owned}))
}

// patchStatusLocked sends data to obj's status under resourceVersion rv; obj takes the version written.
func patchStatusLocked(ctx context.Context, c client.Client, obj client.Object, data []byte, rv string) error {
	p := map[string]any{}
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("failed to read status patch: %w", err)
	}
	p["metadata"] = map[string]any{"resourceVersion": rv}
	locked, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("failed to write status patch: %w", err)
	}
	written := obj.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of obj has obj's type
	if err := c.Status().Patch(ctx, written, client.RawPatch(types.MergePatchType, locked)); err != nil {
		return fmt.Errorf("failed to patch status: %w", err)
	}
	obj.SetResourceVersion(written.GetResourceVersion())
	return nil
}

// ignoreGone drops the error of a status write to an object that went away as its last finalizer was
// removed (as CAPI's patch helper does).
func ignoreGone(obj client.Object, err error) error {
	if err != nil && apierrors.IsNotFound(err) && !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0 {
		return nil
	}
	return err
}

// restampConditions moves obj's conditions observed at generation from to generation to.
func restampConditions(obj client.Object, from, to int64) {
	s, ok := obj.(conditions.Setter)
	if !ok {
		return
	}
	cs := s.GetConditions()
	changed := false
	for i := range cs {
		if cs[i].ObservedGeneration == from {
			cs[i].ObservedGeneration = to
			changed = true
		}
	}
	if changed {
		s.SetConditions(cs)
	}
}

// changesSpec reports whether the merge patch data touches spec.
func changesSpec(data []byte) bool {
	p := map[string]any{}
	if err := json.Unmarshal(data, &p); err != nil {
		return false
	}
	_, ok := p["spec"]
	return ok
}

// mergePatch returns the JSON merge patch from before to after; nil when nothing changed.
func mergePatch(before, after map[string]any) ([]byte, error) {
	data, err := client.MergeFrom(&unstructured.Unstructured{Object: before}).Data(&unstructured.Unstructured{Object: after})
	if err != nil {
		return nil, fmt.Errorf("failed to compute patch: %w", err)
	}
	if string(data) == "{}" {
		return nil, nil
	}
	return data, nil
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

func with(m map[string]any, key string, v any) map[string]any {
	out := without(m, key)
	if v != nil {
		out[key] = v
	}
	return out
}
