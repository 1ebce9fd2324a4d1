package sshhost

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

// writtenVersions remembers, per host, the resourceVersion of this controller's last write of it. Every
// write of a host wakes it again (its own watch event, and every write of its machine), often while the
// cache still shows the host from before the write: a pass writes metadata and status apart, and a
// loaded API server delivers watch events late (seconds, beside CAPI's controllers at full pace). A pass
// on such a cache computes status from what it already replaced: it probes over SSH again while the cache
// does not show the first probe, its status patch, locked to the stale resourceVersion, is refused with
// Conflict, and the fallback (CAPI's patch helper) rewrites status from the stale base, an older phase
// included; each step's one status write became three to eight. Only a cache behind this controller's
// own write counts as stale, so nothing another writer did is ever ignored. Resource versions are
// compared as Kubernetes defines them; where they do not compare nothing counts as stale. (pkg/claim
// keeps the same record of the machines its reconciler writes.)
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

// stale reports whether cached o is older than this controller's last write of it.
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

// forget drops what is remembered of the host at key (it is gone).
func (w *writtenVersions) forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}

// hostWriter records in w the resourceVersion of every YonderSSHHost it patches: claim.PatchObject and
// its fallback, CAPI's patch helper, write copies of the host, so the host itself does not always show
// the version written. Other kinds (the credential Secrets) pass through unrecorded.
type hostWriter struct {
	client.Client
	w *writtenVersions
}

func (c hostWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err //nolint:wrapcheck // the caller wraps it, as it would the client's own error
	}
	c.w.recordHost(obj)
	return nil
}

func (c hostWriter) Status() client.SubResourceWriter {
	return hostStatusWriter{SubResourceWriter: c.Client.Status(), w: c.w}
}

type hostStatusWriter struct {
	client.SubResourceWriter
	w *writtenVersions
}

func (s hostStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err //nolint:wrapcheck // the caller wraps it, as it would the client's own error
	}
	s.w.recordHost(obj)
	return nil
}

// recordHost records o when it is a YonderSSHHost (a Secret of the same name is another object).
func (w *writtenVersions) recordHost(o client.Object) {
	if _, ok := o.(*infrav1.YonderSSHHost); ok {
		w.record(o)
	}
}
