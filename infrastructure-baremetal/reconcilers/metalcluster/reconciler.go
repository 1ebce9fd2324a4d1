// Package metalcluster reconciles YonderMetalClusters with the shared infrastructure cluster reconciler
// (pkg/infracluster): the control plane endpoint is passed through as given (the control plane is
// external, see YonderControlPlane), failure domains come from spec and from the failure-domain label of
// the BareMetalHost inventory, and the cluster infrastructure is provisioned at once (the hosts exist
// already).
package metalcluster

import (
	"context"
	"fmt"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/infracluster"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclusters;yondermetalclusters/status;yondermetalclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclustertemplates;yondermetalmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// Reconciler reconciles YonderMetalClusters.
type Reconciler = infracluster.Reconciler[*infrav1.YonderMetalCluster, *metal3v1.BareMetalHost]

// New returns the YonderMetalCluster reconciler.
func New(c client.Client, watchFilterValue string) *Reconciler {
	return &Reconciler{Client: c, WatchFilterValue: watchFilterValue, Adapter: Adapter{}}
}

// Adapter is the bare-metal provider's part of the infrastructure cluster reconciler.
type Adapter struct{ hostpool.Pool }

// ClusterKind implements infracluster.Adapter.
func (Adapter) ClusterKind() string { return "YonderMetalCluster" }

// NewCluster implements infracluster.Adapter.
func (Adapter) NewCluster() *infrav1.YonderMetalCluster { return &infrav1.YonderMetalCluster{} }

// ListClusters implements infracluster.Adapter.
func (Adapter) ListClusters(ctx context.Context, r client.Reader, namespace string) ([]*infrav1.YonderMetalCluster, error) {
	l := &infrav1.YonderMetalClusterList{}
	if err := r.List(ctx, l, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list YonderMetalClusters in namespace %s: %w", namespace, err)
	}
	out := make([]*infrav1.YonderMetalCluster, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// HostSelector implements infracluster.Adapter.
func (Adapter) HostSelector(c *infrav1.YonderMetalCluster) *metav1.LabelSelector {
	return c.Spec.HostSelector.LabelSelector()
}

// SpecFailureDomains implements infracluster.Adapter: spec.failureDomains.
func (Adapter) SpecFailureDomains(c *infrav1.YonderMetalCluster) []string {
	return c.Spec.FailureDomains
}

// SetProvisioned implements infracluster.Adapter.
func (Adapter) SetProvisioned(c *infrav1.YonderMetalCluster, fds []clusterv1.FailureDomain) {
	c.Status.FailureDomains = fds
	c.Status.Initialization.Provisioned = ptr.To(true)
}

// Reasons implements infracluster.Adapter.
func (Adapter) Reasons() (computed, invalidSelector string) {
	return infrav1.YonderMetalClusterFailureDomainsReadyReason, infrav1.YonderMetalClusterInvalidHostSelectorReason
}
