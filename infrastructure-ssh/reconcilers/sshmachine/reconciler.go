// Package sshmachine reconciles YonderSSHMachines with the shared claim reconciler (pkg/claim) and this
// provider's adapter: claim a free YonderSSHHost (recorded on the host before any SSH work), run the
// Machine's cloud-init bootstrap data on it over SSH as a run tracked on the host, set providerID, and on
// delete clean the host and release it back to the inventory.
package sshmachine

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostpool"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "yonder-ssh://"

// SSHTimeout bounds the SSH work of one reconcile (cleanup commands included).
const SSHTimeout = 5 * time.Minute

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachines;yondersshmachines/status;yondersshmachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

type (
	// Reconciler reconciles YonderSSHMachines.
	Reconciler = claim.Reconciler[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost]
	scope      = claim.Scope[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost]
)

// Adapter is the SSH provider's part of the claim reconciler: the hand-off is the bootstrap run over
// SSH, the withdrawal the host's cleanup.
type Adapter struct {
	hostpool.Pool
	Client client.Client
	// Name is the manager's name (user agent towards workload clusters).
	Name string
	// Dialer opens SSH connections.
	Dialer sshexec.Dialer
	// PollInterval is how often a running bootstrap is checked (default 10s).
	PollInterval time.Duration
	// RetryInterval is the first wait after an SSH failure; it doubles per attempt up to 5m (default 15s).
	RetryInterval time.Duration
	// CleanupRetries bounds cleanup attempts on delete before the operator must act (default 5).
	CleanupRetries int32
	// DefaultBootstrapTimeout applies when spec.bootstrapTimeout is empty (default 30m).
	DefaultBootstrapTimeout time.Duration
}

var _ claim.Adapter[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost] = &Adapter{}

// New returns the YonderSSHMachine reconciler: the claim reconciler with a as its adapter.
func New(c client.Client, apiReader client.Reader, watchFilterValue string, a *Adapter) *Reconciler {
	a.Client = c
	a.defaults()
	return &Reconciler{Client: c, APIReader: apiReader, WatchFilterValue: watchFilterValue, Adapter: a}
}

func (a *Adapter) defaults() {
	if a.PollInterval == 0 {
		a.PollInterval = 10 * time.Second
	}
	if a.RetryInterval == 0 {
		a.RetryInterval = 15 * time.Second
	}
	if a.CleanupRetries == 0 {
		a.CleanupRetries = 5
	}
	if a.DefaultBootstrapTimeout == 0 {
		a.DefaultBootstrapTimeout = 30 * time.Minute
	}
	if a.Dialer == nil {
		a.Dialer = sshexec.SSHDialer{}
	}
}

// MachineKind implements claim.Adapter.
func (a *Adapter) MachineKind() string { return hostpool.ConsumerKind }

// Finalizer implements claim.Adapter.
func (a *Adapter) Finalizer() string { return infrav1.MachineFinalizer }

// ControllerName implements claim.Adapter.
func (a *Adapter) ControllerName() string { return a.Name }

// NewMachine implements claim.Adapter.
func (a *Adapter) NewMachine() *infrav1.YonderSSHMachine { return &infrav1.YonderSSHMachine{} }

// ListMachines implements claim.Adapter.
func (a *Adapter) ListMachines(ctx context.Context, r client.Reader, namespace string) ([]*infrav1.YonderSSHMachine, error) {
	l := &infrav1.YonderSSHMachineList{}
	if err := r.List(ctx, l, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list YonderSSHMachines in namespace %s: %w", namespace, err)
	}
	out := make([]*infrav1.YonderSSHMachine, len(l.Items))
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
		Claimed:                   infrav1.YonderSSHMachineHostClaimedCondition,
		Provisioned:               infrav1.YonderSSHMachineBootstrapExecutedCondition,
		Released:                  infrav1.YonderSSHMachineHostCleanedCondition,
		ClaimedReason:             infrav1.YonderSSHMachineHostClaimedReason,
		NoHostAvailableReason:     infrav1.YonderSSHMachineNoHostAvailableReason,
		InvalidHostSelectorReason: infrav1.YonderSSHMachineInvalidHostSelectorReason,
		HostLostReason:            infrav1.YonderSSHMachineHostDeletedReason,
	}
}

// NoHostHint implements claim.Adapter.
func (a *Adapter) NoHostHint() string {
	return "a host is free once it has a pinned host key, no consumer and no " + infrav1.NeedsCleanupAnnotation + " annotation; register more hosts, or release or clean existing ones"
}

// HostPredicates implements claim.Adapter: only spec, label and annotation changes of hosts matter here
// (claims, releases, keys); the host controller's frequent status writes would wake machines for nothing.
func (a *Adapter) HostPredicates() []predicate.Predicate {
	return []predicate.Predicate{predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})}
}

// HostSelector implements claim.Adapter.
func (a *Adapter) HostSelector(m *infrav1.YonderSSHMachine) *metav1.LabelSelector {
	return m.Spec.HostSelector.LabelSelector()
}

// Provisioned implements claim.Adapter.
func (a *Adapter) Provisioned(m *infrav1.YonderSSHMachine) bool {
	return m.Status.Initialization.Provisioned != nil && *m.Status.Initialization.Provisioned
}

// ProviderID implements claim.Adapter.
func (a *Adapter) ProviderID(m *infrav1.YonderSSHMachine) string { return m.Spec.ProviderID }

// RecordHost implements claim.Adapter.
func (a *Adapter) RecordHost(m *infrav1.YonderSSHMachine, h *infrav1.YonderSSHHost) {
	m.Status.HostRef = h.Name
	m.Status.Addresses = addresses(h)
}

// runID is the name of m's bootstrap run on its host: its claim identity, so a moved machine finds it.
func runID(m *infrav1.YonderSSHMachine) string { return string(claim.ID(m, infrav1.ClaimIDAnnotation)) }
