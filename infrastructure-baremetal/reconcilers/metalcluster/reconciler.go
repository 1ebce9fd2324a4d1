// Package metalcluster reconciles YonderMetalClusters with the shared infrastructure cluster reconciler
// (pkg/infracluster): the control plane endpoint is passed through as given (the control plane is
// external, see YonderControlPlane), failure domains come from spec and from the failure-domain label of
// the BareMetalHost inventory, and the cluster infrastructure is provisioned at once (the hosts exist
// already).
package metalcluster

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/infracluster"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclusters;yondermetalclusters/status;yondermetalclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclustertemplates;yondermetalmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// New returns the YonderMetalCluster reconciler: the shared infrastructure cluster reconciler over this provider's
// host pool.
func New(c client.Client, watchFilterValue string) *infracluster.Reconciler[*infrav1.YonderMetalCluster, *metal3v1.BareMetalHost] {
	return &infracluster.Reconciler[*infrav1.YonderMetalCluster, *metal3v1.BareMetalHost]{Client: c, WatchFilterValue: watchFilterValue, Inventory: hostpool.Pool{},
		Spec: infracluster.Spec{ClusterKind: "YonderMetalCluster", ComputedReason: infrav1.YonderMetalClusterFailureDomainsReadyReason, InvalidHostSelectorReason: infrav1.YonderMetalClusterInvalidHostSelectorReason}}
}
