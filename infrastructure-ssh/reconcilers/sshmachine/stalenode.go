package sshmachine

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

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
)

// deleteStaleNodes removes the Node objects that still carry a released host's providerID from the
// workload cluster. CAPI deletes a Machine's Node itself, except while the whole Cluster is being deleted:
// it assumes the workload cluster goes away with it. An attached control plane outlives the Cluster, so
// those Nodes would stay behind — NotReady, with a providerID the next Machine on the same host reuses, and
// CAPI refuses to match a Machine to a Node when two Nodes share its providerID. Called only after the
// host was cleaned (its kubelet is gone); best effort: a workload cluster that cannot be reached does not
// hold the release, the failure is logged with what to delete by hand.
func (r *Reconciler) deleteStaleNodes(ctx context.Context, cluster *clusterv1.Cluster, providerID string) {
	log := ctrl.LoggerFrom(ctx)
	if providerID == "" {
		return
	}
	data, err := kubeconfig.FromSecret(ctx, r.Client, client.ObjectKeyFromObject(cluster))
	if err != nil {
		if !apierrors.IsNotFound(err) {
			log.Info("Skipping stale Node removal: no workload kubeconfig", "providerID", providerID, "reason", err.Error())
		}
		return
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		log.Info("Skipping stale Node removal: unusable workload kubeconfig", "providerID", providerID, "reason", err.Error())
		return
	}
	cfg.UserAgent = "yonder-ssh-manager"
	cfg.Timeout = 10 * time.Second
	wc, err := client.New(cfg, client.Options{})
	if err != nil {
		log.Info("Skipping stale Node removal: no workload client", "providerID", providerID, "reason", err.Error())
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
