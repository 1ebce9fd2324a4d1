// Package claim chooses a free YonderSSHHost for a YonderSSHMachine and records the claim on the host
// with optimistic concurrency: the update carries the resourceVersion that was read, so when two
// Machines (or two controller replicas) race for one host, exactly one update succeeds and the other
// gets a conflict and chooses again. The claim is recorded before any SSH work.
package claim

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

// Consumer is who claims.
type Consumer struct {
	Name, ClusterName string
	UID               types.UID
}

// Ref returns the host's consumerRef for c.
func (c Consumer) Ref() *infrav1.ConsumerReference {
	return &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: c.Name, UID: string(c.UID), ClusterName: c.ClusterName}
}

// IsClaimedBy reports whether h is claimed by the consumer with uid.
func IsClaimedBy(h *infrav1.YonderSSHHost, uid types.UID) bool {
	return h.Spec.ConsumerRef != nil && h.Spec.ConsumerRef.UID == string(uid)
}

// Available reports whether h can be claimed.
func Available(h *infrav1.YonderSSHHost) bool {
	return h.Spec.ConsumerRef == nil && h.DeletionTimestamp.IsZero() && h.Spec.HostKey != "" &&
		h.Annotations[infrav1.NeedsCleanupAnnotation] == "" && h.Labels[infrav1.ConsumerUIDLabel] == ""
}

// Candidates returns the hosts c may claim, best first: matching sel and failureDomain (when set),
// hosts whose last probe failed last, hosts in the failure domain with the fewest hosts of the same
// Cluster first (spreading), and among equals an order that depends on the consumer's UID, so
// concurrent claims of different Machines rarely collide on the same host.
func Candidates(hosts []infrav1.YonderSSHHost, sel *metav1.LabelSelector, failureDomain string, c Consumer) ([]*infrav1.YonderSSHHost, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("failed to parse hostSelector: %w", err)
	}
	perDomain := map[string]int{}
	for i := range hosts {
		if r := hosts[i].Spec.ConsumerRef; r != nil && r.ClusterName == c.ClusterName {
			perDomain[hosts[i].Spec.FailureDomain]++
		}
	}
	var out []*infrav1.YonderSSHHost
	for i := range hosts {
		h := &hosts[i]
		if !Available(h) || !s.Matches(labels.Set(h.Labels)) {
			continue
		}
		if failureDomain != "" && h.Spec.FailureDomain != failureDomain {
			continue
		}
		out = append(out, h)
	}
	rank := func(h *infrav1.YonderSSHHost) uint32 {
		f := fnv.New32a()
		_, _ = f.Write([]byte(string(c.UID) + "/" + h.Name))
		return f.Sum32()
	}
	sort.SliceStable(out, func(i, j int) bool {
		ui, uj := conditions.IsFalse(out[i], infrav1.HostReachableCondition), conditions.IsFalse(out[j], infrav1.HostReachableCondition)
		if ui != uj {
			return !ui
		}
		di, dj := perDomain[out[i].Spec.FailureDomain], perDomain[out[j].Spec.FailureDomain]
		if di != dj {
			return di < dj
		}
		return rank(out[i]) < rank(out[j])
	})
	return out, nil
}

// Claim records c on h. It fails with a conflict when h changed since it was read.
func Claim(ctx context.Context, w client.Writer, h *infrav1.YonderSSHHost, c Consumer) error {
	h = h.DeepCopy()
	h.Spec.ConsumerRef = c.Ref()
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[infrav1.ConsumerUIDLabel] = string(c.UID)
	if err := w.Update(ctx, h); err != nil {
		return fmt.Errorf("failed to claim YonderSSHHost %s: %w", klog.KObj(h), err)
	}
	return nil
}

// Release clears the claim of uid on the host (no-op when it is not claimed by uid). needsCleanup, when
// not empty, marks the host as released without cleanup. A conflict (the host controller updates status
// all the time) is retried on a fresh uncached read.
func Release(ctx context.Context, c client.Client, r client.Reader, host *infrav1.YonderSSHHost, uid types.UID, needsCleanup string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		h := &infrav1.YonderSSHHost{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(host), h); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("failed to get YonderSSHHost %s: %w", klog.KObj(host), err)
		}
		return release(ctx, c, h, uid, needsCleanup)
	})
}

func release(ctx context.Context, w client.Writer, h *infrav1.YonderSSHHost, uid types.UID, needsCleanup string) error {
	if !IsClaimedBy(h, uid) && h.Labels[infrav1.ConsumerUIDLabel] != string(uid) {
		return nil
	}
	h.Spec.ConsumerRef = nil
	delete(h.Labels, infrav1.ConsumerUIDLabel)
	if needsCleanup != "" {
		if h.Annotations == nil {
			h.Annotations = map[string]string{}
		}
		h.Annotations[infrav1.NeedsCleanupAnnotation] = needsCleanup
	}
	// Returned unwrapped so RetryOnConflict recognises a conflict.
	return w.Update(ctx, h)
}
