// Package hostpool is the SSH provider's view of its inventory for the shared claim package (pkg/claim):
// who holds a YonderSSHHost (spec.consumerRef, and the consumer-uid label that lets claims be listed by
// label), whether a host can be claimed, and where it is.
package hostpool

import (
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// ConsumerKind is the kind recorded in a claimed host's spec.consumerRef.
const ConsumerKind = "YonderSSHMachine"

// Pool implements claim.Inventory for YonderSSHHosts.
type Pool struct{}

var _ claim.Inventory[*infrav1.YonderSSHHost] = Pool{}

// HostKind implements claim.Inventory.
func (Pool) HostKind() string { return "YonderSSHHost" }

// NewHost implements claim.Inventory.
func (Pool) NewHost() *infrav1.YonderSSHHost { return &infrav1.YonderSSHHost{} }

// ConsumerOf implements claim.Inventory. A consumer-uid label without a consumerRef (a claim half
// cleared by hand) still counts as a claim by that identity, so the host is not handed out again.
func (Pool) ConsumerOf(h *infrav1.YonderSSHHost) *claim.Consumer {
	if r := h.Spec.ConsumerRef; r != nil {
		return &claim.Consumer{Name: r.Name, ID: types.UID(r.UID), Cluster: r.ClusterName}
	}
	if id := h.Labels[infrav1.ConsumerUIDLabel]; id != "" {
		return &claim.Consumer{ID: types.UID(id)}
	}
	return nil
}

// SetConsumer implements claim.Inventory.
func (Pool) SetConsumer(h *infrav1.YonderSSHHost, c claim.Consumer) {
	h.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: ConsumerKind, Name: c.Name, UID: string(c.ID), ClusterName: c.Cluster}
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[infrav1.ConsumerUIDLabel] = string(c.ID)
}

// ClearConsumer implements claim.Inventory.
func (Pool) ClearConsumer(h *infrav1.YonderSSHHost) {
	h.Spec.ConsumerRef = nil
	delete(h.Labels, infrav1.ConsumerUIDLabel)
}

// Available implements claim.Inventory: free, not being deleted, with a pinned host key (a
// trust-on-first-use host is claimable once its first probe recorded the key), and not released without
// cleanup.
func (Pool) Available(h *infrav1.YonderSSHHost) bool {
	return h.Spec.ConsumerRef == nil && h.DeletionTimestamp.IsZero() && h.Spec.HostKey != "" &&
		h.Annotations[infrav1.NeedsCleanupAnnotation] == "" && h.Labels[infrav1.ConsumerUIDLabel] == ""
}

// FailureDomain implements claim.Inventory.
func (Pool) FailureDomain(h *infrav1.YonderSSHHost) string { return h.Spec.FailureDomain }

// Demoted implements claim.Inventory: a host whose last probe failed is chosen last.
func (Pool) Demoted(h *infrav1.YonderSSHHost) bool {
	return conditions.IsFalse(h, infrav1.YonderSSHHostReachableCondition)
}
