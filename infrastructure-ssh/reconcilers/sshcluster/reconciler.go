// Package sshcluster reconciles YonderSSHClusters with the shared infrastructure cluster reconciler
// (pkg/infracluster): the control plane endpoint is passed through as given, failure domains are
// computed from the host inventory, and the cluster infrastructure is provisioned at once (the hosts
// exist already).
package sshcluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/infracluster"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshclusters;yondersshclusters/status;yondersshclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshclustertemplates;yondersshmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// Reconciler reconciles YonderSSHClusters.
type Reconciler = infracluster.Reconciler[*infrav1.YonderSSHCluster, *infrav1.YonderSSHHost]

// New returns the YonderSSHCluster reconciler.
func New(c client.Client, watchFilterValue string) *Reconciler {
	return &Reconciler{Client: c, WatchFilterValue: watchFilterValue, Adapter: Adapter{}}
}

// Adapter is the SSH provider's part of the infrastructure cluster reconciler.
type Adapter struct{ hostpool.Pool }

// ClusterKind implements infracluster.Adapter.
func (Adapter) ClusterKind() string { return "YonderSSHCluster" }

// NewCluster implements infracluster.Adapter.
func (Adapter) NewCluster() *infrav1.YonderSSHCluster { return &infrav1.YonderSSHCluster{} }

// ListClusters implements infracluster.Adapter.
func (Adapter) ListClusters(ctx context.Context, r client.Reader, namespace string) ([]*infrav1.YonderSSHCluster, error) {
	l := &infrav1.YonderSSHClusterList{}
	if err := r.List(ctx, l, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list YonderSSHClusters in namespace %s: %w", namespace, err)
	}
	out := make([]*infrav1.YonderSSHCluster, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// HostSelector implements infracluster.Adapter.
func (Adapter) HostSelector(c *infrav1.YonderSSHCluster) *metav1.LabelSelector {
	return c.Spec.HostSelector.LabelSelector()
}

// SpecFailureDomains implements infracluster.Adapter: a YonderSSHCluster names none of its own.
func (Adapter) SpecFailureDomains(*infrav1.YonderSSHCluster) []string { return nil }

// SetProvisioned implements infracluster.Adapter.
func (Adapter) SetProvisioned(c *infrav1.YonderSSHCluster, fds []clusterv1.FailureDomain) {
	c.Status.FailureDomains = fds
	c.Status.Initialization.Provisioned = ptr.To(true)
}

// Reasons implements infracluster.Adapter.
func (Adapter) Reasons() (computed, invalidSelector string) {
	return infrav1.YonderSSHClusterFailureDomainsReadyReason, infrav1.YonderSSHClusterInvalidHostSelectorReason
}
