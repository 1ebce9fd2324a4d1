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

// writtenVersions remembers, per machine, the resourceVersion of this replica's last write. The watch
// event of every write wakes the machine, often while the cache still shows an older version (a pass
// writes several times): a pass on such a cache would repeat work already recorded (another SSH round,
// the same status patched again, a reservation refused with Conflict). Resource versions are compared
// as Kubernetes defines them (k8s.io/apimachinery/pkg/util/resourceversion); where they cannot be
// compared nothing counts as stale. Only a cache behind this replica's own write is skipped, so nothing
// another writer did is ever ignored; the safety reads of the claim stay uncached as before.
type writtenVersions struct {
	mu sync.Mutex
	rv map[client.ObjectKey]string
}

// record remembers o's resourceVersion as written (the newer of the two when one is known).
func (w *writtenVersions) record(o client.Object) {
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

// stale reports whether cached o is older than this replica's last write of it.
func (w *writtenVersions) stale(o client.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.rv[client.ObjectKeyFromObject(o)]
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(o.GetResourceVersion(), old)
	return err == nil && c < 0
}

// forget drops what is remembered of the machine at key (it is gone).
func (w *writtenVersions) forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}

// recordingClient records in w the resourceVersion of every object it patches (CAPI's patch helper
// patches copies of the machine, so the machine itself never shows the version written).
type recordingClient struct {
	client.Client
	w *writtenVersions
}

func (c recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err //nolint:wrapcheck // the caller wraps it, as it would the client's own error
	}
	c.w.record(obj)
	return nil
}

func (c recordingClient) Status() client.SubResourceWriter {
	return recordingStatus{SubResourceWriter: c.Client.Status(), w: c.w}
}

type recordingStatus struct {
	client.SubResourceWriter
	w *writtenVersions
}

func (s recordingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err //nolint:wrapcheck // the caller wraps it, as it would the client's own error
	}
	s.w.record(obj)
	return nil
}
