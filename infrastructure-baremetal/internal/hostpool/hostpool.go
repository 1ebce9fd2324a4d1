// Package hostpool is the bare-metal provider's view of its inventory, Metal3 BareMetalHosts, for the
// shared claim package (pkg/claim): who holds a host (spec.consumerRef of kind YonderMetalMachine, and the
// cluster label that spreading counts), whether a host can be claimed (CAPM3's rules), and where it is
// (the failure-domain label).
package hostpool

import (
	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// ConsumerKind is the kind written into a claimed host's spec.consumerRef.
const ConsumerKind = "YonderMetalMachine"

// Pool implements claim.Inventory for BareMetalHosts.
type Pool struct{}

var _ claim.Inventory[*metal3v1.BareMetalHost] = Pool{}

// HostKind implements claim.Inventory.
func (Pool) HostKind() string { return "BareMetalHost" }

// NewHost implements claim.Inventory.
func (Pool) NewHost() *metal3v1.BareMetalHost { return &metal3v1.BareMetalHost{} }

// ConsumerOf implements claim.Inventory: only claims of YonderMetalMachines count (a Metal3Machine's
// claim makes the host unavailable, but it is not ours).
func (Pool) ConsumerOf(h *metal3v1.BareMetalHost) *claim.Consumer {
	r := h.Spec.ConsumerRef
	if r == nil || r.Kind != ConsumerKind {
		return nil
	}
	return &claim.Consumer{Name: r.Name, ID: r.UID, Cluster: h.Labels[infrav1.ClusterLabel]}
}

// SetConsumer implements claim.Inventory.
func (Pool) SetConsumer(h *metal3v1.BareMetalHost, c claim.Consumer) {
	h.Spec.ConsumerRef = &corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: ConsumerKind, Namespace: h.Namespace, Name: c.Name, UID: c.ID}
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[infrav1.ClusterLabel] = c.Cluster
}

// ClearConsumer implements claim.Inventory: the claim and whatever was handed to the host go.
func (Pool) ClearConsumer(h *metal3v1.BareMetalHost) {
	Withdraw(h)
	h.Spec.ConsumerRef = nil
	delete(h.Labels, infrav1.ClusterLabel)
}

// Withdraw removes what a machine handed to h and asks for it to be powered off; it reports whether h
// changed.
func Withdraw(h *metal3v1.BareMetalHost) bool {
	changed := h.Spec.Image != nil || h.Spec.UserData != nil || h.Spec.CustomDeploy != nil || h.Spec.Online
	h.Spec.Image, h.Spec.UserData, h.Spec.CustomDeploy, h.Spec.Online = nil, nil, nil, false
	return changed
}

// Available implements claim.Inventory: free, managed and ready (Metal3's "available", or the older
// "ready"), not paused or detached, not in error, not being deleted.
func (Pool) Available(h *metal3v1.BareMetalHost) bool {
	if h.Spec.ConsumerRef != nil || !h.DeletionTimestamp.IsZero() {
		return false
	}
	if _, ok := h.Annotations[metal3v1.PausedAnnotation]; ok {
		return false
	}
	if _, ok := h.Annotations[metal3v1.DetachedAnnotation]; ok {
		return false
	}
	if h.Status.ErrorType != "" || h.Status.OperationalStatus == metal3v1.OperationalStatusError ||
		h.Status.OperationalStatus == metal3v1.OperationalStatusDetached {
		return false
	}
	s := h.Status.Provisioning.State
	return s == metal3v1.StateAvailable || s == metal3v1.StateReady
}

// FailureDomain implements claim.Inventory.
func (Pool) FailureDomain(h *metal3v1.BareMetalHost) string {
	return h.Labels[infrav1.FailureDomainLabel]
}

// Demoted implements claim.Inventory: an available BareMetalHost is healthy by definition.
func (Pool) Demoted(*metal3v1.BareMetalHost) bool { return false }
