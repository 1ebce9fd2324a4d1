package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
)

// A machine's finalizer is what makes its deletion release its host, and the finalizer can fail to hold:
// kube-apiserver (through at least 1.36) lets a DELETE that read the object before a finalizer was added
// delete it anyway (kubernetes/kubernetes#77988), and our first write of a machine adds the finalizer
// together with the reservation. The claim that follows then lands on a host for a machine that is gone.
// confirmClaim releases such a claim at once, but a controller that dies between the claim and that
// release, or an operator who removes the finalizer by hand, leaves the host claimed by nobody, out of the
// pool for good. releaseOrphans closes that: every host event wakes the host's consumer by name (so every
// claimed host is looked at when a controller starts), and a consumer that the API server no longer has
// under that claim identity gets its hosts released.
//
// The Cluster must exist and not be paused: clusterctl move pauses it, and creates the hosts it moves
// before the machines that hold them.

// releaseOrphans releases the hosts claimed by the machine at key, which the cache no longer has, once the
// API server confirms that no machine of that name holds them.
func (r *Reconciler[M, H]) releaseOrphans(ctx context.Context, key client.ObjectKey) error {
	a := r.Adapter
	hosts, err := List(ctx, r.Client, a.NewHost(), client.InNamespace(key.Namespace))
	if err != nil {
		return fmt.Errorf("failed to list %ss in namespace %s: %w", a.HostKind(), key.Namespace, err)
	}
	var held []H
	for _, h := range hosts {
		if c := a.ConsumerOf(h); c != nil && c.Name == key.Name {
			held = append(held, h)
		}
	}
	if len(held) == 0 {
		return nil
	}
	// The cache may still show a claim this machine's deletion has just released (the common case, which
	// then costs one GET and no write), or miss a machine created a moment ago: only the API server's
	// answers count.
	var stillHeld []H
	for _, h := range held {
		cur := a.NewHost()
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("failed to get %s %s: %w", a.HostKind(), klog.KObj(h), err)
		}
		if c := a.ConsumerOf(cur); c != nil && c.Name == key.Name {
			stillHeld = append(stillHeld, cur)
		}
	}
	if len(stillHeld) == 0 {
		return nil
	}
	m := a.NewMachine()
	live := ""
	if err := r.APIReader.Get(ctx, key, m); err == nil {
		live = string(ID(m, a.Spec().Keys.ClaimID))
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get %s %s: %w", a.Spec().MachineKind, klog.KRef(key.Namespace, key.Name), err)
	}
	log := ctrl.LoggerFrom(ctx)
	for _, h := range stillHeld {
		c := a.ConsumerOf(h)
		if string(c.ID) == live {
			continue
		}
		ok, why, err := r.mayReleaseOrphan(ctx, key.Namespace, c.Cluster)
		if err != nil {
			return err
		}
		if !ok {
			log.V(4).Info("Keeping the claim of a machine that is gone: "+why, a.HostKind(), klog.KObj(h))
			continue
		}
		log.Info("Releasing host claimed by a machine that no longer exists", a.HostKind(), klog.KObj(h))
		if err := Release(ctx, r.Client, r.APIReader, a, h, key.Name, c.ID, func(h H) { a.ReleaseOrphan(h, key.Name) }); err != nil {
			return err
		}
		r.recordOrphanReleased(h, key.Name)
	}
	return nil
}

// mayReleaseOrphan reports whether the claims of the machines of Cluster name may be released without
// their machines: the Cluster exists, is watched by this controller and is not paused.
func (r *Reconciler[M, H]) mayReleaseOrphan(ctx context.Context, namespace, name string) (bool, string, error) {
	if name == "" {
		return false, "the claim names no Cluster", nil
	}
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "its Cluster " + name + " does not exist (yet)", nil
		}
		return false, "", fmt.Errorf("failed to get Cluster %s: %w", klog.KRef(namespace, name), err)
	}
	if r.WatchFilterValue != "" && cluster.Labels[clusterv1.WatchLabel] != r.WatchFilterValue {
		return false, "its Cluster is not watched by this controller", nil
	}
	if annotations.IsPaused(cluster, cluster) {
		return false, "its Cluster is paused", nil
	}
	return true, "", nil
}
