package claim

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"sigs.k8s.io/cluster-api/util/conditions"
)

// Consumer is who holds a host: an infrastructure machine, by name and by its claim ID (see ID), and
// the Cluster it belongs to (failure-domain spreading counts a Cluster's hosts).
type Consumer struct {
	Name    string
	ID      types.UID
	Cluster string
}

// Inventory adapts a provider's host kind to the claim algorithm: who holds a host, whether it can be
// claimed, where it is. H is the host type (a pointer, e.g. *infrav1.YonderSSHHost).
type Inventory[H client.Object] interface {
	// HostKind names the host kind in conditions, logs and errors.
	HostKind() string
	// NewHost returns an empty host to read into.
	NewHost() H
	// ConsumerOf returns the claim a machine of this provider recorded on h; nil when h is free or held
	// by a consumer of another kind.
	ConsumerOf(h H) *Consumer
	// SetConsumer records c's claim on h (in memory; the claim package writes it).
	SetConsumer(h H, c Consumer)
	// ClearConsumer removes the claim from h (in memory).
	ClearConsumer(h H)
	// Available reports whether h can be claimed now: free, healthy, ready, not being deleted.
	Available(h H) bool
	// FailureDomain returns h's failure domain ("" for none).
	FailureDomain(h H) string
	// Demoted reports whether h should be chosen only after every other candidate (e.g. its last
	// health probe failed).
	Demoted(h H) bool
}

// Machine is an infrastructure machine object (YonderSSHMachine, YonderMetalMachine).
type Machine interface {
	client.Object
	conditions.Setter
}

// Keys are the annotations a provider's machines carry for the claim, each in the provider's own
// group (their values are part of the provider's API).
type Keys struct {
	// Host names the claimed host; written only after the claim is recorded on the host.
	Host string
	// ReservedHost names the host the machine is about to claim, written with an optimistic lock on
	// the machine before the claim.
	ReservedHost string
	// ClaimID is the machine's claim identity (see ID).
	ClaimID string
}

// The reasons of the Claimed condition that every provider reports with the same value (each provider's
// API names them with its kind prefix).
const (
	// ClaimedReason: the host is claimed (Claimed=True).
	ClaimedReason = "HostClaimed"
	// NoHostAvailableReason: no free host matches the machine's selector and failure domain.
	NoHostAvailableReason = "NoHostAvailable"
	// InvalidHostSelectorReason: the machine's host selector does not parse.
	InvalidHostSelectorReason = "InvalidHostSelector"
)

// Conditions are the condition types a provider's machines report, and its reason for a lost host; the
// values are part of the provider's API. The other reasons are ClaimedReason, NoHostAvailableReason and
// InvalidHostSelectorReason, and CAPI's where one has the meaning (waiting for the cluster infrastructure
// or for bootstrap data, deleting).
type Conditions struct {
	// Claimed reports the claim ("HostClaimed").
	Claimed string
	// Provisioned reports the hand-off and provisioning of the host; with Claimed it makes Ready.
	Provisioned string
	// Released reports withdrawal and release on deletion.
	Released string
	// HostLostReason: the claimed host was deleted or its claim no longer names the machine.
	HostLostReason string
	// Progress are the reasons of a False condition that mean a step is under way (bootstrap running,
	// provisioning): recorded as Normal Events, where any other False reason is a Warning.
	Progress []string
	// QuietProgress records no Event when a condition turns to a Progress reason: the condition shows
	// the step under way, and its end (True, or a failure) is recorded. For steps that every machine
	// takes and that need no operator (an SSH bootstrap), where such an Event said what the condition
	// says, one more write per machine.
	QuietProgress bool
}

// Withdrawal is what a provider reports after withdrawing what it handed to a host on deletion.
type Withdrawal[H client.Object] struct {
	// Done: the host may be released now.
	Done bool
	// NodeStopped: nothing of the machine runs on the host any more (cleaned, deprovisioned), so a
	// Node left in an attached workload cluster can be removed without it registering again.
	NodeStopped bool
	// OnRelease, when set, changes the host further in the update that clears the claim (e.g. marks it
	// as released without cleanup).
	OnRelease func(H)
}

// Spec is what a provider's claim is made of: its machine kind, API keys and conditions.
type Spec struct {
	// MachineKind is the kind of the machines (also the consumer kind recorded on hosts).
	MachineKind string
	// Finalizer holds a machine until its host is released.
	Finalizer string
	// ControllerName names the manager (user agent towards workload clusters).
	ControllerName string
	// Keys are the machine annotations of the claim.
	Keys Keys
	// Conditions are the condition types and reasons of the claim.
	Conditions Conditions
	// NoHostHint tells the operator, after "no free host matches", what makes a host claimable and what
	// to do.
	NoHostHint string
	// HostPredicates filter the host events that wake machines (none: every change).
	HostPredicates []predicate.Predicate
}

// Facts are what the claim reads of a machine's spec and status.
type Facts struct {
	// HostSelector is spec.hostSelector.
	HostSelector *metav1.LabelSelector
	// Provisioned is status.initialization.provisioned.
	Provisioned bool
	// ProviderID is spec.providerID.
	ProviderID string
}

// Adapter is what a provider supplies to the claim reconciler: its kinds and API (Spec), and the
// provider-specific steps — hand-off while the claim stands, withdrawal before release.
type Adapter[M Machine, H client.Object] interface {
	Inventory[H]

	// Spec returns the provider's claim API.
	Spec() Spec
	// NewMachine returns an empty machine to read into.
	NewMachine() M
	// Facts reads the machine.
	Facts(m M) Facts
	// RecordHost writes what the machine reports of its claimed host (status.hostRef…).
	RecordHost(m M, h H)

	// Provision hands the claimed host what it needs and follows it until provisioned; called on every
	// reconcile while the claim stands, so it must be idempotent.
	Provision(ctx context.Context, s *Scope[M, H]) (ctrl.Result, error)
	// Withdraw takes back, on deletion, what Provision handed to the host; called on every reconcile
	// until it reports Done.
	Withdraw(ctx context.Context, s *Scope[M, H]) (Withdrawal[H], ctrl.Result, error)
	// ReleaseOrphan changes h, in the update that clears it, when the claim of the machine named machine
	// is released without that machine (orphan.go): its Withdraw never ran, so whatever it handed to the
	// host must not reach the next claim as it is.
	ReleaseOrphan(h H, machine string)
}
