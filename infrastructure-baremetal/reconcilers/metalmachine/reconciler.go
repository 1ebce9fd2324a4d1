// Package metalmachine reconciles YonderMetalMachines with the shared claim reconciler (pkg/claim) and this
// provider's adapter, the way CAPM3 reconciles Metal3Machines: claim a free, available Metal3
// BareMetalHost (spec.consumerRef written with optimistic concurrency before anything else), hand it the
// image and the Machine's bootstrap data, report the host provisioned with providerID
// yonder-metal://<namespace>/<host>, and on delete withdraw the image, wait for the host to be
// deprovisioned (cleaned) and available again, then clear the claim. The BareMetalHost is inventory: it is
// never created or deleted here.
package metalmachine

import (
	"context"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachines;yondermetalmachines/status;yondermetalmachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Adapter is the bare-metal provider's part of the claim reconciler: the hand-off is the image and
// user data written to the host's spec, the withdrawal their removal and the wait for deprovisioning.
type Adapter struct {
	hostpool.Pool
	Client client.Client
	// APIReader reads hosts uncached when a write conflicts.
	APIReader client.Reader
	// Name is the manager's name (user agent towards workload clusters).
	Name string

	// provisioned keeps what provisioned hosts' Secrets said (see inventory).
	provisioned provisionedData
}

var _ claim.Adapter[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost] = &Adapter{}

// New returns the YonderMetalMachine reconciler: the claim reconciler with a as its adapter.
func New(c client.Client, apiReader client.Reader, watchFilterValue string, a *Adapter) *claim.Reconciler[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost] {
	a.Client, a.APIReader = c, apiReader
	return &claim.Reconciler[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost]{Client: c, APIReader: apiReader, WatchFilterValue: watchFilterValue, Adapter: a}
}

// Spec implements claim.Adapter. Host status matters here (provisioning state, errors), so every change
// of a host wakes its consumer.
func (a *Adapter) Spec() claim.Spec {
	return claim.Spec{
		MachineKind: hostpool.ConsumerKind, Finalizer: infrav1.MachineFinalizer, ControllerName: a.Name,
		Keys: claim.Keys{Host: infrav1.HostAnnotation, ReservedHost: infrav1.ReservedHostAnnotation, ClaimID: infrav1.ClaimIDAnnotation},
		Conditions: claim.Conditions{Claimed: infrav1.YonderMetalMachineHostClaimedCondition, Provisioned: infrav1.YonderMetalMachineHostProvisionedCondition, Released: infrav1.YonderMetalMachineHostReleasedCondition, HostLostReason: infrav1.YonderMetalMachineHostLostReason,
			Progress: []string{infrav1.YonderMetalMachineHostProvisioningReason, infrav1.YonderMetalMachineDeprovisioningReason}},
		NoHostHint: "a host is free once it is available (provisioning state available or ready), unclaimed, unpaused and without error; " +
			"register or inspect more hosts, or fix the failing ones",
	}
}

// NewMachine implements claim.Adapter.
func (a *Adapter) NewMachine() *infrav1.YonderMetalMachine { return &infrav1.YonderMetalMachine{} }

// Facts implements claim.Adapter.
func (a *Adapter) Facts(m *infrav1.YonderMetalMachine) claim.Facts {
	return claim.Facts{HostSelector: m.Spec.HostSelector.LabelSelector(), Provisioned: ptr.Deref(m.Status.Initialization.Provisioned, false), ProviderID: m.Spec.ProviderID}
}

// RecordHost implements claim.Adapter.
func (a *Adapter) RecordHost(m *infrav1.YonderMetalMachine, h *metal3v1.BareMetalHost) {
	m.Status.HostRef = h.Name
	m.Status.HostState = string(h.Status.Provisioning.State)
}

// updateHost applies change to the latest h and writes it, as long as m still holds h.
func (a *Adapter) updateHost(ctx context.Context, m *infrav1.YonderMetalMachine, h *metal3v1.BareMetalHost, change func(*metal3v1.BareMetalHost) bool) (*metal3v1.BareMetalHost, error) {
	return claim.UpdateClaimed(ctx, a.Client, a.APIReader, hostpool.Pool{}, h, m.Name, claim.ID(m, infrav1.ClaimIDAnnotation), change)
}
