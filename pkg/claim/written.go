package claim

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StaleRetry is how soon a pass that found the cache behind this controller's own last write of the
// machine runs again, should the watch event of that write not wake it first (it normally does).
const StaleRetry = time.Second

// WrittenVersions remembers, per object, the resourceVersion of this replica's last write of it. The
// watch event of every write wakes the object, often while the cache still shows an older version (a
// pass writes several times, and a loaded API server delivers watch events seconds late): a pass on such
// a cache would repeat work already recorded (another SSH round, the same status patched again from an
// older base, a write refused with Conflict). The machine reconciler here and the SSH host controller
// skip such a pass. Resource versions are compared as Kubernetes defines them
// (k8s.io/apimachinery/pkg/util/resourceversion); where they cannot be compared nothing counts as stale.
// Only a cache behind this replica's own write is skipped, so nothing another writer did is ever ignored;
// the safety reads of the claim stay uncached as before. The zero value is ready to use.
type WrittenVersions struct {
	mu sync.Mutex
	rv map[client.ObjectKey]string
}

// Record remembers o's resourceVersion as written (the newer of the two when one is known).
func (w *WrittenVersions) Record(o client.Object) {
	rv := o.GetResourceVersion()
	if rv == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rv == nil {
		w.rv = map[client.ObjectKey]string{}
	}
	k := client.ObjectKeyFromObject(o)
	if old, ok := w.rv[k]; ok {
		if c, err := resourceversion.CompareResourceVersion(old, rv); err == nil && c > 0 {
			return
		}
	}
	w.rv[k] = rv
}

// Stale reports whether cached o is older than this replica's last write of it.
func (w *WrittenVersions) Stale(o client.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.rv[client.ObjectKeyFromObject(o)]
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(o.GetResourceVersion(), old)
	return err == nil && c < 0
}

// Forget drops what is remembered of the object at key (it is gone).
func (w *WrittenVersions) Forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}

// RecordingClient records in Written the resourceVersion of every object it patches (spec and metadata,
// or status) that Only accepts (every object when Only is nil). CAPI's patch helper patches copies of
// the object, so the object itself does not always show the version written.
type RecordingClient struct {
	client.Client
	Written *WrittenVersions
	Only    func(client.Object) bool
}

func (c RecordingClient) record(o client.Object) {
	if c.Only == nil || c.Only(o) {
		c.Written.Record(o)
	}
}

// Patch implements client.Writer.
func (c RecordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err //nolint:wrapcheck // the caller wraps it, as it would the client's own error
	}
	c.record(obj)
	return nil
}

// Status implements client.StatusClient.
func (c RecordingClient) Status() client.SubResourceWriter {
	return recordingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type recordingStatus struct {
	client.SubResourceWriter
	c RecordingClient
}

func (s recordingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err //nolint:wrapcheck // the caller wraps it, as it would the client's own error
	}
	s.c.record(obj)
	return nil
}
