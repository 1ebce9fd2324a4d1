// Package workload reaches a Cluster's workload apiserver from a management-cluster controller, through
// the <cluster>-kubeconfig Secret CAPI's contract has the control plane provider write.
package workload

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/kubeconfig"
)

// requestTimeout bounds each request to the workload apiserver: a controller must not hang on a
// workload cluster that went away.
const requestTimeout = 10 * time.Second

// Client returns an uncached client of the workload apiserver of the Cluster cluster, built from its
// <cluster>-kubeconfig Secret; userAgent names the calling manager in the workload apiserver's audit log.
// The error wraps the Secret's NotFound when there is no kubeconfig (yet, or any more).
func Client(ctx context.Context, c client.Client, cluster client.ObjectKey, userAgent string) (client.Client, error) {
	data, err := kubeconfig.FromSecret(ctx, c, cluster)
	if err != nil {
		return nil, fmt.Errorf("failed to read the workload kubeconfig of Cluster %s: %w", cluster, err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("failed to load the workload kubeconfig of Cluster %s: %w", cluster, err)
	}
	cfg.UserAgent = userAgent
	cfg.Timeout = requestTimeout
	wc, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("failed to create a client of the workload cluster of Cluster %s: %w", cluster, err)
	}
	return wc, nil
}

// DeleteStaleNodes removes the Node objects that still carry a released host's providerID from the
// workload cluster of cluster. CAPI deletes a Machine's Node itself, except while the whole Cluster is
// being deleted: it assumes the workload cluster goes away with it. Yonder's control plane is an attached
// cluster that outlives the Cluster, so those Nodes would stay behind — NotReady, with the providerID the
// next Machine on the same host reuses, and CAPI refuses to match a Machine to a Node when two Nodes share
// its providerID. Call it only once the host's kubelet is gone (host cleaned or deprovisioned), or the
// kubelet registers the Node again. Best effort: a workload cluster that cannot be reached does not hold
// the release; the failure is logged with what to delete by hand.
func DeleteStaleNodes(ctx context.Context, c client.Client, cluster client.ObjectKey, providerID, userAgent string) {
	log := ctrl.LoggerFrom(ctx)
	if providerID == "" {
		return
	}
	wc, err := Client(ctx, c, cluster, userAgent)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			log.Info("Skipping stale Node removal: no workload client", "providerID", providerID, "reason", err.Error())
		}
		return
	}
	nodes := &corev1.NodeList{}
	if err := wc.List(ctx, nodes); err != nil {
		log.Info("Listing workload Nodes failed; delete the Node with this providerID by hand if it stays", "providerID", providerID, "reason", err.Error())
		return
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Spec.ProviderID != providerID {
			continue
		}
		if err := wc.Delete(ctx, n); err != nil && !apierrors.IsNotFound(err) {
			log.Info(fmt.Sprintf("Deleting stale Node failed; delete it by hand: kubectl delete node %s", n.Name), "Node", klog.KObj(n), "reason", err.Error())
			continue
		}
		log.Info("Deleted stale Node of the released host", "Node", klog.KObj(n))
	}
}
