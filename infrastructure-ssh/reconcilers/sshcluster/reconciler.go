// Package sshcluster reconciles YonderSSHClusters with the shared infrastructure cluster reconciler
// (pkg/infracluster): the control plane endpoint is passed through as given, failure domains are
// computed from the host inventory, and the cluster infrastructure is provisioned at once (the hosts
// exist already).
package sshcluster

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/infracluster"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshclusters;yondersshclusters/status;yondersshclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshclustertemplates;yondersshmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// New returns the YonderSSHCluster reconciler: the shared infrastructure cluster reconciler over this provider's
// host pool.
func New(c client.Client, watchFilterValue string) *infracluster.Reconciler[*infrav1.YonderSSHCluster, *infrav1.YonderSSHHost] {
	return &infracluster.Reconciler[*infrav1.YonderSSHCluster, *infrav1.YonderSSHHost]{Client: c, WatchFilterValue: watchFilterValue, Inventory: hostpool.Pool{},
		Spec: infracluster.Spec{ClusterKind: "YonderSSHCluster", ComputedReason: infrav1.YonderSSHClusterFailureDomainsReadyReason, InvalidHostSelectorReason: infrav1.YonderSSHClusterInvalidHostSelectorReason}}
}
