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
	"fmt"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "yonder-metal://"

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachines;yondermetalmachines/status;yondermetalmachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal3.io,resources=baremetalhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

type (
	// Reconciler reconciles YonderMetalMachines.
	Reconciler = claim.Reconciler[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost]
	scope      = claim.Scope[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost]
)

// Adapter is the bare-metal provider's part of the claim reconciler: the hand-off is the image and
// user data written to the host's spec, the withdrawal their removal and the wait for deprovisioning.
type Adapter struct {
	hostpool.Pool
	Client client.Client
	// APIReader reads hosts uncached when a write conflicts.
	APIReader client.Reader
	// Name is the manager's name (user agent towards workload clusters).
	Name string
}

var _ claim.Adapter[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost] = &Adapter{}

// New returns the YonderMetalMachine reconciler: the claim reconciler with a as its adapter.
func New(c client.Client, apiReader client.Reader, watchFilterValue string, a *Adapter) *Reconciler {
	a.Client, a.APIReader = c, apiReader
	return &Reconciler{Client: c, APIReader: apiReader, WatchFilterValue: watchFilterValue, Adapter: a}
}

// MachineKind implements claim.Adapter.
func (a *Adapter) MachineKind() string { return hostpool.ConsumerKind }

// Finalizer implements claim.Adapter.
func (a *Adapter) Finalizer() string { return infrav1.MachineFinalizer }

// ControllerName implements claim.Adapter.
func (a *Adapter) ControllerName() string { return a.Name }

// NewMachine implements claim.Adapter.
func (a *Adapter) NewMachine() *infrav1.YonderMetalMachine { return &infrav1.YonderMetalMachine{} }

// ListMachines implements claim.Adapter.
func (a *Adapter) ListMachines(ctx context.Context, r client.Reader, namespace string) ([]*infrav1.YonderMetalMachine, error) {
	l := &infrav1.YonderMetalMachineList{}
	if err := r.List(ctx, l, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list YonderMetalMachines in namespace %s: %w", namespace, err)
	}
	out := make([]*infrav1.YonderMetalMachine, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// Keys implements claim.Adapter.
func (a *Adapter) Keys() claim.Keys {
	return claim.Keys{Host: infrav1.HostAnnotation, ReservedHost: infrav1.ReservedHostAnnotation, ClaimID: infrav1.ClaimIDAnnotation}
}

// Conditions implements claim.Adapter.
func (a *Adapter) Conditions() claim.Conditions {
	return claim.Conditions{
		Claimed:                   infrav1.YonderMetalMachineHostClaimedCondition,
		Provisioned:               infrav1.YonderMetalMachineHostProvisionedCondition,
		Released:                  infrav1.YonderMetalMachineHostReleasedCondition,
		ClaimedReason:             infrav1.YonderMetalMachineHostClaimedReason,
		NoHostAvailableReason:     infrav1.YonderMetalMachineNoHostAvailableReason,
		InvalidHostSelectorReason: infrav1.YonderMetalMachineInvalidHostSelectorReason,
		HostLostReason:            infrav1.YonderMetalMachineHostLostReason,
	}
}

// NoHostHint implements claim.Adapter.
func (a *Adapter) NoHostHint() string {
	return "a host is free once it is available (provisioning state available or ready), unclaimed, unpaused and without error; register or inspect more hosts, or fix the failing ones"
}

// HostPredicates implements claim.Adapter: host status matters here (provisioning state, errors), so
// every change of a host wakes its consumer.
func (a *Adapter) HostPredicates() []predicate.Predicate { return nil }

// HostSelector implements claim.Adapter.
func (a *Adapter) HostSelector(m *infrav1.YonderMetalMachine) *metav1.LabelSelector {
	return m.Spec.HostSelector.LabelSelector()
}

// Provisioned implements claim.Adapter.
func (a *Adapter) Provisioned(m *infrav1.YonderMetalMachine) bool {
	return ptr.Deref(m.Status.Initialization.Provisioned, false)
}

// ProviderID implements claim.Adapter.
func (a *Adapter) ProviderID(m *infrav1.YonderMetalMachine) string { return m.Spec.ProviderID }

// RecordHost implements claim.Adapter.
func (a *Adapter) RecordHost(m *infrav1.YonderMetalMachine, h *metal3v1.BareMetalHost) {
	m.Status.HostRef = h.Name
	m.Status.HostState = string(h.Status.Provisioning.State)
}

// updateHost applies change to the latest h and writes it, as long as m still holds h.
func (a *Adapter) updateHost(ctx context.Context, m *infrav1.YonderMetalMachine, h *metal3v1.BareMetalHost, change func(*metal3v1.BareMetalHost) bool) (*metal3v1.BareMetalHost, error) {
	return claim.UpdateClaimed(ctx, a.Client, a.APIReader, hostpool.Pool{}, h, m.Name, claim.ID(m, infrav1.ClaimIDAnnotation), change)
}
